package proxy

import (
	"context"
	"testing"

	"github.com/cloudbrowser-go/cloudbrowser/internal/urlkind"
)

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
