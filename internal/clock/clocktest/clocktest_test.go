package clocktest

import (
	"slices"
	"testing"
	"time"
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
