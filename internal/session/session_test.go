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
	// A value of the old format (no session id), correctly signed.
	legacyPayload := "YWxpY2U.1800000000.1800043200"
	legacy := legacyPayload + "." + c.mac(legacyPayload)
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
		{"no session id (old format)", c, legacy, now, "", false, false},
		{"other binding", c.Bound("token-2"), v, now, "", false, false},
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

// A re-issued session keeps its id, so ending the id ends every value the
// session had; two logins get different ids.
func TestSessionIDs(t *testing.T) {
	c := New("0123456789abcdef0123456789abcdef")
	now := time.Unix(1_800_000_000, 0)
	first, ok := c.Claims(c.Issue("alice", now), now)
	if !ok || !ValidID(first.ID) {
		t.Fatalf("claims %+v %v", first, ok)
	}
	again, _ := c.Claims(c.Issue("alice", now), now)
	if again.ID == first.ID {
		t.Fatal("two sessions share an id")
	}
	later := now.Add(2 * time.Hour)
	rotated, ok := c.Claims(c.IssueID("alice", first.ID, later), later)
	if !ok || rotated.ID != first.ID || !rotated.Issued.Equal(later) {
		t.Fatalf("rotated %+v %v", rotated, ok)
	}
}

// Bound codecs: the dashboard's values are tied to the admin token's tag.
func TestBinding(t *testing.T) {
	const sec = "0123456789abcdef0123456789abcdef"
	now := time.Unix(1_800_000_000, 0)
	tag1, tag2 := TokenTag(sec, "token-one"), TokenTag(sec, "token-two")
	if tag1 == tag2 || tag1 != TokenTag(sec, "token-one") || strings.Contains(tag1, "token") {
		t.Fatalf("tags %q %q", tag1, tag2)
	}
	a := NewFor(sec, "admin-session")
	v := a.Bound(tag1).Issue("admin", now)
	tests := []struct {
		name  string
		codec *Codec
		ok    bool
	}{
		{"same token", NewFor(sec, "admin-session").Bound(tag1), true},
		{"token changed", a.Bound(tag2), false},
		{"unbound", a, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, ok := tc.codec.Check(v, now); ok != tc.ok {
				t.Fatalf("Check ok = %v, want %v", ok, tc.ok)
			}
		})
	}
}
