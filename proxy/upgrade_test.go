package proxy

import (
	"context"
	"net/http"
	"testing"

	"github.com/cloudbrowser-go/cloudbrowser/internal/urlkind"
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
			if got := isWebSocketUpgrade(r); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRouterHelpers(t *testing.T) {
	links := []AppLink{{Name: "Chat", MountPoint: "chat"}}
	s := StaticRouter{To: w1, Links: links}
	c := NewCachingRouter(s, ttl)
	if r, err := c.Route(context.Background(), urlkind.Target{Kind: urlkind.KindApp, App: "x"}); err != nil || r != w1 {
		t.Fatalf("Route = %v, %v", r, err)
	}
	if got, err := c.Apps(context.Background()); err != nil || len(got) != 1 || got[0] != links[0] {
		t.Fatalf("Apps = %v, %v", got, err)
	}
}
