package tlsfront

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
)

// TestRedirect: 308 to https on the same host, path and query; the port
// is the public listener's unless it is 443; an https public URL names
// the host; what cannot be redirected is refused.
func TestRedirect(t *testing.T) {
	for _, tc := range []struct {
		name, publicURL, port, host, uri string
		status                           int
		location                         string
	}{
		{"other port", "", "8443", "cb.test:8080", "/hello/a/x?q=1", 308, "https://cb.test:8443/hello/a/x?q=1"},
		{"standard port left out", "", "443", "cb.test", "/hello", 308, "https://cb.test/hello"},
		{"host without port", "", "8443", "cb.test", "/", 308, "https://cb.test:8443/"},
		{"IPv6", "", "8443", "[::1]:8080", "/x", 308, "https://[::1]:8443/x"},
		{"IPv6, standard port", "", "443", "[::1]:80", "/x", 308, "https://[::1]/x"},
		{"public URL", "https://cb.example.com:9443", "8443", "10.0.0.5:8080", "/x?y", 308, "https://cb.example.com:9443/x?y"},
		{"http public URL: the request's host", "http://cb.example.com", "8443", "cb.test", "/x", 308, "https://cb.test:8443/x"},
		{"userinfo in Host", "", "8443", "evil.test@cb.test", "/x", 400, ""},
		{"no Host", "", "8443", "", "/x", 400, ""},
		{"not bound yet", "", "", "cb.test", "/x", 503, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rd := NewRedirect(tc.publicURL)
			if tc.port != "" {
				rd.SetPort(tc.port)
			}
			r := httptest.NewRequest("POST", tc.uri, nil)
			r.Host = tc.host
			rec := httptest.NewRecorder()
			rd.ServeHTTP(rec, r)
			if rec.Code != tc.status || rec.Header().Get("Location") != tc.location {
				t.Fatalf("%d %q, want %d %q", rec.Code, rec.Header().Get("Location"), tc.status, tc.location)
			}
		})
	}
}

// TestListenRedirect: the listener serves the redirect until closed.
func TestListenRedirect(t *testing.T) {
	rd := NewRedirect("")
	rd.SetPort("8443")
	s, err := ListenRedirect(context.Background(), "127.0.0.1:0", rd, testutil.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer c.CloseIdleConnections()
	resp, err := c.Get("http://" + s.Addr() + "/hello?x=1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusPermanentRedirect || resp.Header.Get("Location") != "https://127.0.0.1:8443/hello?x=1" {
		t.Fatalf("%s %q", resp.Status, resp.Header.Get("Location"))
	}
	if _, err := ListenRedirect(context.Background(), s.Addr(), rd, testutil.Logger(t)); err == nil {
		t.Error("a second listener on the same address")
	}
}
