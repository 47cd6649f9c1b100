package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
)

// oneStepCluster is a master with one proxy process and one Chromium
// worker, an app "auto" the automation token may use, and at most one
// session per principal (so that a second one is refused).
func oneStepCluster(t *testing.T) (c *cluster, site string) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	needChromium(t)
	site = automationSite(t)
	c = startCluster(t, clusterOpts{proxies: 1, workers: 1, runtime: "chromium", extra: []string{"--automation-max-sessions", "1"}})
	deployAutoApp(t, c, "auto", `{"name":"Automation","mountPoint":"auto","entry":"index.html","strategy":"singleInstancePerUser","egress":{"allow":["127.0.0.1"]}}`)
	return c, site
}

// listSessions is the automation token's sessions of app "auto".
func (c *cluster) listSessions(t *testing.T) []apiSession {
	t.Helper()
	st, _, body := c.api("GET", "/api/v1/sessions?app=auto", c.automationToken(), nil)
	if st != http.StatusOK {
		t.Fatalf("list sessions: %d %s", st, body)
	}
	var out struct {
		Sessions []apiSession `json:"sessions"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatal(err)
	}
	return out.Sessions
}

// noSessions waits until the automation token has no session of "auto".
func (c *cluster) noSessions(t *testing.T, why string) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, func() error {
		if ss := c.listSessions(t); len(ss) != 0 {
			return fmt.Errorf("%s: %d sessions still listed", why, len(ss))
		}
		return nil
	})
}

// refusedHandshake dials u and returns the HTTP answer that refused the
// upgrade (status, Retry-After, body).
func refusedHandshake(t *testing.T, u string, h http.Header) (int, string, string) {
	t.Helper()
	ws, resp, err := websocket.DefaultDialer.Dial(u, h)
	if err == nil {
		ws.Close()
		t.Fatalf("%s upgraded", u)
	}
	if !errors.Is(err, websocket.ErrBadHandshake) || resp == nil {
		t.Fatalf("%s: %v, want a refused handshake", u, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(body)
}

// TestAutomationOneStep: ws://<public>/cdp?app=…&token=… through a proxy
// process opens a session as the client connects (the proxy asks the
// master over RMI) and routes it to the session's browser: chromedp's
// remote allocator navigates and reads the title, the session is listed
// while its client is connected and gone once it left. Refusals are plain
// HTTP before the upgrade: a wrong token (401), a second session over the
// maximum (429 with Retry-After), no upgrade (400). Puppeteer connects to
// the same URL with a viewport in the query, and a raw client with the
// token in Authorization.
func TestAutomationOneStep(t *testing.T) {
	c, site := oneStepCluster(t)
	tok := c.automationToken()
	base := "ws://" + c.public + "/cdp?app=auto&token=" + url.QueryEscape(tok)

	ctx, disconnect := chromedpSession(t, base)
	tctx, tcancel := context.WithTimeout(ctx, 60*time.Second)
	defer tcancel()
	if err := chromedp.Do(tctx, chromedp.Navigate(site+"/one")); err != nil {
		t.Fatal(err)
	}
	title, err := chromedp.Run(tctx, chromedp.Title())
	if err != nil || title != "page one" {
		t.Fatalf("title %q, %v", title, err)
	}
	ss := c.listSessions(t)
	if len(ss) != 1 || !strings.Contains(ss[0].CDPURL, "/auto/a/") {
		t.Fatalf("sessions while connected: %+v", ss)
	}

	// Refused before any upgrade.
	if st, _, body := refusedHandshake(t, "ws://"+c.public+"/cdp?app=auto&token=wrong", nil); st != http.StatusUnauthorized || !strings.Contains(body, "invalid token") {
		t.Errorf("a wrong token: %d %s", st, body)
	}
	if st, retry, body := refusedHandshake(t, base, nil); st != http.StatusTooManyRequests || retry == "" || !strings.Contains(body, "at most 1 automation sessions") {
		t.Errorf("a second session over the maximum: %d (Retry-After %q) %s", st, retry, body)
	}
	if st, _, body := refusedHandshake(t, base+"&width=5&height=400", nil); st != http.StatusBadRequest || !strings.Contains(body, `"field":"width"`) {
		t.Errorf("a bad width: %d %s", st, body)
	}
	resp, err := http.Get("http://" + c.public + "/cdp?app=auto&token=" + url.QueryEscape(tok))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "WebSocket endpoint") {
		t.Errorf("a plain GET: %d %s", resp.StatusCode, body)
	}

	disconnect()
	c.noSessions(t, "after its client left")

	// Puppeteer, in the viewport the query asks for.
	got := nodeClient(t, "puppeteer.cjs", base+"&width=600&height=400", site)
	for k, want := range map[string]any{"viewport": "600x400", "title": "page one", "secondTitle": "page two"} {
		if got[k] != want {
			t.Errorf("puppeteer: %s = %v, want %v (all: %v)", k, got[k], want, got)
		}
	}
	c.noSessions(t, "after puppeteer disconnected")

	// The token in Authorization instead of the query.
	ws, _, err := websocket.DefaultDialer.Dial("ws://"+c.public+"/cdp?app=auto", http.Header{"Authorization": {"Bearer " + tok}})
	if err != nil {
		t.Fatalf("with Authorization: %v", err)
	}
	defer ws.Close()
	_ = ws.SetReadDeadline(time.Now().Add(30 * time.Second))
	if err := ws.WriteMessage(websocket.TextMessage, []byte(`{"id":1,"method":"Browser.getVersion"}`)); err != nil {
		t.Fatal(err)
	}
	_, msg, err := ws.ReadMessage()
	if err != nil || !strings.Contains(string(msg), `"id":1`) || !strings.Contains(string(msg), "product") {
		t.Fatalf("Browser.getVersion: %s %v", msg, err)
	}
	ws.Close()
	c.noSessions(t, "after the raw client left")
}
