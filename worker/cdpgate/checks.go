package cdpgate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/gorilla/websocket"
)

// The checks of the rules table (rules.go).

type targetInfo struct {
	TargetID         string `json:"targetId"`
	Type             string `json:"type"`
	BrowserContextID string `json:"browserContextId"`
}

func closeBrowser(context.Context, *gate, *command) error { return errBrowserClose }

// inContext puts a command that names no browser context in the primary
// one: without it Chromium would use its default context, which is not
// the session's.
func inContext(_ context.Context, g *gate, c *command) error {
	v, named := c.params["browserContextId"]
	if !named || v == nil {
		c.params["browserContextId"] = g.cfg.Context
		return nil
	}
	if id, _ := v.(string); !g.own.context(id) {
		return errNoContext
	}
	return nil
}

func downloadBehavior(ctx context.Context, g *gate, c *command) error {
	if err := inContext(ctx, g, c); err != nil {
		return err
	}
	switch str(c.params, "behavior") {
	case "deny":
		delete(c.params, "downloadPath")
	case "allow", "allowAndName":
		// Only the session's own context saves: the worker keeps, limits
		// and serves the files of its browser (named by their guid), and
		// knows nothing of the client's other contexts.
		if g.cfg.DownloadPath == "" || str(c.params, "browserContextId") != g.cfg.Context {
			c.params["behavior"] = "deny"
			delete(c.params, "downloadPath")
		} else {
			c.params["behavior"] = "allowAndName"
			c.params["downloadPath"] = g.cfg.DownloadPath
		}
	default:
		return paramNotAllowed(c.method, fmt.Sprintf("behavior %q", str(c.params, "behavior")))
	}
	return nil
}

// ownsTarget reports whether target id is in an owned context, asking
// Chromium about ids the gate has not seen.
func (g *gate) ownsTarget(ctx context.Context, id string) (bool, error) {
	if id == "" {
		return false, nil
	}
	if g.own.target(id) {
		return true, nil
	}
	res, err := g.call(ctx, "", "Target.getTargetInfo", map[string]any{"targetId": id})
	if ce := (*cdpError)(nil); errors.As(err, &ce) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	var r struct {
		TargetInfo targetInfo `json:"targetInfo"`
	}
	if json.Unmarshal(res, &r) != nil || r.TargetInfo.TargetID != id {
		return false, nil
	}
	return g.own.claimTarget(id, r.TargetInfo.BrowserContextID), nil
}

// needTarget refuses a command whose targetId is not owned.
func needTarget(ctx context.Context, g *gate, c *command) error {
	ok, err := g.ownsTarget(ctx, str(c.params, "targetId"))
	if err != nil {
		return err
	}
	if !ok {
		return errNoTarget
	}
	return nil
}

func ownedTarget(ctx context.Context, g *gate, c *command) error { return needTarget(ctx, g, c) }

// errOwnPage refuses closing the session's own page.
var errOwnPage = &cdpError{Code: -32000, Message: "the session's own page stays open (it is the session's browser); close the pages you opened"}

func closeTarget(ctx context.Context, g *gate, c *command) error {
	if g.cfg.Page != "" && str(c.params, "targetId") == g.cfg.Page {
		return errOwnPage
	}
	return needTarget(ctx, g, c)
}

func getTargetInfo(ctx context.Context, g *gate, c *command) error {
	if _, named := c.params["targetId"]; !named {
		return nil
	}
	return needTarget(ctx, g, c)
}

func needFlatten(c *command) error {
	if f, _ := c.params["flatten"].(bool); !f {
		return paramNotAllowed(c.method, "flatten other than true")
	}
	return nil
}

func setAutoAttach(_ context.Context, _ *gate, c *command) error { return needFlatten(c) }

func attachToTarget(ctx context.Context, g *gate, c *command) error {
	if err := needFlatten(c); err != nil {
		return err
	}
	if err := needTarget(ctx, g, c); err != nil {
		return err
	}
	c.after = func(res []byte) ([]byte, error) {
		var r struct {
			SessionID string `json:"sessionId"`
		}
		if err := json.Unmarshal(res, &r); err != nil {
			return nil, err
		}
		g.own.addSession(r.SessionID, false)
		return res, nil
	}
	return nil
}

// attachToBrowserTarget answers with a browser session of the gate's own:
// the client's commands in it are taken at browser level under the same
// rules, Chromium's browser-level events are copied into it, and so are
// the gate's notices (Config.Notices), so that Playwright's
// newBrowserCDPSession and Puppeteer's browser CDP sessions see them. A
// real session on the browser target would be the whole browser.
func attachToBrowserTarget(_ context.Context, g *gate, c *command) error {
	c.local, _ = json.Marshal(map[string]string{"sessionId": g.own.addBrowserSession()})
	return nil
}

func detachFromTarget(ctx context.Context, g *gate, c *command) error {
	s, bySession := c.params["sessionId"]
	_, byTarget := c.params["targetId"]
	if id, _ := s.(string); bySession && !byTarget && g.own.removeBrowserSession(id) {
		ev, _ := json.Marshal(map[string]any{"method": "Target.detachedFromTarget", "params": map[string]string{"sessionId": id}})
		g.writeClient(ev)
		c.local = []byte("{}")
		return nil
	}
	if bySession {
		if id, _ := s.(string); !g.own.session(id) {
			return errNoSession
		}
	}
	if byTarget || !bySession {
		return needTarget(ctx, g, c)
	}
	return nil
}

func resume(_ context.Context, g *gate, c *command) error {
	g.own.resumed(c.session)
	return nil
}

func getTargets(_ context.Context, g *gate, c *command) error {
	c.after = func(res []byte) ([]byte, error) {
		var r struct {
			TargetInfos []json.RawMessage `json:"targetInfos"`
		}
		if err := json.Unmarshal(res, &r); err != nil {
			return nil, err
		}
		kept := make([]json.RawMessage, 0, len(r.TargetInfos))
		for _, raw := range r.TargetInfos {
			var ti targetInfo
			if json.Unmarshal(raw, &ti) == nil && g.own.claimTarget(ti.TargetID, ti.BrowserContextID) {
				kept = append(kept, raw)
			}
		}
		return json.Marshal(map[string]any{"targetInfos": kept})
	}
	return nil
}

// getBrowserContexts answers with the client's contexts and the primary
// as the default one, which is how clients see the context that pages
// without a browserContextId go to (Playwright and Puppeteer take
// unlisted contexts' targets for the default context's).
func getBrowserContexts(_ context.Context, g *gate, c *command) error {
	c.local, _ = json.Marshal(map[string]any{
		"browserContextIds":       g.own.createdContexts(),
		"defaultBrowserContextId": g.cfg.Context,
	})
	return nil
}

func createTarget(ctx context.Context, g *gate, c *command) error {
	if err := webURL(ctx, g, c); err != nil {
		return err
	}
	if err := inContext(ctx, g, c); err != nil {
		return err
	}
	in := c.params["browserContextId"].(string)
	c.after = func(res []byte) ([]byte, error) {
		var r struct {
			TargetID string `json:"targetId"`
		}
		if err := json.Unmarshal(res, &r); err != nil {
			return nil, err
		}
		g.own.claimTarget(r.TargetID, in)
		return res, nil
	}
	return nil
}

func createBrowserContext(ctx context.Context, g *gate, c *command) error {
	for _, p := range []string{"proxyServer", "proxyBypassList"} {
		if _, named := c.params[p]; named {
			return paramNotAllowed(c.method, p)
		}
	}
	if n := len(g.own.createdContexts()); n >= g.cfg.MaxContexts {
		return &cdpError{Code: codeServerError, Message: fmt.Sprintf("%s: the automation gate allows %d contexts at once", c.method, g.cfg.MaxContexts)}
	}
	// Should the gate lose its connection, Chromium disposes them itself.
	c.params["disposeOnDetach"] = true
	if g.cfg.ContextParams != nil {
		g.cfg.ContextParams(c.params)
	}
	res, err := g.call(ctx, "", c.method, c.params)
	if err != nil {
		return err
	}
	var r struct {
		BrowserContextID string `json:"browserContextId"`
	}
	if err := json.Unmarshal(res, &r); err != nil || r.BrowserContextID == "" {
		return &cdpError{Code: codeServerError, Message: "no browserContextId in Chromium's reply"}
	}
	g.own.addContext(r.BrowserContextID)
	if g.cfg.OnContext != nil {
		if err := g.cfg.OnContext(ctx, r.BrowserContextID, true); err != nil {
			g.log.Warn().Err(err).Str("browser_context", r.BrowserContextID).Msg("OnContext refused a new context")
			if _, err := g.call(ctx, "", "Target.disposeBrowserContext", map[string]any{"browserContextId": r.BrowserContextID}); err != nil {
				g.log.Warn().Err(err).Str("browser_context", r.BrowserContextID).Msg("dispose")
			}
			g.contextGone(ctx, r.BrowserContextID)
			return &cdpError{Code: codeServerError, Message: c.method + ": the worker could not set the context up"}
		}
	}
	g.log.Debug().Str("browser_context", r.BrowserContextID).Msg("client context created")
	c.local = res
	return nil
}

func disposeBrowserContext(ctx context.Context, g *gate, c *command) error {
	id := str(c.params, "browserContextId")
	if id == g.cfg.Context {
		return paramNotAllowed(c.method, "the session's primary context")
	}
	if !g.own.isCreated(id) {
		return &cdpError{Code: codeServerError, Message: "Failed to find context with id " + id}
	}
	res, err := g.call(ctx, "", c.method, map[string]any{"browserContextId": id})
	if err != nil {
		return err
	}
	g.contextGone(ctx, id)
	c.local = res
	return nil
}

func noDragFiles(_ context.Context, _ *gate, c *command) error {
	data, _ := c.params["data"].(map[string]any)
	if f, named := data["files"]; named {
		if list, ok := f.([]any); !ok || len(list) > 0 {
			return paramNotAllowed(c.method, "data.files")
		}
	}
	return nil
}

var errNoWindow = &cdpError{Code: codeServerError, Message: "Browser window not found"}

func windowParam(_ context.Context, g *gate, c *command) error {
	n, _ := c.params["windowId"].(json.Number)
	id, err := n.Int64()
	if err != nil || !g.own.window(id) {
		return errNoWindow
	}
	return nil
}

func windowForTarget(ctx context.Context, g *gate, c *command) error {
	record := func(res []byte) ([]byte, error) {
		var r struct {
			WindowID int64 `json:"windowId"`
		}
		if err := json.Unmarshal(res, &r); err != nil {
			return nil, err
		}
		g.own.addWindow(r.WindowID)
		return res, nil
	}
	if _, named := c.params["targetId"]; !named && c.session != "" {
		c.after = record // the session's own target
		return nil
	}
	if err := needTarget(ctx, g, c); err != nil {
		return err
	}
	res, err := g.windowOf(ctx, str(c.params, "targetId"))
	if err != nil {
		return err
	}
	c.local, err = record(res)
	return err
}

// windowOf asks for a target's window in a session on a connection of its
// own: a session's getWindowForTarget cannot name another target, so a
// target closed meanwhile fails the attach instead of crashing Chromium.
func (g *gate) windowOf(ctx context.Context, targetID string) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	conn, err := dial(ctx, g.cfg.Upstream, nil)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	defer context.AfterFunc(ctx, func() { conn.Close() })()
	ask := func(id int64, session, method string, params any) (*upMessage, error) {
		data, err := encodeCommand(id, method, session, params)
		if err != nil {
			return nil, err
		}
		if err := conn.WriteMessage(websocket.TextMessage, data); err != nil {
			return nil, err
		}
		for {
			_, data, err := conn.ReadMessage()
			if err != nil {
				return nil, err
			}
			var m upMessage
			if json.Unmarshal(data, &m) == nil && m.ID != nil && *m.ID == id {
				return &m, nil
			}
		}
	}
	m, err := ask(1, "", "Target.attachToTarget", map[string]any{"targetId": targetID, "flatten": true})
	if err != nil {
		return nil, err
	}
	var a struct {
		SessionID string `json:"sessionId"`
	}
	if m.Error != nil || json.Unmarshal(m.Result, &a) != nil || a.SessionID == "" {
		return nil, errNoTarget
	}
	if m, err = ask(2, a.SessionID, "Browser.getWindowForTarget", nil); err != nil {
		return nil, err
	}
	if m.Error != nil {
		return nil, upstreamError(m.Error)
	}
	return m.Result, nil
}

// webURL refuses a url param whose scheme no web page could open itself:
// file:, chrome:, devtools:, chrome-extension:, view-source:, …
func webURL(_ context.Context, _ *gate, c *command) error {
	raw, _ := c.params["url"].(string)
	if raw == "" {
		return nil // createTarget's default: about:blank
	}
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return &cdpError{Code: -32602, Message: "Invalid URL"}
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https", "data", "blob":
		return nil
	case "about": // about:version and the like are chrome:// pages
		if strings.EqualFold(u.Opaque, "blank") {
			return nil
		}
	}
	return &cdpError{Code: -32602, Message: fmt.Sprintf("%s: %s: URLs are not allowed by the automation gate", c.method, u.Scheme)}
}
