package chromium

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// TestDevToolsPort: with DevTools on, a browser names its Chromium's
// loopback browser endpoint and its context there, which a client of its
// own reaches; with it off (the shared runtime), there is none.
func TestDevToolsPort(t *testing.T) {
	if _, ok := newBrowser(t, shared(t), browser.Options{Width: 400, Height: 300}).(browser.DevTools).DevTools(); ok {
		t.Error("a runtime without DevTools gives an endpoint")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt, err := New(ctx, Config{DevTools: true, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	b := newBrowser(t, rt, browser.Options{Width: 400, Height: 300})
	ep, ok := b.(browser.DevTools).DevTools()
	if !ok || ep.Context == "" || ep.Page == "" {
		t.Fatalf("endpoint %+v, %v", ep, ok)
	}
	conn, _, err := websocket.DefaultDialer.DialContext(ctx, ep.URL, nil)
	if err != nil {
		t.Fatalf("dial %s: %v", ep.URL, err)
	}
	defer conn.Close()
	if err := conn.WriteJSON(map[string]any{"id": 1, "method": "Target.getBrowserContexts"}); err != nil {
		t.Fatal(err)
	}
	var reply struct {
		ID     int `json:"id"`
		Result struct {
			BrowserContextIDs []string `json:"browserContextIds"`
		} `json:"result"`
	}
	_, raw, err := conn.ReadMessage()
	if err != nil || json.Unmarshal(raw, &reply) != nil {
		t.Fatalf("reply %s: %v", raw, err)
	}
	if !slices.Contains(reply.Result.BrowserContextIDs, ep.Context) {
		t.Fatalf("contexts %v lack the browser's %s", reply.Result.BrowserContextIDs, ep.Context)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.(browser.DevTools).DevTools(); ok {
		t.Error("a closed browser gives an endpoint")
	}
}
