package httpsec

import (
	"crypto/tls"
	"net/http/httptest"
	"net/netip"
	"slices"
	"testing"
)

func TestParsePrefixes(t *testing.T) {
	got, err := ParsePrefixes([]string{"10.0.0.0/8, 192.168.1.7", "2001:db8::/32", "::ffff:172.16.0.0/108", ""})
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.1.7/32"),
		netip.MustParsePrefix("2001:db8::/32"), netip.MustParsePrefix("172.16.0.0/12")}
	if !slices.Equal(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
	for _, bad := range []string{"10.0.0.0/33", "lb.example.com", "10.0.0.0/8,nope"} {
		if _, err := ParsePrefixes([]string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestForwardedTrust: peers × forwarded headers × configurations: who is
// the client, and did the request come over HTTPS.
func TestForwardedTrust(t *testing.T) {
	lbs := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}
	for _, tc := range []struct {
		name     string
		s        Scheme
		peer     string
		tls      bool
		xff, xfp []string
		client   string
		https    bool
	}{
		{"nothing trusted, forged headers", Scheme{}, "203.0.113.7:1", false, []string{"198.51.100.1"}, []string{"https"}, "203.0.113.7", false},
		{"untrusted peer", Scheme{TrustedProxies: lbs}, "203.0.113.7:1", false, []string{"198.51.100.1"}, []string{"https"}, "203.0.113.7", false},
		{"trusted peer", Scheme{TrustedProxies: lbs}, "10.0.0.5:1", false, []string{"198.51.100.1"}, []string{"https"}, "198.51.100.1", true},
		{"trusted peer says http", Scheme{TrustedProxies: lbs}, "10.0.0.5:1", false, []string{"198.51.100.1"}, []string{"http"}, "198.51.100.1", false},
		{"forged left entry skipped", Scheme{TrustedProxies: lbs}, "10.0.0.5:1", false, []string{"1.2.3.4, 198.51.100.1"}, nil, "198.51.100.1", false},
		{"repeated header lines", Scheme{TrustedProxies: lbs}, "10.0.0.5:1", false, []string{"1.2.3.4", "198.51.100.1, 10.9.9.9"}, nil, "198.51.100.1", false},
		{"entry with a port", Scheme{TrustedProxies: lbs}, "10.0.0.5:1", false, []string{"198.51.100.1:5555"}, nil, "198.51.100.1", false},
		{"IPv6 entry in brackets", Scheme{TrustedProxies: lbs}, "10.0.0.5:1", false, []string{"[2001:db9::5]"}, nil, "2001:db9::5", false},
		{"all hops trusted", Scheme{TrustedProxies: lbs}, "10.0.0.5:1", false, []string{"10.1.1.1, 10.2.2.2"}, nil, "10.1.1.1", false},
		{"garbage entry", Scheme{TrustedProxies: lbs}, "10.0.0.5:1", false, []string{"unknown"}, nil, "10.0.0.5", false},
		{"mapped IPv4 peer", Scheme{TrustedProxies: lbs}, "[::ffff:10.0.0.5]:1", false, []string{"198.51.100.1"}, []string{"https"}, "198.51.100.1", true},
		{"IPv6 trusted peer", Scheme{TrustedProxies: lbs}, "[2001:db8::1]:1", false, []string{"198.51.100.1"}, []string{"https"}, "198.51.100.1", true},
		{"proto: the nearest hop's value", Scheme{TrustedProxies: lbs}, "10.0.0.5:1", false, nil, []string{"https, http"}, "10.0.0.5", false},
		{"old flag: anyone's proto, nobody's address", Scheme{TrustForwardedProto: true}, "203.0.113.7:1", false, []string{"198.51.100.1"}, []string{"https"}, "203.0.113.7", true},
		{"old flag narrowed to the list", Scheme{TrustForwardedProto: true, TrustedProxies: lbs}, "203.0.113.7:1", false, nil, []string{"https"}, "203.0.113.7", false},
		{"TLS connection", Scheme{}, "203.0.113.7:1", true, nil, []string{"http"}, "203.0.113.7", true},
		{"public https", Scheme{AlwaysHTTPS: true}, "203.0.113.7:1", false, nil, nil, "203.0.113.7", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tc.peer
			if tc.tls {
				r.TLS = &tls.ConnectionState{}
			}
			for _, v := range tc.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			for _, v := range tc.xfp {
				r.Header.Add("X-Forwarded-Proto", v)
			}
			if got := tc.s.Client(r); got != tc.client {
				t.Errorf("Client = %q, want %q", got, tc.client)
			}
			if got := tc.s.HTTPS(r); got != tc.https {
				t.Errorf("HTTPS = %v, want %v", got, tc.https)
			}
			// Behind the front, a handler with no trust of its own sees
			// the same, without the headers.
			rr := tc.s.Resolved(r)
			if got := (Scheme{}).HTTPS(rr); got != tc.https {
				t.Errorf("resolved: HTTPS = %v, want %v", got, tc.https)
			}
			if got := (Scheme{}).Client(rr); got != tc.client {
				t.Errorf("resolved: Client = %q, want %q", got, tc.client)
			}
			if rr.Header.Get("X-Forwarded-For") != "" || rr.Header.Get("X-Forwarded-Proto") != "" {
				t.Errorf("resolved request keeps forwarded headers: %v", rr.Header)
			}
		})
	}
}
