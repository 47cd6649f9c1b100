package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master"
)

// TestEmbeddedOneStep: the embedded proxy serves the one-step CDP URL,
// asking the master in process: its refusals are plain HTTP before the
// upgrade (no worker yet: 503 with Retry-After, as the API answers).
func TestEmbeddedOneStep(t *testing.T) {
	m, err := startAssembled(t, master.Config{Secret: frontSecret, AdminToken: "admintok", AutomationToken: "bottok",
		AutomationQueueWait: -1, PublicAddr: "127.0.0.1:0", Logger: testutil.Logger(t),
		Apps: []wire.App{{Name: "Hello", MountPoint: "hello", Entry: "https://example.test/", Strategy: wire.SingleAppInstance, Public: true}}})
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + m.PublicAddr()
	for _, tc := range []struct {
		name, path string
		upgrade    bool
		status     int
		msg, retry string
	}{
		{"no worker yet", "/cdp?app=hello&token=bottok", true, http.StatusServiceUnavailable, "starting", "5"},
		{"a wrong token", "/cdp?app=hello&token=nope", true, http.StatusUnauthorized, "invalid token", ""},
		{"an unknown app", "/cdp?app=nope&token=bottok", true, http.StatusNotFound, `"field":"app"`, ""},
		{"no upgrade", "/cdp?app=hello&token=bottok", false, http.StatusBadRequest, "WebSocket endpoint", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+tc.path, nil)
			if tc.upgrade {
				req.Header.Set("Connection", "Upgrade")
				req.Header.Set("Upgrade", "websocket")
				req.Header.Set("Sec-WebSocket-Version", "13")
				req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status || !strings.Contains(string(body), tc.msg) || resp.Header.Get("Retry-After") != tc.retry {
				t.Errorf("%d (Retry-After %q) %s; want %d with %q, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"), body, tc.status, tc.msg, tc.retry)
			}
		})
	}
}
