package session

import (
	"strings"
	"testing"
	"time"
)

func TestSessions(t *testing.T) {
	c := New("0123456789abcdef0123456789abcdef")
	other := New("another cluster secret, 32 bytes!")
	now := time.Unix(1_800_000_000, 0)
	v := c.Issue("alice", now)
	tamper := strings.Replace(v, v[:4], "Ym9i", 1) // "bob" prefix
	tests := []struct {
		name       string
		codec      *Codec
		value      string
		at         time.Time
		user       string
		rotate, ok bool
	}{
		{"fresh", c, v, now.Add(time.Minute), "alice", false, true},
		{"rotate after an hour", c, v, now.Add(2 * time.Hour), "alice", true, true},
		{"expired", c, v, now.Add(12 * time.Hour), "", false, false},
		{"other cluster", other, v, now, "", false, false},
		{"tampered user", c, tamper, now, "", false, false},
		{"garbage", c, "x.y", now, "", false, false},
		{"empty", c, "", now, "", false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u, rot, ok := tc.codec.Check(tc.value, tc.at)
			if u != tc.user || rot != tc.rotate || ok != tc.ok {
				t.Fatalf("Check = %q %v %v, want %q %v %v", u, rot, ok, tc.user, tc.rotate, tc.ok)
			}
			// Parse agrees, and gives the issue time revocations compare.
			pu, issued, pok := tc.codec.Parse(tc.value, tc.at)
			if pu != tc.user || pok != tc.ok || (pok && !issued.Equal(now)) {
				t.Fatalf("Parse = %q %v %v", pu, issued, pok)
			}
		})
	}
}
