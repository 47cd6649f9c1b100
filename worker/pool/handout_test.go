package pool

import (
	"testing"
	"time"
)

// The TTL holds when a free browser is handed out, not only when
// one is returned: a free browser that aged past its TTL while free is
// destroyed instead of leased, and the lease gets another free one or a
// new one.
func TestTTLAtHandout(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ttl     time.Duration
		min     int
		young   bool // a younger free browser exists besides the old one
		expired int64
	}{
		{"expired, pool refills to min", time.Hour, 1, false, 1},
		{"expired, min 0: a new one is made for the lease", time.Hour, 0, false, 1},
		{"expired, a younger free one is given", time.Hour, 1, true, 1},
		{"not expired", 3 * time.Hour, 1, false, 0},
		{"ttl 0 disables", 0, 1, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 10, 0)
			c := cfg(tc.min, 3)
			c.TTL = Duration(tc.ttl)
			old := e.lease("app", c) // born now
			oldID := e.id(old)
			youngID := 0
			if tc.young {
				e.clock.Advance(50 * time.Minute)
				y := e.lease("app", c) // made now: 50 minutes younger
				youngID = e.id(y)
				e.ret(y)
				e.clock.Advance(time.Minute)
			}
			e.ret(old) // under the TTL at its return: kept, and used last
			if tc.young {
				e.clock.Advance(15 * time.Minute) // old: 66 minutes, young: 16
			} else {
				e.clock.Advance(2 * time.Hour)
			}
			l := e.lease("app", c)
			id := e.id(l)
			switch {
			case tc.expired == 0 && id != oldID:
				t.Fatalf("got browser %d, want the free one %d", id, oldID)
			case tc.expired > 0 && id == oldID:
				t.Fatalf("the browser past its TTL (%d) was leased", oldID)
			case tc.young && id != youngID:
				t.Fatalf("got browser %d, want the younger free one %d", id, youngID)
			case tc.expired > 0 && !tc.young && id <= oldID:
				t.Fatalf("got browser %d, want a new one", id)
			}
			if tc.expired > 0 && !closed(e.f.browser(oldID)) {
				t.Error("the expired browser was not closed")
			}
			if s := e.pool("app"); s.Expired != tc.expired || s.Locked != 1 || s.Size < tc.min {
				t.Errorf("stats %+v %+v", s.Gauges, s.Counters)
			}
		})
	}
}

// A back sequence that ran is counted (the statistics show that
// returned browsers were made ready again).
func TestBackSequencesCounted(t *testing.T) {
	e := newEnv(t, 10, 0)
	c := cfg(1, 2)
	for range 3 {
		e.ret(e.lease("app", c))
	}
	if s := e.pool("app"); s.Backs != 3 || s.Returns != 3 || e.m.Stats().Backs != 3 {
		t.Errorf("stats %+v", s.Counters)
	}
}
