package httpserve

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/hop"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// TestRequiresHop: only requests signed by a proxy holding the
// master's hop key get past the worker's front door; health checks stay
// open and /metrics takes the metrics token instead.
func TestRequiresHop(t *testing.T) {
	h := newTestServer(t, "")
	h.hopWait = 50 * time.Millisecond
	do := func(path, hopValue, auth string) (int, string) {
		r := httptest.NewRequest("GET", path, nil)
		r.RequestURI = path
		r.Header.Set("X-Forwarded-For", "203.0.113.9")
		if hopValue != "" {
			r.Header.Set(hop.Header, hopValue)
		}
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec.Code, rec.Body.String()
	}
	sign := func(key []byte, path string, at time.Time) string {
		return hop.Sign(key, at, hop.Fields{Method: "GET", Host: "example.com", URI: path, ForwardedFor: "203.0.113.9"})
	}
	const app = "/hello"
	otherKey := []byte("another-key-0123456789abcdef0123")

	// Before registration the worker has no key: it waits for it
	// (hopWait), then refuses.
	if code, body := do(app, sign(testHopKey, app, time.Now()), ""); code != http.StatusForbidden || !strings.Contains(body, "relayed by the cluster proxies") {
		t.Fatalf("no key yet: %d %q", code, body)
	}
	// A request that comes while the registration reply is on its way
	// waits for the key and is served (CI: "no hop key yet" 403s).
	h.hopWait = time.Minute
	served := make(chan int)
	go func() { code, _ := do(app, sign(testHopKey, app, time.Now()), ""); served <- code }()
	time.Sleep(20 * time.Millisecond) // let it wait; either order must serve it
	h.SetHopKey(testHopKey)
	if code := <-served; code == http.StatusForbidden {
		t.Fatalf("request during registration: %d", code)
	}
	if code, body := do("/metrics", "", "Bearer x"); code != http.StatusServiceUnavailable || !strings.Contains(body, "not registered") {
		t.Fatalf("metrics before registration: %d %q", code, body)
	}
	h.SetHopKey(testHopKey)
	tok := "metrics-token-1234"
	h.SetMetricsToken(tok)
	for _, tc := range []struct {
		name, path, hop, auth string
		status                int
		want                  string
	}{
		{"no hop", app, "", "", 403, "relayed by the cluster proxies"},
		{"wrong key", app, sign(otherKey, app, time.Now()), "", 403, "relayed by the cluster proxies"},
		{"stale", app, sign(testHopKey, app, time.Now().Add(-2*hop.Window)), "", 403, "Forbidden"},
		{"signed for another path", app, sign(testHopKey, "/other", time.Now()), "", 403, "Forbidden"},
		{"websocket without hop", app + "/a/w-hop.abcdefghijkl/b/babcdefghijk/ws", "", "", 403, "Forbidden"},
		{"valid hop gets to the app", app, sign(testHopKey, app, time.Now()), "", 404, "no application"},
		{"healthz stays open", "/healthz", "", "", 200, `"ok"`},
		{"readyz stays open", "/readyz", "", "", 503, "not registered"},
		{"metrics without token", "/metrics", "", "", 401, "metrics token"},
		{"metrics with a hop but no token", "/metrics", sign(testHopKey, "/metrics", time.Now()), "", 401, "metrics token"},
		{"metrics with wrong token", "/metrics", "", "Bearer nope", 401, "metrics token"},
		{"metrics with the token", "/metrics", "", "Bearer " + tok, 200, "cloudbrowser_"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := do(tc.path, tc.hop, tc.auth)
			if code != tc.status || !strings.Contains(body, tc.want) {
				t.Fatalf("GET %s: %d %.200q, want %d containing %q", tc.path, code, body, tc.status, tc.want)
			}
		})
	}
}

// TestHSTSBehindTrustedProto: a page relayed by a proxy that says https
// carries HSTS, whether the master was given --trust-forwarded-proto or
// not (a proxy serving TLS, or trusting its balancer with
// --trusted-proxies, says https on its own); an unsigned request's
// X-Forwarded-Proto (anyone can send one) does not count.
func TestHSTSBehindTrustedProto(t *testing.T) {
	h := newTestServer(t, "")
	h.SetHopKey(testHopKey)
	h.hopWait = 10 * time.Millisecond
	for _, tc := range []struct {
		name          string
		trust, signed bool
		proto         string
		hsts          bool
	}{
		{"trusted, signed https", true, true, "https", true},
		{"trusted, signed http", true, true, "http", false},
		{"trusted, unsigned https", true, false, "https", false},
		{"not trusted, signed https", false, true, "https", true},
		{"not trusted, unsigned https", false, false, "https", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.users.SetCluster(wire.RegisterReply{TrustForwardedProto: tc.trust})
			const path = "/hello"
			r := httptest.NewRequest("GET", path, nil)
			r.RequestURI = path
			r.Header.Set("X-Forwarded-For", "203.0.113.9")
			r.Header.Set("X-Forwarded-Proto", tc.proto)
			if tc.signed {
				r.Header.Set(hop.Header, hop.Sign(testHopKey, time.Now(), hop.Fields{Method: "GET", Host: "example.com", URI: path,
					ForwardedFor: "203.0.113.9", Proto: tc.proto}))
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			if got := rec.Header().Get("Strict-Transport-Security") != ""; got != tc.hsts {
				t.Fatalf("status %d, HSTS sent = %v, want %v (headers %v)", rec.Code, got, tc.hsts, rec.Header())
			}
		})
	}
}
