package cdpgate

import (
	"context"
	"fmt"
)

// check decides a command that the table neither simply allows nor
// denies. nil forwards it (its params and after possibly changed), or
// answers it with c.local when set; a *cdpError refuses it;
// errBrowserClose ends the session.
type check func(ctx context.Context, g *gate, c *command) error

// rule is one row of the confinement table.
type rule struct {
	Method string // "Domain.method", or "Domain.*" for the rest of the domain
	Level  level  // where it applies: browser level (no sessionId), in a session, or both
	Allow  bool   // forwarded unchanged (when Check is nil); else denied
	Check  check  // decides instead of Allow
	Why    string
}

// Rule shorthands.
func allow(m string, l level, why string) rule            { return rule{m, l, true, nil, why} }
func deny(m string, l level, why string) rule             { return rule{m, l, false, nil, why} }
func checked(m string, l level, c check, why string) rule { return rule{m, l, false, c, why} }

// rules is the confinement table: a method is looked up by its exact
// name at its level, then by "Domain.*"; no row means denied. A denied
// method is answered {"code":-32601,"message":"<Method> is not allowed
// by the automation gate"}. docs/automation.md documents this table and
// TestDeniedMethods and TestRulesDocumented iterate it.
var rules = []rule{
	// Browser domain.
	allow("Browser.getVersion", bothLevels, "product and user agent; nothing about other users"),
	checked("Browser.close", browserLevel, closeBrowser, "not forwarded (it would end every user's browser): answered {} and the session ends"),
	checked("Browser.setDownloadBehavior", browserLevel, downloadBehavior, "per context: no browserContextId means the primary context, another user's is refused; in the primary context downloadPath is the worker's (Config.DownloadPath, files named by guid: allowAndName), never the client's; in the client's own contexts allow becomes deny; behavior \"default\" is refused (Chromium's default directory is the worker's, not the session's)"),
	checked("Browser.grantPermissions", browserLevel, inContext, "per context: no browserContextId means the primary context (else Chromium's default context, shared), another user's is refused"),
	checked("Browser.resetPermissions", browserLevel, inContext, "as grantPermissions"),
	checked("Browser.setPermission", browserLevel, inContext, "as grantPermissions"),
	checked("Browser.cancelDownload", browserLevel, inContext, "as grantPermissions"),
	checked("Browser.getWindowForTarget", bothLevels, windowForTarget, "an owned target only (in a session without targetId: the session's own). Asked in a session of the gate's own, since the headless shell crashes on an unknown targetId (measured, Chromium 156)"),
	checked("Browser.getWindowBounds", bothLevels, windowParam, "windowIds this session got from getWindowForTarget only"),
	checked("Browser.setWindowBounds", bothLevels, windowParam, "as getWindowBounds"),
	checked("Browser.setContentsSize", bothLevels, windowParam, "as getWindowBounds"),
	deny("Browser.crash", bothLevels, "kills Chromium, every user's browser"),
	deny("Browser.crashGpuProcess", bothLevels, "the GPU process is shared by all contexts"),
	deny("Browser.getBrowserCommandLine", bothLevels, "the worker's command line (ports, paths, flags)"),
	deny("Browser.executeBrowserCommand", bothLevels, "browser-wide commands"),
	deny("Browser.getHistograms", bothLevels, "browser-wide metrics, other users' activity in them"),
	deny("Browser.getHistogram", bothLevels, "as getHistograms"),
	deny("Browser.addMockCamera", bothLevels, "the device list is shared by every context (protocol doc)"),
	deny("Browser.setGlobalPrivacyControl", bothLevels, "a browser-wide setting"),
	deny("Browser.*", bothLevels, "the rest of Browser is browser-wide (setDockTile, getGlobalPrivacyControl, addPrivacySandboxEnrollmentOverride, …)"),

	// Target domain.
	checked("Target.getTargets", browserLevel, getTargets, "result filtered to targets in owned contexts"),
	checked("Target.getTargetInfo", bothLevels, getTargetInfo, "an owned targetId; none: the browser target (browser level) or the session's own"),
	checked("Target.getBrowserContexts", browserLevel, getBrowserContexts, "answered by the gate: the client's contexts, and the primary as defaultBrowserContextId"),
	allow("Target.setDiscoverTargets", bothLevels, "target events are filtered by context (see Events); in a page session Chromium would report every target"),
	checked("Target.setAutoAttach", bothLevels, setAutoAttach, "flatten: true only (non-flat sessions would bypass the sessionId checks); attachments to other users' targets are undone (see Events)"),
	checked("Target.attachToTarget", bothLevels, attachToTarget, "an owned targetId, flatten: true only; the session is recorded"),
	checked("Target.autoAttachRelated", browserLevel, ownedTarget, "an owned targetId only"),
	checked("Target.closeTarget", browserLevel, closeTarget, "an owned targetId only, and not the session's own page (Config.Page): it is the session's browser, which its viewers, snapshots and failover follow"),
	checked("Target.activateTarget", browserLevel, ownedTarget, "an owned targetId only"),
	checked("Target.detachFromTarget", bothLevels, detachFromTarget, "the session's own sessionIds (and owned targetIds) only"),
	checked("Target.createTarget", browserLevel, createTarget, "no browserContextId: the primary context (else Chromium's default context); an owned one; another user's is refused"),
	checked("Target.createBrowserContext", browserLevel, createBrowserContext, "up to Config.MaxContexts at once; client proxyServer/proxyBypassList refused; disposeOnDetach forced; Config.ContextParams applied; Config.OnContext told; disposed at the end"),
	checked("Target.disposeBrowserContext", browserLevel, disposeBrowserContext, "contexts the client created only (not the primary)"),
	checked("Target.attachToBrowserTarget", browserLevel, attachToBrowserTarget, "answered by the gate with a browser session of its own (a real one would be the whole browser): commands in it are taken at browser level under this table, browser-level events and CloudBrowser's own (takeover) are copied into it"),
	deny("Target.attachToBrowserTarget", sessionLevel, "only at browser level"),
	deny("Target.exposeDevToolsProtocol", bothLevels, "gives a page a browser-level protocol binding"),
	deny("Target.sendMessageToTarget", bothLevels, "non-flat sessions: their messages would bypass the sessionId checks"),
	deny("Target.setRemoteLocations", bothLevels, "makes Chromium discover targets on other hosts"),
	deny("Target.openDevTools", bothLevels, "DevTools windows (a frontend with browser-level access)"),
	deny("Target.getDevToolsTarget", bothLevels, "as openDevTools"),
	deny("Target.*", bothLevels, "the rest of Target (in a session also getTargets, createTarget, …: Chromium answers them for the whole browser)"),

	// Storage: cookies per context; the rest is denied.
	checked("Storage.getCookies", browserLevel, inContext, "per context: no browserContextId means the primary context (else Chromium's default context), another user's is refused"),
	checked("Storage.setCookies", browserLevel, inContext, "as getCookies"),
	checked("Storage.clearCookies", browserLevel, inContext, "as getCookies"),
	deny("Storage.getCookies", sessionLevel, "in a session Chromium reads Chromium's default context, not the session's (measured: a page's Storage.getCookies returned the default context's cookies) and refuses a browserContextId; use Network.getCookies or the browser-level command"),
	deny("Storage.setCookies", sessionLevel, "as getCookies in a session: it wrote into Chromium's default context (measured)"),
	deny("Storage.clearCookies", sessionLevel, "as getCookies in a session"),
	deny("Storage.*", bothLevels, "origin-keyed storage tools; some are browser-wide (attribution reporting, interest groups, bounce tracking mitigations); not needed by the clients"),

	// Browser-wide domains.
	deny("SystemInfo.*", bothLevels, "the machine's GPU and every Chromium process (other users' renderers)"),
	deny("Tracing.*", bothLevels, "traces the whole browser, every context"),
	deny("Memory.*", bothLevels, "process-wide: memory pressure, sampling profiles, DOM counters"),
	deny("Security.*", browserLevel, "setIgnoreCertificateErrors on the browser target ignores certificate errors in every context"),
	deny("Fetch.*", browserLevel, "on the browser target it intercepts every context's requests"),

	// Session domains: per target.
	allow("Accessibility.*", sessionLevel, "per target"),
	allow("Animation.*", sessionLevel, "per target"),
	allow("Audits.*", sessionLevel, "per target"),
	allow("CacheStorage.*", sessionLevel, "the target's storage partition"),
	allow("Console.*", sessionLevel, "per target"),
	allow("CSS.*", sessionLevel, "per target"),
	allow("Debugger.*", sessionLevel, "per target"),
	allow("DeviceOrientation.*", sessionLevel, "per target"),
	allow("DOM.*", sessionLevel, "per target"),
	allow("DOMDebugger.*", sessionLevel, "per target"),
	allow("DOMSnapshot.*", sessionLevel, "per target"),
	allow("DOMStorage.*", sessionLevel, "the target's storage partition"),
	allow("Emulation.*", sessionLevel, "per target"),
	allow("EventBreakpoints.*", sessionLevel, "per target"),
	allow("Fetch.*", sessionLevel, "the target's requests"),
	allow("HeapProfiler.*", sessionLevel, "the target's isolate (contexts never share a renderer)"),
	allow("IndexedDB.*", sessionLevel, "the target's storage partition"),
	allow("Input.*", sessionLevel, "per target"),
	allow("Inspector.*", sessionLevel, "per target"),
	allow("IO.*", sessionLevel, "streams of the target (printToPDF, screen recording, response bodies)"),
	allow("LayerTree.*", sessionLevel, "per target"),
	allow("Log.*", sessionLevel, "per target"),
	allow("Media.*", sessionLevel, "per target"),
	allow("Network.*", sessionLevel, "the target's requests and its context's cookies"),
	allow("Overlay.*", sessionLevel, "per target"),
	allow("Page.*", sessionLevel, "per target"),
	allow("Performance.*", sessionLevel, "per target"),
	allow("PerformanceTimeline.*", sessionLevel, "per target"),
	allow("Preload.*", sessionLevel, "per target"),
	allow("Profiler.*", sessionLevel, "the target's isolate"),
	allow("Runtime.*", sessionLevel, "the target's isolate"),
	allow("Schema.*", sessionLevel, "protocol description"),
	allow("Security.*", sessionLevel, "per target"),
	allow("ServiceWorker.*", sessionLevel, "the target's storage partition"),
	allow("WebAudio.*", sessionLevel, "per target"),
	allow("WebAuthn.*", sessionLevel, "virtual authenticators of the target"),

	// Denied inside the session domains.
	checked("Runtime.runIfWaitingForDebugger", sessionLevel, resume, "forwarded; the gate notes the target runs (it resumes the ones still paused at the end)"),
	deny("Security.setIgnoreCertificateErrors", sessionLevel, "turns TLS checks off (browser-wide on the browser target); the worker's egress policy relies on them"),
	deny("Security.setOverrideCertificateErrors", sessionLevel, "the same effect as setIgnoreCertificateErrors, by answering each error"),
	deny("Security.handleCertificateError", sessionLevel, "as setOverrideCertificateErrors"),
	deny("Network.clearBrowserCache", sessionLevel, "named and documented as browser-wide: default deny (Network.setCacheDisabled covers the need)"),
	deny("Network.setCookieControls", sessionLevel, "third-party cookie controls; whether Chromium scopes them to the context is not verified"),
	checked("Page.navigate", sessionLevel, webURL, "http(s), data:, blob: and about: URLs only: a navigation the client asks for is browser-initiated, so it could open file: (the worker's disk), chrome:// or devtools:// pages that no page may open itself"),
	deny("Network.loadNetworkResource", sessionLevel, "the browser fetches a URL for the client, file: included, outside the page"),
	deny("Page.crash", sessionLevel, "crashes a renderer, which the worker would take for a browser crash"),
	deny("Page.setDownloadBehavior", sessionLevel, "deprecated; its downloadPath is a path on the worker's disk, and it cannot be pointed at Config.DownloadPath per context (use Browser.setDownloadBehavior)"),
	deny("Page.setRPHRegistrationMode", sessionLevel, "test-only auto-accept of protocol handlers; scope not verified"),
	deny("Page.setSPCTransactionMode", sessionLevel, "test-only auto-accept of payment confirmations; scope not verified"),
	deny("DOM.setFileInputFiles", sessionLevel, "takes paths on the worker's disk: the page could upload the worker's files (other users' downloads); set files by content instead (Playwright: buffers)"),
	checked("Input.dispatchDragEvent", sessionLevel, noDragFiles, "data.files are paths on the worker's disk (as DOM.setFileInputFiles): refused"),
	deny("Emulation.addScreen", sessionLevel, "headless screens are shared by every context (measured: a screen added in one page is in every page's getScreenInfos)"),
	deny("Emulation.updateScreen", sessionLevel, "as addScreen"),
	deny("Emulation.removeScreen", sessionLevel, "as addScreen"),
	deny("Emulation.setPrimaryScreen", sessionLevel, "as addScreen"),
}

// index maps level and method (or "Domain.*") to its rule.
var index = func() map[level]map[string]*rule {
	idx := map[level]map[string]*rule{browserLevel: {}, sessionLevel: {}}
	for i := range rules {
		r := &rules[i]
		for _, l := range []level{browserLevel, sessionLevel} {
			if r.Level&l == 0 {
				continue
			}
			if idx[l][r.Method] != nil {
				panic(fmt.Sprintf("cdpgate: two rules for %s at level %d", r.Method, l))
			}
			idx[l][r.Method] = r
		}
	}
	return idx
}()

func lookup(l level, method string) *rule {
	if r := index[l][method]; r != nil {
		return r
	}
	return index[l][domain(method)+".*"]
}

// decide applies the table to a command.
func decide(ctx context.Context, g *gate, c *command) error {
	if c.session != "" && !g.own.session(c.session) {
		return errNoSession
	}
	r := lookup(c.level(), c.method)
	switch {
	case r == nil:
		return notAllowed(c.method)
	case r.Check != nil:
		if g.uw != nil {
			g.uw.flush() // the commands before it go first, whatever the check waits for
		}
		if err := c.decodeParams(); err != nil {
			return &cdpError{Code: codeInvalidParams, Message: err.Error()}
		}
		return r.Check(ctx, g, c)
	case r.Allow:
		return nil
	}
	return notAllowed(c.method)
}
