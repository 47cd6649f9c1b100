package worker

import (
	"net/http"
	"testing"
)

// TestClientIP: the login limits key on the address our proxy appended to
// X-Forwarded-For, never on one the client put in front of it.
func TestClientIP(t *testing.T) {
	for _, tc := range []struct {
		name   string
		xff    []string
		remote string
		want   string
	}{
		{"no header: the peer", nil, "198.51.100.7:4242", "198.51.100.7"},
		{"proxy's value", []string{"203.0.113.5"}, "127.0.0.1:1", "203.0.113.5"},
		{"forged entries before the proxy's", []string{"10.0.0.1, 192.0.2.9 ,  203.0.113.5"}, "127.0.0.1:1", "203.0.113.5"},
		{"several header lines: the last", []string{"10.0.0.1", "203.0.113.5"}, "127.0.0.1:1", "203.0.113.5"},
		{"IPv6", []string{"2001:db8::1"}, "127.0.0.1:1", "2001:db8::1"},
		{"garbage last entry: the peer", []string{"203.0.113.5, nonsense"}, "[2001:db8::2]:80", "2001:db8::2"},
		{"nothing usable", nil, "pipe", ""},
	} {
		r := &http.Request{Header: http.Header{}, RemoteAddr: tc.remote}
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
