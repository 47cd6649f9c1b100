package cdpticket

import (
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/session"
)

// TestTickets: a ticket opens only the browser it was issued for, until
// its session's end, and only under its key.
func TestTickets(t *testing.T) {
	key := session.Key("a cluster secret of enough length!", Purpose)
	other := session.Key("another cluster secret, long enough", Purpose)
	now := time.Unix(1e9, 0)
	id := session.NewID()
	want := Claims{Owner: "automation", Session: id, Idle: 90 * time.Second, KeepAlive: 1500 * time.Millisecond, Width: 390, Height: 844}
	tk := Issue(key, "w1.abc", "b1", want, now, now.Add(time.Hour))
	want.Expires = now.Add(time.Hour)
	for _, tc := range []struct {
		name              string
		key               []byte
		instance, browser string
		ticket            string
		at                time.Time
		ok                bool
	}{
		{"valid", key, "w1.abc", "b1", tk, now.Add(time.Minute), true},
		{"another browser", key, "w1.abc", "b2", tk, now, false},
		{"another instance", key, "w1.abd", "b1", tk, now, false},
		{"expired", key, "w1.abc", "b1", tk, now.Add(time.Hour), false},
		{"another key", other, "w1.abc", "b1", tk, now, false},
		{"no key", nil, "w1.abc", "b1", tk, now, false},
		{"tampered", key, "w1.abc", "b1", tk[:len(tk)-2] + "xx", now, false},
		{"garbage", key, "w1.abc", "b1", "not a ticket", now, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, ok := Check(tc.key, tc.instance, tc.browser, tc.ticket, tc.at)
			if ok != tc.ok {
				t.Fatalf("ok %v, want %v", ok, tc.ok)
			}
			if ok && (cl.Owner != want.Owner || cl.Session != want.Session || cl.Idle != want.Idle || cl.KeepAlive != want.KeepAlive ||
				cl.Width != want.Width || cl.Height != want.Height || !cl.Expires.Equal(want.Expires)) {
				t.Fatalf("claims %+v", cl)
			}
		})
	}
}
