package cdpraw

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// TestCall: a call skips events and answers to other ids, decodes its
// result, and returns the endpoint's error with the method's name.
func TestCall(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		for {
			var m struct {
				ID        int    `json:"id"`
				Method    string `json:"method"`
				SessionID string `json:"sessionId"`
			}
			if ws.ReadJSON(&m) != nil {
				return
			}
			_ = ws.WriteJSON(map[string]any{"method": "Page.frameNavigated", "params": map[string]any{}})
			_ = ws.WriteJSON(map[string]any{"id": m.ID + 100, "result": map[string]any{}})
			if m.Method == "Bad.method" {
				_ = ws.WriteJSON(map[string]any{"id": m.ID, "error": map[string]any{"code": -32601, "message": "not found"}})
				continue
			}
			_ = ws.WriteJSON(map[string]any{"id": m.ID, "result": map[string]any{"session": m.SessionID, "method": m.Method}})
		}
	}))
	defer srv.Close()
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	c := Conn{WS: ws, Timeout: 10 * time.Second}
	tests := []struct {
		session, method string
		wantErr         string
	}{
		{"", "Target.getTargets", ""},
		{"S1", "Runtime.evaluate", ""},
		{"", "Bad.method", "Bad.method: not found (-32601)"},
	}
	for _, tc := range tests {
		var got struct{ Session, Method string }
		err := c.Call(tc.session, tc.method, map[string]any{"x": 1}, &got)
		if tc.wantErr != "" {
			if err == nil || err.Error() != tc.wantErr {
				t.Fatalf("%s: error %v, want %q", tc.method, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got.Session != tc.session || got.Method != tc.method {
			t.Fatalf("%s: %+v, %v", tc.method, got, err)
		}
	}
	if c.Next != len(tests) {
		t.Fatalf("next id %d after %d calls", c.Next, len(tests))
	}
}
