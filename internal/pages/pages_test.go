package pages

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

func TestIsWebSocketUpgrade(t *testing.T) {
	tests := []struct {
		name       string
		proto      int
		connection []string
		upgrade    []string
		want       bool
	}{
		{"plain", 1, []string{"Upgrade"}, []string{"websocket"}, true},
		{"token list and case", 1, []string{"keep-alive, \tUPGRADE "}, []string{"WebSocket"}, true},
		{"second header line", 1, []string{"keep-alive", "upgrade"}, []string{"websocket"}, true},
		{"no connection token", 1, []string{"keep-alive"}, []string{"websocket"}, false},
		{"other protocol", 1, []string{"upgrade"}, []string{"h2c"}, false},
		{"prefix is not a token", 1, []string{"upgraded"}, []string{"websocket"}, false},
		{"http2", 2, []string{"upgrade"}, []string{"websocket"}, false},
		{"empty", 1, nil, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &http.Request{ProtoMajor: tc.proto, Header: http.Header{"Connection": tc.connection, "Upgrade": tc.upgrade}}
			if got := IsWebSocketUpgrade(r); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestForCode(t *testing.T) {
	tests := []struct {
		code, detail     string
		status           int
		title, msgPart   string
		link, retryAfter string
	}{
		{code: wire.CodeUnknownApp, status: 404, title: "Application not found", msgPart: "no application"},
		{code: wire.CodeUnknownInstance, status: 404, title: "App instance not found", msgPart: "does not exist", link: "/chat"},
		{code: wire.CodeAppDisabled, status: 503, title: "Application unavailable", msgPart: "disabled"},
		{code: wire.CodeInstanceLost, status: 410, title: "App instance lost", msgPart: "stopped with it", link: "/chat"},
		{code: wire.CodeInstanceMerged, status: 410, title: "App instance replaced", msgPart: "goes on in the new one", link: "/chat"},
		{code: wire.CodeInstanceMoving, status: 503, title: "App instance moving", msgPart: "being restored", retryAfter: "1"},
		{code: wire.CodeInstanceMoving, detail: "instance x waits for a worker", status: 503, title: "App instance moving", msgPart: "no other worker is live", retryAfter: "1"},
		{code: wire.CodeStarting, status: 503, title: "Starting", msgPart: "reloads by itself", retryAfter: "2"},
		{code: wire.CodeNoWorkers, status: 503, title: "No workers available", msgPart: "retry shortly", retryAfter: "5"},
		{code: wire.CodeUnknownWorker, status: 502, title: "Worker unreachable", msgPart: "not reachable"},
		{code: wire.CodePoolLimit, detail: "the pool is full", status: 503, title: "No browser available", msgPart: "the pool is full. Please retry later.", retryAfter: "10"},
		{code: wire.CodePoolLimit, status: 503, title: "No browser available", msgPart: "Please retry later.", retryAfter: "10"},
	}
	for _, tt := range tests {
		p, ok := ForCode(tt.code, "chat", tt.detail)
		if !ok || p.Status != tt.status || p.Title != tt.title || !strings.Contains(p.Message, tt.msgPart) ||
			p.LinkURL != tt.link || (p.LinkURL != "") != (p.LinkText != "") || p.RetryAfter != tt.retryAfter {
			t.Errorf("ForCode(%q, %q) = %+v, %v", tt.code, tt.detail, p, ok)
		}
	}
	if _, ok := ForCode(wire.CodeInvalid, "chat", ""); ok {
		t.Error("a code without a page has one")
	}
}

func TestWrite(t *testing.T) {
	for _, tt := range []struct{ accept, ctype, body string }{
		{"", "text/html; charset=utf-8", "<h1>Starting</h1>"},
		{"application/json", "application/json", `"error":"Starting"`},
		{"text/plain", "text/plain; charset=utf-8", "Starting: CloudBrowser is starting"},
	} {
		p, _ := ForCode(wire.CodeStarting, "chat", "")
		rec := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/chat", nil)
		r.Header.Set("Accept", tt.accept)
		Write(rec, r, "req1", p)
		h := rec.Result().Header
		if rec.Code != 503 || h.Get("Content-Type") != tt.ctype || h.Get("Refresh") != "2" || h.Get("Retry-After") != "2" ||
			h.Get("X-Request-Id") != "req1" || !strings.Contains(rec.Body.String(), tt.body) {
			t.Errorf("Accept %q: %d %v %s", tt.accept, rec.Code, h, rec.Body)
		}
	}
}
