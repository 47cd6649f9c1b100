package clocktest

import (
	"slices"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
)

func TestAdvanceFiresInOrder(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := New(start)
	var fired []time.Duration
	at := func(d time.Duration) { c.AfterFunc(d, func() { fired = append(fired, c.Now().Sub(start)) }) }
	at(3 * time.Second)
	at(time.Second)
	stopped := c.AfterFunc(2*time.Second, func() { t.Error("a stopped timer fired") })
	at(10 * time.Second)
	if !stopped.Stop() || stopped.Stop() {
		t.Fatal("Stop should report true once")
	}
	settles := 0
	c.OnFire(func() { settles++ })
	c.Advance(5 * time.Second)
	if want := []time.Duration{time.Second, 3 * time.Second}; !slices.Equal(fired, want) {
		t.Fatalf("fired at %v, want %v", fired, want)
	}
	if got := c.Now().Sub(start); got != 5*time.Second {
		t.Fatalf("now %v", got)
	}
	if settles != 3 || c.Active() != 1 {
		t.Fatalf("settles %d, active %d", settles, c.Active())
	}
	c.Set(start)
	if !c.Now().Equal(start) || c.Active() != 1 {
		t.Fatal("Set moved the clock wrong or fired a timer")
	}
}

// TestTimersAndTickers: clock.NewTimer and clock.NewTicker on the fake
// clock fire as Advance passes their times, once for a timer, every
// interval for a ticker (dropping ticks nobody took), never after Stop.
func TestTimersAndTickers(t *testing.T) {
	const none = time.Duration(-1)
	type step struct {
		stop    bool // Stop before advancing
		stopped bool // what a timer's Stop reports
		advance time.Duration
		got     time.Duration // received after the advance, from the start (none: nothing)
	}
	for _, tc := range []struct {
		name   string
		ticker bool
		d      time.Duration
		steps  []step
	}{
		{"timer fires once at its time", false, 2 * time.Second, []step{
			{advance: 2*time.Second - 1, got: none},
			{advance: 1, got: 2 * time.Second},
			{advance: time.Hour, got: none},
			{stop: true, stopped: false, got: none},
		}},
		{"timer fires at its own time within a long advance", false, time.Second, []step{
			{advance: time.Minute, got: time.Second},
		}},
		{"zero timer fires on the next advance", false, 0, []step{
			{advance: 0, got: 0},
		}},
		{"stopped timer never fires", false, time.Second, []step{
			{stop: true, stopped: true, advance: time.Hour, got: none},
			{stop: true, stopped: false, got: none},
		}},
		{"ticker ticks every interval", true, time.Second, []step{
			{advance: time.Second - 1, got: none},
			{advance: 1, got: time.Second},
			{advance: time.Second, got: 2 * time.Second},
		}},
		{"ticker drops ticks nobody took", true, time.Second, []step{
			{advance: 3*time.Second + time.Second/2, got: time.Second},
			{advance: time.Second / 2, got: 4 * time.Second},
		}},
		{"stopped ticker ticks no more", true, time.Second, []step{
			{advance: time.Second, got: time.Second},
			{stop: true, advance: time.Hour, got: none},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			c := New(start)
			var ch <-chan time.Time
			var stop func() bool
			if tc.ticker {
				k := clock.NewTicker(c, tc.d)
				ch, stop = k.C, func() bool { k.Stop(); return false }
			} else {
				tm := clock.NewTimer(c, tc.d)
				ch, stop = tm.C, tm.Stop
			}
			for i, s := range tc.steps {
				if s.stop {
					if was := stop(); !tc.ticker && was != s.stopped {
						t.Fatalf("step %d: Stop = %v, want %v", i, was, s.stopped)
					}
				}
				c.Advance(s.advance)
				got := none
				select {
				case at := <-ch:
					got = at.Sub(start)
				default:
				}
				if got != s.got {
					t.Fatalf("step %d: received %v, want %v (-1: nothing)", i, got, s.got)
				}
			}
			stop()
			if n := c.Active(); n != 0 {
				t.Fatalf("%d timers left after Stop", n)
			}
		})
	}
}

func TestSince(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		move func(c *Clock)
		want time.Duration
	}{
		{"no time passed", func(*Clock) {}, 0},
		{"advanced", func(c *Clock) { c.Advance(90 * time.Second) }, 90 * time.Second},
		{"set back", func(c *Clock) { c.Set(start.Add(-time.Minute)) }, -time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := New(start)
			tc.move(c)
			if got := clock.Since(c, start); got != tc.want {
				t.Fatalf("Since = %v, want %v", got, tc.want)
			}
		})
	}
}
