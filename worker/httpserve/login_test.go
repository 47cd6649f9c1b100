package httpserve

import (
	"context"
	"net/http"
	"testing"
)

// TestClientIP: the login limits key on the address our proxy appended to
// X-Forwarded-For, never on one the client put in front of it, and only on
// requests that came through a proxy (valid hop signature).
func TestClientIP(t *testing.T) {
	for _, tc := range []struct {
		name     string
		viaProxy bool
		xff      []string
		remote   string
		want     string
	}{
		{"no header: the peer", true, nil, "198.51.100.7:4242", "198.51.100.7"},
		{"proxy's value", true, []string{"203.0.113.5"}, "127.0.0.1:1", "203.0.113.5"},
		{"forged entries before the proxy's", true, []string{"10.0.0.1, 192.0.2.9 ,  203.0.113.5"}, "127.0.0.1:1", "203.0.113.5"},
		{"several header lines: the last", true, []string{"10.0.0.1", "203.0.113.5"}, "127.0.0.1:1", "203.0.113.5"},
		{"IPv6", true, []string{"2001:db8::1"}, "127.0.0.1:1", "2001:db8::1"},
		{"garbage last entry: the peer", true, []string{"203.0.113.5, nonsense"}, "[2001:db8::2]:80", "2001:db8::2"},
		{"nothing usable", true, nil, "pipe", ""},
		{"not via a proxy: the peer, whatever the header says", false, []string{"203.0.113.5"}, "198.51.100.7:4242", "198.51.100.7"},
	} {
		r := &http.Request{Header: http.Header{}, RemoteAddr: tc.remote}
		if tc.viaProxy {
			r = r.WithContext(context.WithValue(context.Background(), viaProxyKey{}, true))
		}
		for _, v := range tc.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		if got := clientIP(r); got != tc.want {
			t.Errorf("%s: clientIP = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestLockedMessage(t *testing.T) {
	if got := lockedMessage(1); got != "Too many failed attempts; try again in 1 second." {
		t.Error(got)
	}
	if got := lockedMessage(30); got != "Too many failed attempts; try again in 30 seconds." {
		t.Error(got)
	}
}
