package jobs

import (
	"errors"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// TestStartGateOutlivesQuickAttempts: an attempt that ends before the next
// one is ready (a fast lease, a fast site) leaves its budget unused, and
// the cleanup must not forget the gate's spacing with it: the next load
// still waits 1/rate (+margin) after the first request.
func TestStartGateOutlivesQuickAttempts(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Defaults = Limits{StartsPerSec: 1, Concurrent: 5} })
	e.q.Workers().Set("w1", 10)
	e.check(hostURL("q.test", 0))
	e.check(hostURL("q.test", 1))
	first := e.pump()
	if len(first) != 1 {
		t.Fatalf("hand-overs %d", len(first))
	}
	if w, err := e.q.Workers().Ready(first[0].worker, wire.JobProgress{ID: first[0].run.ID, Attempt: first[0].run.Attempt}); err != nil || w != 0 {
		t.Fatalf("first go: %v %v", w, err)
	}
	if err := e.q.Workers().Started(first[0].worker, wire.JobStarted{ID: first[0].run.ID, Attempt: first[0].run.Attempt}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(100 * time.Millisecond)
	if err := e.done(first[0], wire.JobOutcome{Check: wire.CheckOK, Status: 200}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(900 * time.Millisecond) // the hand-over's bucket is free again
	second := e.tick()
	second = append(second, e.pump()...)
	if len(second) != 1 {
		t.Fatalf("second hand-over: %d", len(second))
	}
	e.tick() // the cleanup runs
	emit := time.Second
	want := emit + startMargin(emit) - time.Second
	if w, err := e.q.Workers().Ready(second[0].worker, wire.JobProgress{ID: second[0].run.ID, Attempt: second[0].run.Attempt}); err != nil || w != want {
		t.Fatalf("second go waits %v (%v), want %v: 1/rate plus margin after the first request", w, err, want)
	}
}

// TestStartGate: hand-overs are paced, but a browser lease takes a varying
// time; the gate paces the page loads themselves, with a small margin, so
// two attempts handed over 1/rate apart whose browsers became ready at
// once still reach the site 1/rate (+margin) apart.
func TestStartGate(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Defaults = Limits{StartsPerSec: 2, Concurrent: 5} })
	e.q.Workers().Set("w1", 10)
	for i := range 2 {
		e.check(hostURL("a.test", i))
	}
	first := e.pump()
	e.clock.Advance(500 * time.Millisecond)
	second := e.pump()
	if len(first) != 1 || len(second) != 1 {
		t.Fatalf("hand-overs %d, %d", len(first), len(second))
	}
	// The first browser was slow to lease: both are ready now.
	e.clock.Advance(400 * time.Millisecond)
	ready := func(l launch) time.Duration {
		t.Helper()
		w, err := e.q.Workers().Ready(l.worker, wire.JobProgress{ID: l.run.ID, Attempt: l.run.Attempt})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	if w := ready(first[0]); w != 0 {
		t.Fatalf("first ready waits %v", w)
	}
	// Until the first request is known to have left, the second waits.
	if w := ready(second[0]); w != confirmPoll {
		t.Fatalf("second ready before the first's Started waits %v, want a poll", w)
	}
	// The first request left 300 ms after its go: spacing counts from then.
	e.clock.Advance(300 * time.Millisecond)
	if err := e.q.Workers().Started(first[0].worker, wire.JobStarted{ID: first[0].run.ID, Attempt: first[0].run.Attempt, DelayNs: int64(300 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	emit := 500 * time.Millisecond
	want := emit + startMargin(emit)
	if w := ready(second[0]); w != want {
		t.Fatalf("second ready waits %v, want %v (1/rate plus margin after the first request)", w, want)
	}
	e.clock.Advance(want - time.Millisecond)
	if w := ready(second[0]); w != time.Millisecond {
		t.Fatalf("just before: wait %v", w)
	}
	e.clock.Advance(time.Millisecond)
	if w := ready(second[0]); w != 0 {
		t.Fatalf("at the time: wait %v", w)
	}
	// A stale attempt is refused.
	if _, err := e.q.Workers().Ready("w1", wire.JobProgress{ID: first[0].run.ID, Attempt: 99}); !errors.Is(err, ErrStaleReport) {
		t.Fatalf("stale Ready: %v", err)
	}
	// The class interval applies to the gate too.
	e2 := newEnv(t, func(c *Config) { c.Defaults = Limits{Interval: time.Second, Concurrent: 5} })
	e2.q.Workers().Set("w1", 10)
	e2.check(hostURL("b.test", 0))
	e2.check(hostURL("b.test", 1))
	l1 := e2.pump()
	e2.clock.Advance(time.Second)
	l2 := e2.pump()
	if len(l1) != 1 || len(l2) != 1 {
		t.Fatalf("interval hand-overs %d, %d", len(l1), len(l2))
	}
	if w, _ := e2.q.Workers().Ready(l2[0].worker, wire.JobProgress{ID: l2[0].run.ID, Attempt: l2[0].run.Attempt}); w != 0 {
		t.Fatalf("first load waits %v", w)
	}
	// Its request never left (refused before sending): the go time stands.
	if err := e2.q.Workers().Started(l2[0].worker, wire.JobStarted{ID: l2[0].run.ID, Attempt: l2[0].run.Attempt, NotSent: true}); err != nil {
		t.Fatal(err)
	}
	if w, _ := e2.q.Workers().Ready(l1[0].worker, wire.JobProgress{ID: l1[0].run.ID, Attempt: l1[0].run.Attempt}); w != time.Second+startMargin(time.Second) {
		t.Fatalf("second load waits %v, want the interval plus margin", w)
	}
	// A go whose Started never comes holds the next one at most confirmWait.
	e3 := newEnv(t, func(c *Config) { c.Defaults = Limits{StartsPerSec: 10, Concurrent: 5} })
	e3.q.Workers().Set("w1", 10)
	e3.check(hostURL("c.test", 0))
	e3.check(hostURL("c.test", 1))
	a := e3.pump()
	e3.clock.Advance(time.Second)
	bl := e3.pump()
	if w, _ := e3.q.Workers().Ready(a[0].worker, wire.JobProgress{ID: a[0].run.ID, Attempt: a[0].run.Attempt}); w != 0 {
		t.Fatalf("go: %v", w)
	}
	e3.clock.Advance(confirmWait)
	if w, _ := e3.q.Workers().Ready(bl[0].worker, wire.JobProgress{ID: bl[0].run.ID, Attempt: bl[0].run.Attempt}); w != 0 {
		t.Fatalf("after confirmWait without Started: wait %v, want go", w)
	}
}
