package httpsec

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestPublicHTTPS(t *testing.T) {
	for _, tc := range []struct {
		url     string
		https   bool
		wantErr bool
	}{
		{"", false, false},
		{"https://cb.example.com", true, false},
		{"https://cb.example.com:8443/", true, false},
		{"http://cb.example.com", false, false},
		{"cb.example.com", false, true},
		{"ftp://cb.example.com", false, true},
		{"https://cb.example.com/sub", false, true},
		{"https://user:pw@cb.example.com", false, true},
		{"https://", false, true},
	} {
		got, err := PublicHTTPS(tc.url)
		if got != tc.https || (err != nil) != tc.wantErr {
			t.Errorf("PublicHTTPS(%q) = %v, %v", tc.url, got, err)
		}
	}
}

func TestSchemeAndHeaders(t *testing.T) {
	for _, tc := range []struct {
		name   string
		s      Scheme
		proto  string
		https  bool
		policy string
	}{
		{"plain", Scheme{}, "", false, "frame-ancestors 'none'"},
		{"forged proto ignored", Scheme{}, "https", false, "frame-ancestors 'none'"},
		{"trusted proto", Scheme{TrustForwardedProto: true}, "https", true, "frame-ancestors 'none'"},
		{"public https", Scheme{AlwaysHTTPS: true}, "http", true, "frame-ancestors 'none'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			if tc.proto != "" {
				r.Header.Set("X-Forwarded-Proto", tc.proto)
			}
			rec := httptest.NewRecorder()
			Pages(tc.s, http.NotFoundHandler()).ServeHTTP(rec, r)
			h := rec.Result().Header
			if got := h.Get("Strict-Transport-Security") != ""; got != tc.https {
				t.Errorf("HSTS present = %v, want %v", got, tc.https)
			}
			if !strings.Contains(h.Get("Content-Security-Policy"), tc.policy) ||
				h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") == "" {
				t.Errorf("headers: %v", h)
			}
		})
	}
}

func TestAllowInline(t *testing.T) {
	AllowInline("<html><style>a{b:c}</style><script>x()</script><script src=/y.js></script></html>")
	csp := PageCSP()
	// sha256 of "a{b:c}" and "x()".
	for _, want := range []string{"'sha256-", "script-src 'self' 'sha256-", "style-src 'self' 'sha256-", "default-src 'self'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("policy %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe-inline") {
		t.Errorf("policy allows any inline code: %q", csp)
	}
}
