package cdpgate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
)

// TestGetTargetsHidesOthers: Target.getTargets lists the session's pages
// and never the victim's (nor Chromium's default context's blank tab).
func TestGetTargetsHidesOthers(t *testing.T) {
	f := newFixture(t, nil)
	c := f.client()
	mine, _ := ownPage(t, c, "about:blank")
	for _, params := range []any{nil, map[string]any{"filter": []any{map[string]any{}}}} {
		got := must[struct {
			TargetInfos []targetInfo `json:"targetInfos"`
		}](c, "", "Target.getTargets", params).TargetInfos
		var ids []string
		for _, ti := range got {
			if ti.BrowserContextID != f.primary {
				t.Errorf("getTargets %v lists %+v outside the primary context", params, ti)
			}
			ids = append(ids, ti.TargetID)
		}
		if !slices.Contains(ids, mine) {
			t.Errorf("getTargets %v misses the session's page %s: %v", params, mine, ids)
		}
	}
	// The victim is there all along.
	f.alive(f.victimT, 7)
}

// TestDiscoverTargetsHidesOthers: with discovery on, target events of the
// victim's context never reach the client; the session's do.
func TestDiscoverTargetsHidesOthers(t *testing.T) {
	f := newFixture(t, nil)
	c := f.client()
	must[json.RawMessage](c, "", "Target.setDiscoverTargets", map[string]any{"discover": true})
	v2 := f.newPage(f.victim, "about:blank")
	mine := f.newPage(f.primary, "about:blank") // after the victim's: its event comes later
	c.waitEvent("Target.targetCreated", func(e event) bool { return strings.Contains(string(e.Params), mine) })
	f.admin.Do("", "Target.closeTarget", map[string]any{"targetId": v2})
	f.admin.Do("", "Target.closeTarget", map[string]any{"targetId": mine})
	c.waitEvent("Target.targetDestroyed", func(e event) bool { return strings.Contains(string(e.Params), mine) })
	for _, s := range []string{f.victim, f.victimT, v2} {
		if hits := c.mentions(s); len(hits) > 0 {
			t.Errorf("events mention the victim's %s: %+v", s, hits)
		}
	}
	for _, e := range c.Events() {
		if !strings.HasPrefix(e.Method, "Target.") {
			t.Errorf("unexpected event %s", e.Method)
		}
	}
}

// TestAutoAttachNeverYieldsOthers: a browser-level auto-attach with
// waitForDebuggerOnStart attaches the gate's connection to every page;
// the client sees only its own, and a new victim page that Chromium
// paused for it is resumed and runs.
func TestAutoAttachNeverYieldsOthers(t *testing.T) {
	f := newFixture(t, nil)
	c := f.client()
	must[json.RawMessage](c, "", "Target.setAutoAttach", map[string]any{"autoAttach": true, "waitForDebuggerOnStart": true, "flatten": true})
	v2 := f.newPage(f.victim, `data:text/html,<script>window.alive = 8</script>`)
	mine := must[struct {
		TargetID string `json:"targetId"`
	}](c, "", "Target.createTarget", map[string]any{"url": "about:blank"}).TargetID
	att := c.waitEvent("Target.attachedToTarget", func(e event) bool { return strings.Contains(string(e.Params), mine) })
	var p struct {
		SessionID          string `json:"sessionId"`
		WaitingForDebugger bool   `json:"waitingForDebugger"`
	}
	json.Unmarshal(att.Params, &p)
	if !p.WaitingForDebugger {
		t.Errorf("the session's new page is not waiting for the debugger: %s", att.Params)
	}
	must[json.RawMessage](c, p.SessionID, "Runtime.runIfWaitingForDebugger", nil)
	if got := c.evaluate(p.SessionID, "1 + 1"); got != float64(2) {
		t.Errorf("own page: %v", got)
	}

	// The victim's pages: never shown, not left paused.
	for _, s := range []string{f.victim, f.victimT, v2} {
		if hits := c.mentions(s); len(hits) > 0 {
			t.Errorf("events mention the victim's %s: %+v", s, hits)
		}
	}
	if !f.logs.Contains(v2) {
		t.Errorf("the gate did not log detaching from the new victim page %s", v2)
	}
	f.alive(v2, 8)
	f.alive(f.victimT, 7)
}

// TestPausedPagesResumedAtEnd: a page in the primary context (the user's
// browser) that the client's auto-attach paused and the client never
// resumed runs once the session ends (the gate resumes it, and Chromium
// would when the connection closes).
func TestPausedPagesResumedAtEnd(t *testing.T) {
	f := newFixture(t, nil)
	c := f.client()
	must[json.RawMessage](c, "", "Target.setAutoAttach", map[string]any{"autoAttach": true, "waitForDebuggerOnStart": true, "flatten": true})
	page := f.newPage(f.primary, `data:text/html,<script>window.alive = 9</script>`)
	c.waitEvent("Target.attachedToTarget", func(e event) bool {
		return strings.Contains(string(e.Params), page) && strings.Contains(string(e.Params), `"waitingForDebugger":true`)
	})
	c.Close()
	if r := f.result(); r.err != nil || r.res.Reason != ReasonClientGone {
		t.Fatalf("session ended with %+v", r)
	}
	f.alive(page, 9)
}

// TestOthersRefused: every command that names another user's target,
// session or context fails, and the victim's page is untouched.
func TestOthersRefused(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.MaxContexts = 1 })
	c := f.client()
	_, own := ownPage(t, c, "about:blank")
	adminSession := must[struct {
		SessionID string `json:"sessionId"`
	}](f.admin, "", "Target.attachToTarget", map[string]any{"targetId": f.victimT, "flatten": true}).SessionID
	vt := map[string]any{"targetId": f.victimT}
	vc := map[string]any{"browserContextId": f.victim}
	tests := []struct {
		session, method string
		params          map[string]any
	}{
		{"", "Target.attachToTarget", map[string]any{"targetId": f.victimT, "flatten": true}},
		{own, "Target.attachToTarget", map[string]any{"targetId": f.victimT, "flatten": true}},
		{"", "Target.closeTarget", vt},
		{"", "Target.activateTarget", vt},
		{"", "Target.getTargetInfo", vt},
		{own, "Target.getTargetInfo", vt},
		{"", "Target.autoAttachRelated", map[string]any{"targetId": f.victimT, "waitForDebuggerOnStart": false}},
		{"", "Browser.getWindowForTarget", vt},
		{own, "Browser.getWindowForTarget", vt},
		{"", "Browser.getWindowForTarget", map[string]any{"targetId": "no-such-target"}}, // crashes the headless shell unguarded
		{"", "Browser.getWindowForTarget", nil},
		{"", "Browser.setWindowBounds", map[string]any{"windowId": 1, "bounds": map[string]any{"width": 100}}},
		{"", "Target.detachFromTarget", map[string]any{"sessionId": adminSession}},
		{"", "Target.detachFromTarget", vt},
		{adminSession, "Runtime.evaluate", map[string]any{"expression": "1"}},
		{"", "Target.createTarget", map[string]any{"url": "about:blank", "browserContextId": f.victim}},
		{"", "Target.disposeBrowserContext", vc},
		{"", "Target.disposeBrowserContext", map[string]any{"browserContextId": f.primary}},
		{"", "Storage.getCookies", vc},
		{"", "Storage.setCookies", map[string]any{"browserContextId": f.victim, "cookies": []any{}}},
		{"", "Storage.clearCookies", vc},
		{own, "Storage.getCookies", vc},
		{own, "Storage.getCookies", nil}, // Chromium's default context
		{"", "Browser.setDownloadBehavior", map[string]any{"behavior": "deny", "browserContextId": f.victim}},
		{"", "Browser.grantPermissions", map[string]any{"permissions": []any{"geolocation"}, "browserContextId": f.victim}},
		{"", "Browser.resetPermissions", vc},
		{"", "Browser.setPermission", map[string]any{"permission": map[string]any{"name": "geolocation"}, "setting": "granted", "browserContextId": f.victim}},
		{"", "Browser.cancelDownload", map[string]any{"guid": "x", "browserContextId": f.victim}},
		{"", "Target.setAutoAttach", map[string]any{"autoAttach": true, "waitForDebuggerOnStart": false}},
		{"", "Target.attachToTarget", map[string]any{"targetId": f.victimT}},
		{"", "Target.createBrowserContext", map[string]any{"proxyServer": "direct://"}},
		{"", "Target.createBrowserContext", map[string]any{"proxyBypassList": "<-loopback>"}},
		{own, "Input.dispatchDragEvent", map[string]any{"type": "drop", "x": 1, "y": 1, "data": map[string]any{"items": []any{}, "files": []any{"/etc/passwd"}, "dragOperationsMask": 1}}},
		{"", "Browser.setDownloadBehavior", map[string]any{"behavior": "default"}},
	}
	for _, tt := range tests {
		r := c.raw(tt.session, tt.method, tt.params)
		if r.Error == nil {
			t.Errorf("%s %s %v: succeeded: %s", tt.session, tt.method, tt.params, r.Result)
		}
	}
	f.alive(f.victimT, 7)
	if !slices.Contains(f.contextsUpstream(), f.victim) {
		t.Error("the victim's context is gone")
	}
	if got := f.contexts.list(); len(got) > 0 {
		t.Errorf("contexts created: %v", got)
	}
}

// TestCreateTargetInPrimary: a page without browserContextId lands in
// the primary context, not in Chromium's default one.
func TestCreateTargetInPrimary(t *testing.T) {
	f := newFixture(t, nil)
	c := f.client()
	target := must[struct {
		TargetID string `json:"targetId"`
	}](c, "", "Target.createTarget", map[string]any{"url": "about:blank"}).TargetID
	if got := f.contextOf(target); got != f.primary {
		t.Fatalf("new page in context %s, want the primary %s", got, f.primary)
	}
	info := must[struct {
		TargetInfo targetInfo `json:"targetInfo"`
	}](c, "", "Target.getTargetInfo", map[string]any{"targetId": target}).TargetInfo
	if info.BrowserContextID != f.primary {
		t.Fatalf("getTargetInfo through the gate: %+v", info)
	}
	// Its window is the session's to resize.
	w := must[struct {
		WindowID int64 `json:"windowId"`
	}](c, "", "Browser.getWindowForTarget", map[string]any{"targetId": target}).WindowID
	must[json.RawMessage](c, "", "Browser.getWindowBounds", map[string]any{"windowId": w})
}

// TestCreateBrowserContext: contexts count against MaxContexts, get the
// worker's params and OnContext, and are disposed when the session ends.
func TestCreateBrowserContext(t *testing.T) {
	f := newFixture(t, func(c *Config) {
		c.MaxContexts = 1
		prev := c.ContextParams
		c.ContextParams = func(p map[string]any) { prev(p); p["proxyBypassList"] = "<-loopback>" }
	})
	c := f.client()
	id := must[struct {
		BrowserContextID string `json:"browserContextId"`
	}](c, "", "Target.createBrowserContext", nil).BrowserContextID
	if code, msg := cdpErr(t, c, "", "Target.createBrowserContext", nil); code != codeServerError || !strings.Contains(msg, "1 contexts") {
		t.Errorf("second context: %d %s", code, msg)
	}
	target := must[struct {
		TargetID string `json:"targetId"`
	}](c, "", "Target.createTarget", map[string]any{"url": "about:blank", "browserContextId": id}).TargetID
	if got := f.contextOf(target); got != id {
		t.Errorf("page in %s, want %s", got, id)
	}
	got := must[struct {
		IDs     []string `json:"browserContextIds"`
		Default string   `json:"defaultBrowserContextId"`
	}](c, "", "Target.getBrowserContexts", nil)
	if !slices.Equal(got.IDs, []string{id}) || got.Default != f.primary {
		t.Errorf("getBrowserContexts: %+v", got)
	}
	f.contexts.mu.Lock()
	params := jsonOf(t, f.contexts.params)
	f.contexts.mu.Unlock()
	if params != `[{"disposeOnDetach":true,"proxyBypassList":"\u003c-loopback\u003e"}]` {
		t.Errorf("ContextParams saw %s", params)
	}
	if !slices.Contains(f.contextsUpstream(), id) {
		t.Fatal("the new context is not in Chromium")
	}

	c.Close()
	if r := f.result(); r.err != nil || r.res.Reason != ReasonClientGone {
		t.Fatalf("session ended with %+v", r)
	}
	if slices.Contains(f.contextsUpstream(), id) {
		t.Error("the client's context outlived the session")
	}
	if got := f.contexts.list(); !slices.Equal(got, []string{"+" + id, "-" + id}) {
		t.Errorf("OnContext calls: %v", got)
	}
	if !slices.Contains(f.contextsUpstream(), f.primary) {
		t.Error("the primary context was disposed")
	}
}

// TestDisposeBrowserContext: the client may dispose what it created, and
// the slot is free again.
func TestDisposeBrowserContext(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.MaxContexts = 1 })
	c := f.client()
	for range 2 {
		id := must[struct {
			BrowserContextID string `json:"browserContextId"`
		}](c, "", "Target.createBrowserContext", nil).BrowserContextID
		must[json.RawMessage](c, "", "Target.disposeBrowserContext", map[string]any{"browserContextId": id})
		if slices.Contains(f.contextsUpstream(), id) {
			t.Fatal("disposed context still in Chromium")
		}
	}
	if got := f.contexts.list(); len(got) != 4 {
		t.Errorf("OnContext calls: %v", got)
	}
}

// TestBrowserClose: Browser.close ends the session, not Chromium.
func TestBrowserClose(t *testing.T) {
	f := newFixture(t, nil)
	c := f.client()
	must[json.RawMessage](c, "", "Browser.close", nil)
	if ce := c.closed(); ce.Code != websocket.CloseNormalClosure {
		t.Errorf("close frame %v", ce)
	}
	if r := f.result(); r.err != nil || r.res.Reason != ReasonBrowserClose || r.res.Forwarded != 0 {
		t.Errorf("session ended with %+v", r)
	}
	f.alive(f.victimT, 7)
}

// probe is a method name for a rule: "Domain.*" becomes a method of that
// domain no other rule names.
func probe(method string) string {
	if d, ok := strings.CutSuffix(method, ".*"); ok {
		return d + ".gateProbe"
	}
	return method
}

// TestDeniedMethods iterates the table: every denied method, at every
// level its rule names, gets the gate's CDP error with its name.
func TestDeniedMethods(t *testing.T) {
	f := newFixture(t, nil)
	c := f.client()
	_, own := ownPage(t, c, "about:blank")
	n := 0
	for _, r := range rules {
		if r.Allow || r.Check != nil {
			continue
		}
		for _, l := range []level{browserLevel, sessionLevel} {
			if r.Level&l == 0 {
				continue
			}
			session := ""
			if l == sessionLevel {
				session = own
			}
			m := probe(r.Method)
			code, msg := cdpErr(t, c, session, m, nil)
			if code != codeNotFound || msg != m+" is not allowed by the automation gate" {
				t.Errorf("%s (session %q): %d %s", m, session, code, msg)
			}
			n++
		}
	}
	// Not in the table: denied at browser level, where the default is deny.
	for _, m := range []string{"Network.enable", "Page.navigate", "Runtime.evaluate", "Emulation.setDeviceMetricsOverride", "IO.read", "Foo.bar", "page.crash"} {
		if code, msg := cdpErr(t, c, "", m, nil); code != codeNotFound || msg != m+" is not allowed by the automation gate" {
			t.Errorf("%s: %d %s", m, code, msg)
		}
		n++
	}
	if r := c.raw(own, "Browser.getVersion", nil); r.Error != nil {
		t.Errorf("Browser.getVersion in a session: %+v", r.Error)
	}
	t.Logf("%d denials checked", n)
}

// TestUnknownSession: a sessionId the gate did not record is refused,
// whether it exists in Chromium or not.
func TestUnknownSession(t *testing.T) {
	f := newFixture(t, nil)
	c := f.client()
	adminSession := must[struct {
		SessionID string `json:"sessionId"`
	}](f.admin, "", "Target.attachToTarget", map[string]any{"targetId": f.victimT, "flatten": true}).SessionID
	for _, s := range []string{"no-such-session", adminSession} {
		r := c.raw(s, "Runtime.evaluate", map[string]any{"expression": "window.alive = 0"})
		if r.Error == nil || r.Error.Code != errNoSession.Code || r.Error.Message != errNoSession.Message {
			t.Errorf("session %s: %+v %s", s, r.Error, r.Result)
		}
	}
	f.alive(f.victimT, 7)
}

// TestSessionLevel: an owned page works through the gate with the usual
// session commands, and its detach forgets the session.
func TestSessionLevel(t *testing.T) {
	f := newFixture(t, nil)
	c := f.client()
	target, s := ownPage(t, c, `data:text/html,<title>mine</title>`)
	must[json.RawMessage](c, s, "Page.enable", nil)
	must[json.RawMessage](c, s, "Network.enable", nil)
	must[json.RawMessage](c, s, "Network.setCookie", map[string]any{"name": "a", "value": "1", "url": "http://mine.test/"})
	must[json.RawMessage](f.admin, "", "Storage.setCookies", map[string]any{"browserContextId": f.victim,
		"cookies": []any{map[string]any{"name": "victim", "value": "secret", "domain": "victim.test", "path": "/"}}})
	for _, cs := range []struct {
		session, method string
		params          any
	}{
		{"", "Storage.getCookies", nil},
		{s, "Network.getAllCookies", nil},
		{s, "Network.getCookies", map[string]any{"urls": []string{"http://mine.test/", "http://victim.test/"}}},
	} {
		got := string(must[json.RawMessage](c, cs.session, cs.method, cs.params))
		if strings.Contains(got, "secret") || !strings.Contains(got, "mine.test") {
			t.Errorf("%s (session %q): %s", cs.method, cs.session, got)
		}
	}
	if got := c.evaluate(s, "document.title"); got != "mine" {
		t.Errorf("title %v", got)
	}
	w := must[struct {
		WindowID int64 `json:"windowId"`
	}](c, s, "Browser.getWindowForTarget", nil).WindowID
	must[json.RawMessage](c, s, "Browser.setWindowBounds", map[string]any{"windowId": w, "bounds": map[string]any{"width": 900, "height": 700}})
	must[json.RawMessage](c, "", "Target.detachFromTarget", map[string]any{"sessionId": s})
	c.waitEvent("Target.detachedFromTarget", func(e event) bool { return strings.Contains(string(e.Params), s) })
	if code, _ := cdpErr(t, c, s, "Runtime.evaluate", map[string]any{"expression": "1"}); code != errNoSession.Code {
		t.Errorf("detached session: code %d", code)
	}
	must[json.RawMessage](c, "", "Target.closeTarget", map[string]any{"targetId": target})
}

// TestWebURLsOnly: the client opens web pages, never the worker's files or
// Chromium's own pages, by navigation or with a new target.
func TestWebURLsOnly(t *testing.T) {
	f := newFixture(t, nil)
	c := f.client()
	_, s := ownPage(t, c, `data:text/html,<title>mine</title>`)
	for _, u := range []string{"file:///etc/passwd", "FILE:///etc/hostname", "chrome://version", "devtools://devtools/bundled/inspector.html",
		"about:version", "view-source:http://example.test/", "chrome-extension://x/y"} {
		if code, msg := cdpErr(t, c, s, "Page.navigate", map[string]any{"url": u}); code != -32602 {
			t.Errorf("Page.navigate %s: %d %s", u, code, msg)
		}
		if code, msg := cdpErr(t, c, "", "Target.createTarget", map[string]any{"url": u}); code != -32602 {
			t.Errorf("Target.createTarget %s: %d %s", u, code, msg)
		}
	}
	if code, _ := cdpErr(t, c, s, "Network.loadNetworkResource", map[string]any{"url": "file:///etc/passwd", "options": map[string]any{"disableCache": true, "includeCredentials": false}}); code != -32601 {
		t.Errorf("Network.loadNetworkResource: %d", code)
	}
	must[json.RawMessage](c, s, "Page.navigate", map[string]any{"url": "about:blank"})
	must[json.RawMessage](c, s, "Page.navigate", map[string]any{"url": "data:text/html,<title>data</title>"})
}

// TestInvalidFrames: anything but a command object closes the client
// with 1007.
func TestInvalidFrames(t *testing.T) {
	f := newFixture(t, nil)
	for _, frame := range []string{
		`not json`,
		`[1,2]`,
		`null`,
		`{"method":"Browser.getVersion"}`,
		`{"id":"1","method":"Browser.getVersion"}`,
		`{"id":1.5,"method":"Browser.getVersion"}`,
		`{"id":99999999999999999999,"method":"Browser.getVersion"}`,
		`{"id":1}`,
		`{"id":1,"method":""}`,
		`{"id":1,"method":7}`,
		`{"id":1,"method":"Browser.getVersion","params":[]}`,
		`{"id":1,"method":"Browser.getVersion","sessionId":5}`,
		`{"id":1,"method":"Browser.getVersion"} {"id":2}`,
	} {
		c := f.client()
		c.send(frame)
		if ce := c.closed(); ce.Code != websocket.CloseInvalidFramePayloadData {
			t.Errorf("%s: close %v", frame, ce)
		}
		if r := f.result(); r.res.Reason != ReasonClientError || r.err == nil {
			t.Errorf("%s: session ended with %+v", frame, r)
		}
	}
}

// TestMessageTooBig: a message over MaxMessage closes with 1009.
func TestMessageTooBig(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.MaxMessage = 1024 })
	c := f.client()
	c.send(fmt.Sprintf(`{"id":1,"method":"Browser.getVersion","params":{"pad":%q}}`, strings.Repeat("x", 2048)))
	if ce := c.closed(); ce.Code != websocket.CloseMessageTooBig {
		t.Errorf("close %v", ce)
	}
	if r := f.result(); r.res.Reason != ReasonClientError {
		t.Errorf("session ended with %+v", r)
	}
}

// TestContextDone: the caller's context ending closes the client with
// 1001 and the cause as the reason.
func TestContextDone(t *testing.T) {
	f := newFixture(t, nil)
	c := f.client()
	must[json.RawMessage](c, "", "Browser.getVersion", nil)
	f.cancel(errors.New("session timeout (30m0s)"))
	ce := c.closed()
	if ce.Code != websocket.CloseGoingAway || ce.Text != "session timeout (30m0s)" {
		t.Errorf("close %v", ce)
	}
	if r := f.result(); r.err != nil || r.res.Reason != ReasonContextDone || r.res.Forwarded != 1 {
		t.Errorf("session ended with %+v", r)
	}
}

// TestNotices: the worker's notices reach the client as CDP events
// between its answers.
func TestNotices(t *testing.T) {
	notices := make(chan Notice, 1)
	f := newFixture(t, func(c *Config) { c.Notices = notices })
	c := f.client()
	must[json.RawMessage](c, "", "Browser.getVersion", nil)
	notices <- Notice{Method: "CloudBrowser.takeover", Params: map[string]string{"user": "ann"}}
	c.waitEvent("CloudBrowser.takeover", func(e event) bool { return strings.Contains(string(e.Params), `"ann"`) })
	must[json.RawMessage](c, "", "Browser.getVersion", nil)
}

// TestUpstreamUnavailable: no Chromium, the client gets 1011.
func TestUpstreamUnavailable(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Upstream = "ws://" + testutil.RefusedAddr(t) + "/devtools/browser/x" })
	c := f.client()
	if ce := c.closed(); ce.Code != websocket.CloseInternalServerErr {
		t.Errorf("close %v", ce)
	}
	if r := f.result(); r.err == nil || r.res.Reason != ReasonUpstreamLost {
		t.Errorf("session ended with %+v", r)
	}
}

// TestRulesDocumented: docs/automation.md names every rule.
func TestRulesDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/automation.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		if !strings.Contains(string(doc), "`"+r.Method+"`") {
			t.Errorf("docs/automation.md does not name `%s`", r.Method)
		}
		if r.Why == "" {
			t.Errorf("%s: no reason", r.Method)
		}
	}
}

// TestTruncate: close reasons are cut on a rune boundary.
func TestTruncate(t *testing.T) {
	long := strings.Repeat("é", 100) // 200 bytes
	got := truncate(long, 123)
	if len(got) > 123 || !strings.HasPrefix(long, got) || len(got) != 122 {
		t.Errorf("truncate: %d bytes", len(got))
	}
	if truncate("short", 123) != "short" {
		t.Error("short string changed")
	}
}

// TestBrowserSession: Target.attachToBrowserTarget gives a session of the
// gate's own, where commands are browser-level ones under the same rules,
// the client's browser-level events and the worker's notices arrive, and
// which a detach ends.
func TestBrowserSession(t *testing.T) {
	notices := make(chan Notice, 1)
	f := newFixture(t, func(c *Config) { c.Notices = notices })
	c := f.client()
	mine, _ := ownPage(t, c, "about:blank")
	bs := must[struct {
		SessionID string `json:"sessionId"`
	}](c, "", "Target.attachToBrowserTarget", nil).SessionID
	if bs == "" {
		t.Fatal("no sessionId")
	}
	var ids []string
	for _, ti := range must[struct {
		TargetInfos []targetInfo `json:"targetInfos"`
	}](c, bs, "Target.getTargets", nil).TargetInfos {
		if ti.BrowserContextID != f.primary {
			t.Errorf("getTargets in the browser session lists %+v", ti)
		}
		ids = append(ids, ti.TargetID)
	}
	if !slices.Contains(ids, mine) {
		t.Errorf("getTargets in the browser session misses %s: %v", mine, ids)
	}
	for _, m := range []string{"SystemInfo.getInfo", "Browser.crash", "Target.exposeDevToolsProtocol"} {
		if code, msg := cdpErr(t, c, bs, m, nil); code != codeNotFound || msg != m+" is not allowed by the automation gate" {
			t.Errorf("%s in the browser session: %d %s", m, code, msg)
		}
	}
	// The victim's targets stay hidden from discovery asked for there.
	must[json.RawMessage](c, bs, "Target.setDiscoverTargets", map[string]any{"discover": true})
	c.waitEvent("Target.targetCreated", func(e event) bool { return e.SessionID == bs && strings.Contains(string(e.Params), mine) })
	if got := c.mentions(f.victimT); len(got) != 0 {
		t.Errorf("the victim's target reached the client: %+v", got)
	}
	notices <- Notice{Method: "CloudBrowser.takeover", Params: map[string]string{"user": "ann"}}
	c.waitEvent("CloudBrowser.takeover", func(e event) bool { return e.SessionID == bs })
	c.waitEvent("CloudBrowser.takeover", func(e event) bool { return e.SessionID == "" })

	must[json.RawMessage](c, "", "Target.detachFromTarget", map[string]any{"sessionId": bs})
	c.waitEvent("Target.detachedFromTarget", func(e event) bool { return strings.Contains(string(e.Params), bs) })
	if r := c.raw(bs, "Browser.getVersion", nil); r.Error == nil || r.Error.Message != errNoSession.Message {
		t.Errorf("a command in the detached browser session: %+v", r.Error)
	}
	f.alive(f.victimT, 7)
}

// TestTwoClientsConfined: two automation sessions on one Chromium cannot
// list, attach to, close or read each other's targets, cookies or
// downloads, nor their browser sessions' events.
func TestTwoClientsConfined(t *testing.T) {
	notices := make(chan Notice, 1)
	fa := newFixture(t, func(c *Config) { c.DownloadPath = t.TempDir(); c.Notices = notices })
	fb := newFixture(t, func(c *Config) { c.DownloadPath = t.TempDir() })
	a, b := fa.client(), fb.client()
	pageA, _ := ownPage(t, a, "data:text/html,<title>a</title><script>window.alive = 7</script>")
	must[json.RawMessage](a, "", "Storage.setCookies", map[string]any{"cookies": []any{
		map[string]any{"name": "secret", "value": "of-a", "domain": "a.example", "path": "/"}}})
	bsA := must[struct {
		SessionID string `json:"sessionId"`
	}](a, "", "Target.attachToBrowserTarget", nil).SessionID
	must[json.RawMessage](b, "", "Target.setDiscoverTargets", map[string]any{"discover": true})

	for _, tt := range []struct {
		session, method string
		params          map[string]any
	}{
		{"", "Target.attachToTarget", map[string]any{"targetId": pageA, "flatten": true}},
		{"", "Target.closeTarget", map[string]any{"targetId": pageA}},
		{"", "Target.activateTarget", map[string]any{"targetId": pageA}},
		{"", "Target.getTargetInfo", map[string]any{"targetId": pageA}},
		{"", "Target.createTarget", map[string]any{"url": "about:blank", "browserContextId": fa.primary}},
		{"", "Target.disposeBrowserContext", map[string]any{"browserContextId": fa.primary}},
		{"", "Storage.getCookies", map[string]any{"browserContextId": fa.primary}},
		{"", "Storage.clearCookies", map[string]any{"browserContextId": fa.primary}},
		{"", "Browser.setDownloadBehavior", map[string]any{"behavior": "allow", "browserContextId": fa.primary}},
		{"", "Browser.cancelDownload", map[string]any{"guid": "x", "browserContextId": fa.primary}},
		{bsA, "Browser.getVersion", nil},
	} {
		if r := b.raw(tt.session, tt.method, tt.params); r.Error == nil {
			t.Errorf("B's %s %v succeeded: %s", tt.method, tt.params, r.Result)
		}
	}
	for _, ti := range must[struct {
		TargetInfos []targetInfo `json:"targetInfos"`
	}](b, "", "Target.getTargets", nil).TargetInfos {
		if ti.BrowserContextID != fb.primary {
			t.Errorf("B lists %+v", ti)
		}
	}
	notices <- Notice{Method: "CloudBrowser.takeover", Params: map[string]string{"user": "ann"}}
	a.waitEvent("CloudBrowser.takeover", nil)
	if got := b.mentions(pageA); len(got) != 0 {
		t.Errorf("A's page reached B: %+v", got)
	}
	for _, e := range b.Events() {
		if e.Method == "CloudBrowser.takeover" || strings.Contains(string(e.Params), "of-a") {
			t.Errorf("A's event reached B: %+v", e)
		}
	}
	// A's page and cookie are untouched.
	fa.alive(pageA, 7)
	cookies := must[struct {
		Cookies []struct{ Name, Value string } `json:"cookies"`
	}](a, "", "Storage.getCookies", nil).Cookies
	if len(cookies) != 1 || cookies[0].Value != "of-a" {
		t.Errorf("A's cookies after B tried: %+v", cookies)
	}
}
