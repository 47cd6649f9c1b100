package jobs

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// TestRequestsHeldToBudget: every request of a job's browser takes a slot
// of its host's budget (requests in flight) and, unless it is the document
// the start gate paced already, a start of the gate; another host's
// requests count against that host's own budget; an attempt's end gives
// back what it still holds; a stale attempt is refused.
func TestRequestsHeldToBudget(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.Defaults = Limits{Concurrent: 2, StartsPerSec: 10}
		c.ReportEvery = time.Hour
	})
	e.q.Workers().Set("w", 4)
	e.check("http://a.test/")
	ls := e.pump()
	if len(ls) != 1 {
		t.Fatalf("launched %v", urls(ls))
	}
	run := ls[0].run
	wk := e.q.Workers()
	req := func(n int64, host, phase string, doc bool) time.Duration {
		t.Helper()
		d, err := wk.Request("w", wire.JobRequest{ID: run.ID, Attempt: run.Attempt, N: n, Host: host, Phase: phase, Doc: doc})
		if err != nil {
			t.Fatalf("request %d %s: %v", n, phase, err)
		}
		return d
	}
	// emit 100 ms + the gate's 50 ms margin.
	const spacing = 150 * time.Millisecond
	if d, err := wk.Ready("w", wire.JobProgress{ID: run.ID, Attempt: run.Attempt}); err != nil || d != 0 {
		t.Fatalf("the document's gate: %v %v", d, err)
	}
	if d := req(1, "a.test:80", wire.RequestGo, true); d != 0 {
		t.Fatalf("the document waited %v for a slot", d)
	}
	if err := wk.Started("w", wire.JobStarted{ID: run.ID, Attempt: run.Attempt}); err != nil {
		t.Fatal(err)
	}
	if d := req(2, "a.test:80", wire.RequestGo, false); d != spacing {
		t.Fatalf("a subresource right after the document: wait %v, want %v", d, spacing)
	}
	e.clock.Advance(spacing)
	if d := req(2, "A.TEST:80", wire.RequestGo, false); d != 0 {
		t.Fatalf("the subresource after the spacing: wait %v", d)
	}
	e.clock.Advance(time.Second)
	if d := req(3, "a.test:80", wire.RequestGo, false); d != requestPoll {
		t.Fatalf("a third request in flight at concurrency 2: wait %v, want %v", d, requestPoll)
	}
	// Another host's requests count against its own budget.
	if d := req(4, "cdn.test:80", wire.RequestGo, false); d != 0 {
		t.Fatalf("another host waited %v", d)
	}
	req(1, "a.test:80", wire.RequestEnd, true)
	// #2's go is not confirmed sent yet: the next start waits for it.
	if d := req(3, "a.test:80", wire.RequestGo, false); d != confirmPoll {
		t.Fatalf("a start before the previous one's sent: wait %v, want %v", d, confirmPoll)
	}
	e.clock.Advance(10 * time.Millisecond)
	req(2, "a.test:80", wire.RequestSent, false) // sent at its go + 0
	if d := req(3, "a.test:80", wire.RequestGo, false); d != 0 {
		t.Fatalf("after #2 was sent long enough ago: wait %v", d)
	}
	e.q.mu.Lock()
	in := e.q.sched.inflight()
	e.q.mu.Unlock()
	a := e.dns["a.test"][0].String() + ":80"
	if in[a] != 2 || in["host:cdn.test:80"] != 1 {
		t.Fatalf("in flight %v", in)
	}
	// A stale attempt is refused.
	if _, err := wk.Request("w", wire.JobRequest{ID: run.ID, Attempt: run.Attempt + 1, N: 9, Host: "a.test:80", Phase: wire.RequestGo}); !errors.Is(err, ErrStaleReport) {
		t.Fatalf("a stale attempt's request: %v", err)
	}
	// The attempt ends: what it held is given back.
	if err := e.done(ls[0], wire.JobOutcome{Status: 200, Check: wire.CheckOK}); err != nil {
		t.Fatal(err)
	}
	e.q.mu.Lock()
	in = e.q.sched.inflight()
	e.q.mu.Unlock()
	if len(in) != 0 {
		t.Fatalf("in flight after the attempt ended: %v", in)
	}
}

// TestRequestsWithinLimits: several attempts on one host, each sending a
// document and subresources as fast as the budget lets them (random
// durations, fake clock): requests in flight never exceed the host's
// concurrency, and no one-second window holds more starts than its rate.
func TestRequestsWithinLimits(t *testing.T) {
	for _, l := range []Limits{{Concurrent: 2, StartsPerSec: 2}, {Concurrent: 1, StartsPerSec: 5}, {Concurrent: 3, StartsPerSec: 1}} {
		e := newEnv(t, func(c *Config) { c.Defaults = l; c.ReportEvery = time.Hour })
		e.q.Workers().Set("w", 8)
		for i := range 6 {
			e.check(hostURL("a.test", i))
		}
		rng := rand.New(rand.NewPCG(1, 2))
		type req struct {
			run        wire.JobRun
			n          int64
			doc        bool
			sentAt     time.Time
			end        time.Time
			goOK, sent bool
		}
		var pending, flying []*req
		var starts []time.Time
		peak := 0
		now := func() time.Time { return e.clock.Now() }
		wk := e.q.Workers()
		for step := 0; step < 20000; step++ {
			for _, ln := range e.tick() {
				if d, err := wk.Ready(ln.worker, wire.JobProgress{ID: ln.run.ID, Attempt: ln.run.Attempt}); err != nil || d != 0 {
					// Not yet: the test keeps it as a request that asks the gate.
					pending = append(pending, &req{run: ln.run, n: 0})
					continue
				}
				pending = append(pending, &req{run: ln.run, n: 1, doc: true, goOK: true})
				for k := int64(2); k <= 4; k++ {
					pending = append(pending, &req{run: ln.run, n: k})
				}
			}
			// Ask for every pending request.
			var kept []*req
			for _, r := range pending {
				if r.n == 0 { // the document's gate
					if d, _ := wk.Ready("w", wire.JobProgress{ID: r.run.ID, Attempt: r.run.Attempt}); d == 0 {
						kept = append(kept, &req{run: r.run, n: 1, doc: true, goOK: true})
						for k := int64(2); k <= 4; k++ {
							kept = append(kept, &req{run: r.run, n: k})
						}
					} else {
						kept = append(kept, r)
					}
					continue
				}
				d, err := wk.Request("w", wire.JobRequest{ID: r.run.ID, Attempt: r.run.Attempt, N: r.n, Host: "a.test:80", Phase: wire.RequestGo, Doc: r.doc})
				if err != nil {
					t.Fatal(err)
				}
				if d != 0 {
					kept = append(kept, r)
					continue
				}
				// Written a random moment after the go.
				r.sentAt = now().Add(time.Duration(rng.IntN(30)) * time.Millisecond)
				r.end = r.sentAt.Add(time.Duration(50+rng.IntN(700)) * time.Millisecond)
				flying = append(flying, r)
			}
			pending = kept
			peak = max(peak, len(flying))
			e.clock.Advance(5 * time.Millisecond)
			still := flying[:0]
			for _, r := range flying {
				if !r.sent && !now().Before(r.sentAt) {
					r.sent = true
					starts = append(starts, r.sentAt)
					if r.doc {
						_ = wk.Started("w", wire.JobStarted{ID: r.run.ID, Attempt: r.run.Attempt, DelayNs: int64(r.sentAt.Sub(now().Add(-5 * time.Millisecond)))})
					} else {
						_, _ = wk.Request("w", wire.JobRequest{ID: r.run.ID, Attempt: r.run.Attempt, N: r.n, Host: "a.test:80", Phase: wire.RequestSent, DelayNs: 0})
					}
				}
				if r.sent && !now().Before(r.end) {
					_, _ = wk.Request("w", wire.JobRequest{ID: r.run.ID, Attempt: r.run.Attempt, N: r.n, Host: "a.test:80", Phase: wire.RequestEnd})
					if r.n == 4 {
						_ = wk.Done(context.Background(), "w", wire.JobOutcome{ID: r.run.ID, Attempt: r.run.Attempt, Status: 200, Check: wire.CheckOK})
					}
					continue
				}
				still = append(still, r)
			}
			flying = still
			if len(pending) == 0 && len(flying) == 0 && step > 10 && len(e.q.ListAll(wire.JobQueued, wire.JobWorking)) == 0 {
				break
			}
		}
		if len(starts) != 24 {
			js, _ := e.q.List(ListOptions{})
			for _, j := range js {
				t.Logf("%s %s %+v", j.Spec.URL, j.State, j.Attempts)
			}
			t.Fatalf("%+v: %d requests sent, want 24 (pending %d flying %d)", l, len(starts), len(pending), len(flying))
		}
		if peak > l.Concurrent {
			t.Errorf("%+v: %d requests in flight", l, peak)
		}
		if n := MaxStartsIn(starts, time.Second); float64(n) > l.StartsPerSec {
			t.Errorf("%+v: %d requests in one second", l, n)
		}
	}
}

// TestDocumentSentLate: a document's sent that arrives after the start the
// gate knows (an https tunnel that waited for a slot) spaces the next
// start from it; an earlier one changes nothing.
func TestDocumentSentLate(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	l := Limits{Concurrent: 2, StartsPerSec: 10}
	var b budget
	if w := b.gate(l, "j/1", now); w != 0 {
		t.Fatalf("first go: %v", w)
	}
	b.started(l, "j/1", false, 0, now)
	b.sentNoEarlierThan(l, now.Add(-time.Second))
	if w := b.requestGo(l, "j/1#2", false, now.Add(150*time.Millisecond)); w != 0 {
		t.Fatalf("an earlier sent moved the spacing: wait %v", w)
	}
	b.started(l, "j/1#2", false, 0, now.Add(150*time.Millisecond))
	b.sentNoEarlierThan(l, now.Add(time.Second))
	if w := b.requestGo(l, "j/1#3", false, now.Add(time.Second)); w != 150*time.Millisecond {
		t.Fatalf("after a late sent: wait %v, want 150ms", w)
	}
}
