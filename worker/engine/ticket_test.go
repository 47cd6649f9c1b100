package engine

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestTicketRedeem(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tk := NewTickets()
	issue := func() string {
		return tk.Issue(TicketClaims{Browser: "b1", User: "alice", Sessions: []string{"s1"}, Origin: "https://cb.example"}, now)
	}
	used := issue()
	if _, err := tk.Redeem(used, "b1", "https://cb.example", now); err != nil {
		t.Fatal(err)
	}
	tampered := func() string {
		s := issue()
		payload, sig, _ := strings.Cut(s, ".")
		return payload[:len(payload)-2] + "x" + payload[len(payload)-1:] + "." + sig
	}
	for _, tc := range []struct {
		name            string
		ticket          string
		browser, origin string
		at              time.Time
		want            error
	}{
		{"valid", issue(), "b1", "https://cb.example", now.Add(TicketTTL), nil},
		{"used before", used, "b1", "https://cb.example", now, ErrTicketUsed},
		{"expired", issue(), "b1", "https://cb.example", now.Add(TicketTTL + time.Second), ErrTicketExpired},
		{"another browser", issue(), "b2", "https://cb.example", now, ErrTicketBrowser},
		{"another origin", issue(), "b1", "https://evil.example", now, ErrTicketOrigin},
		{"no origin", issue(), "b1", "", now, ErrTicketOrigin},
		{"tampered", tampered(), "b1", "https://cb.example", now, ErrTicketMAC},
		{"another worker's", NewTickets().Issue(TicketClaims{Browser: "b1", Origin: "https://cb.example"}, now), "b1", "https://cb.example", now, ErrTicketMAC},
		{"no signature", "abc", "b1", "https://cb.example", now, ErrTicketMalformed},
		{"bad base64", "a.%%%", "b1", "https://cb.example", now, ErrTicketMalformed},
		{"empty", "", "b1", "https://cb.example", now, ErrTicketMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tk.Redeem(tc.ticket, tc.browser, tc.origin, tc.at)
			if !errors.Is(err, tc.want) {
				t.Fatalf("redeem: %v, want %v", err, tc.want)
			}
			if err == nil && (c.User != "alice" || len(c.Sessions) != 1 || c.Sessions[0] != "s1") {
				t.Fatalf("claims %+v", c)
			}
		})
	}
}

// TestTicketNoncesExpire: used nonces are kept only until their tickets
// expire, looked over once their number doubles.
func TestTicketNoncesExpire(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	tk := NewTickets()
	for range minPrune {
		if _, err := tk.Redeem(tk.Issue(TicketClaims{Browser: "b", Origin: "o"}, now), "b", "o", now); err != nil {
			t.Fatal(err)
		}
	}
	later := now.Add(TicketTTL + 2*time.Second)
	if _, err := tk.Redeem(tk.Issue(TicketClaims{Browser: "b", Origin: "o"}, later), "b", "o", later); err != nil {
		t.Fatal(err)
	}
	if n := len(tk.used); n != 1 {
		t.Fatalf("%d nonces kept, want the one still valid", n)
	}
}
