package jobs

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// Per-class concurrency: at most Concurrent attempts of one class run.
func TestClassConcurrency(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Defaults = Limits{Concurrent: 2} })
	// The runner is called outside the queue's lock: it may call back.
	e.runner.onRun = func(string, wire.JobRun) { _ = e.q.Stats() }
	e.q.Workers().Set("w1", 10)
	for i := range 5 {
		e.check(hostURL("a.test", i))
	}
	got := e.pump()
	if len(got) != 2 {
		t.Fatalf("started %d, want 2 (Concurrent)", len(got))
	}
	if more := e.pump(); len(more) != 0 {
		t.Fatalf("started %d more while 2 run", len(more))
	}
	if err := e.done(got[0], wire.JobOutcome{Check: wire.CheckOK}); err != nil {
		t.Fatal(err)
	}
	next := e.pump()
	if len(next) != 1 || next[0].run.Spec.URL != hostURL("a.test", 2) {
		t.Fatalf("after a DONE started %v, want the third (FIFO)", urls(next))
	}
}

// Starts per second: a token bucket (burst 1) spaces starts 1/rate apart.
func TestClassStartsPerSecond(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Defaults = Limits{StartsPerSec: 2} })
	e.q.Workers().Set("w1", 10)
	for i := range 4 {
		e.check(hostURL("a.test", i))
	}
	t0 := e.clock.Now()
	if n := len(e.pump()); n != 1 {
		t.Fatalf("started %d at once, want 1", n)
	}
	if w := e.q.NextWake(); !w.Equal(t0.Add(500 * time.Millisecond)) {
		t.Fatalf("next wake %v, want t0+500ms", w.Sub(t0))
	}
	e.clock.Advance(499 * time.Millisecond)
	if n := len(e.pump()); n != 0 {
		t.Fatalf("started %d before 1/rate", n)
	}
	e.clock.Advance(time.Millisecond)
	if n := len(e.pump()); n != 1 {
		t.Fatalf("started %d at 1/rate, want 1", n)
	}
	// A burst of 2 lets two start at once after a pause.
	e2 := newEnv(t, func(c *Config) { c.Defaults = Limits{StartsPerSec: 2, Burst: 2} })
	e2.q.Workers().Set("w1", 10)
	for i := range 4 {
		e2.check(hostURL("a.test", i))
	}
	if n := len(e2.pump()); n != 2 {
		t.Fatalf("burst 2: started %d at once, want 2", n)
	}
}

// The url-checker document's CLASS_INTERVAL example: two URLs of one class,
// the checker consumes one; an immediate second run none; after the
// interval the second.
func TestClassInterval(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.Defaults = Limits{Interval: 3 * time.Second}
		c.AllowAddrs = []string{"127.0.0.1"}
	})
	e.q.Workers().Set("pool", 3)
	e.check("http://127.0.0.1/6")
	j7 := e.check("http://127.0.0.1/7")
	if got := e.pump(); len(got) != 1 || freeSlots(e.q, "pool") != 2 {
		t.Fatalf("first run started %v, free %d; want one, 2 free", urls(got), freeSlots(e.q, "pool"))
	}
	if got := e.pump(); len(got) != 0 || e.state(j7.ID) != wire.JobQueued {
		t.Fatalf("immediate second run started %v", urls(got))
	}
	e.clock.Advance(3100 * time.Millisecond)
	if got := e.pump(); len(got) != 1 || got[0].run.ID != j7.ID || freeSlots(e.q, "pool") != 1 {
		t.Fatalf("after the interval started %v, free %d", urls(got), freeSlots(e.q, "pool"))
	}
}

// The url-checker document's thread-limit example: with 3 slots, no job
// leaves the queue while none is free; a foo: URL is discarded.
func TestNoPullWithoutFreeSlot(t *testing.T) {
	e := newEnv(t, nil)
	e.q.Workers().Set("pool", 3)
	if n := len(e.pump()); n != 0 {
		t.Fatalf("empty queue started %d", n)
	}
	foo := e.check("foo://example.com/1")
	if foo.State != wire.JobDisallowed || foo.Disallow != DisallowScheme {
		t.Fatalf("foo: job = %s %s", foo.State, foo.Disallow)
	}
	if n := len(e.pump()); n != 0 || freeSlots(e.q, "pool") != 3 {
		t.Fatal("a foo: URL reached a worker")
	}
	e.check("http://example.com/1")
	first := e.pump()
	if len(first) != 1 || freeSlots(e.q, "pool") != 2 {
		t.Fatalf("started %d, free %d", len(first), freeSlots(e.q, "pool"))
	}
	e.check("http://example.com/2")
	e.check("http://example.com/3")
	if n := len(e.pump()); n != 2 || freeSlots(e.q, "pool") != 0 {
		t.Fatalf("started %d, free %d; want 2, 0", n, freeSlots(e.q, "pool"))
	}
	j4 := e.check("http://example.com/4")
	if n := len(e.pump()); n != 0 || e.state(j4.ID) != wire.JobQueued {
		t.Fatalf("a job left the queue without a free slot (%d started)", n)
	}
	if s := e.q.Stats(); s.Queued["example.com:80"] != 1 {
		t.Fatalf("queued = %v", s.Queued)
	}
	// Releasing one slot lets url4 go; url5 stays queued.
	if err := e.done(first[0], wire.JobOutcome{Check: wire.CheckOK}); err != nil {
		t.Fatal(err)
	}
	j5 := e.check("http://example.com/5")
	got := e.pump()
	if len(got) != 1 || got[0].run.ID != j4.ID || e.state(j5.ID) != wire.JobQueued || freeSlots(e.q, "pool") != 0 {
		t.Fatalf("started %v; url5 %s", urls(got), e.state(j5.ID))
	}
}

// Disallowed URLs are discarded with a reason and never reach a worker;
// allowing the same URL again gets it checked.
func TestDisallowedThenAllowed(t *testing.T) {
	allow := false
	e := newEnv(t, func(c *Config) {
		c.Policy = func(spec wire.JobSpec) (bool, string) {
			if allow {
				return true, ""
			}
			return false, "navigation policy denies " + spec.URL
		}
	})
	e.q.Workers().Set("w", 3)
	j := e.check("http://bar.test/")
	if j.State != wire.JobDisallowed || j.Disallow != DisallowPolicy || !strings.Contains(j.Reason, "denies") {
		t.Fatalf("job = %+v", j)
	}
	if n := len(e.pump()); n != 0 || freeSlots(e.q, "w") != 3 {
		t.Fatal("a disallowed job reached a worker")
	}
	allow = true
	j2 := e.check("http://bar.test/")
	if j2.State != wire.JobQueued {
		t.Fatalf("after the policy changed: %s", j2.State)
	}
	if got := e.pump(); len(got) != 1 || freeSlots(e.q, "w") != 2 {
		t.Fatalf("allowed again: started %d", len(got))
	}
}

func TestDisallowedAddresses(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.AllowAddrs = []string{"127.0.0.1:8080", "169.254.0.0/16"}
	})
	e.dns["intranet.test"] = []netip.Addr{netip.MustParseAddr("10.1.2.3")}
	e.dns["mixed.test"] = []netip.Addr{netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("192.168.1.1")}
	e.dns["meta.test"] = []netip.Addr{netip.MustParseAddr("169.254.169.254")}
	for _, tc := range []struct {
		url, want, code string
	}{
		{"http://127.0.0.1:8080/x", wire.JobQueued, ""},
		{"http://127.0.0.1:9090/x", wire.JobDisallowed, DisallowAddress},
		{"http://localhost.:8081/", wire.JobDisallowed, DisallowAddress}, // resolved by the fake DNS below
		{"http://intranet.test/", wire.JobDisallowed, DisallowAddress},
		{"http://mixed.test/", wire.JobDisallowed, DisallowAddress},
		{"http://[::ffff:10.0.0.1]/", wire.JobDisallowed, DisallowAddress},
		{"http://169.254.169.254/latest/meta-data", wire.JobDisallowed, DisallowAddress}, // metadata: never
		{"http://meta.test/", wire.JobDisallowed, DisallowAddress},
		{"http://169.254.1.1/", wire.JobQueued, ""}, // link-local, allowed by a rule
		{"ftp://example.com/", wire.JobDisallowed, DisallowScheme},
		{"javascript://example.com/", wire.JobDisallowed, DisallowScheme},
		{"https://example.com/", wire.JobQueued, ""},
	} {
		if tc.url == "http://localhost.:8081/" {
			e.dns["localhost"] = []netip.Addr{netip.MustParseAddr("127.0.0.1")}
		}
		j := e.submit(wire.JobSpec{Kind: wire.JobRender, URL: tc.url})
		if j.State != tc.want || j.Disallow != tc.code {
			t.Errorf("%s: %s/%s (%s), want %s/%s", tc.url, j.State, j.Disallow, j.Reason, tc.want, tc.code)
		}
	}
}

// Several host names on one IP:port share one politeness budget.
func TestAliasesShareBudget(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Defaults = Limits{Concurrent: 1} })
	ip := []netip.Addr{netip.MustParseAddr("93.184.216.34")}
	e.dns["a.test"], e.dns["b.test"] = ip, ip
	e.dns["c.test"] = []netip.Addr{netip.MustParseAddr("93.184.216.35")}
	e.q.Workers().Set("w", 10)
	ja := e.check("http://a.test/")
	jb := e.check("http://b.test/")
	jc := e.check("http://c.test/")
	if ja.Class == jb.Class || ja.Budget != jb.Budget || ja.Budget != "93.184.216.34:80" || jc.Budget == ja.Budget {
		t.Fatalf("classes %s %s, budgets %s %s %s", ja.Class, jb.Class, ja.Budget, jb.Budget, jc.Budget)
	}
	got := e.pump()
	if len(got) != 2 || e.state(jb.ID) != wire.JobQueued && e.state(ja.ID) != wire.JobQueued {
		t.Fatalf("started %v: the aliases must share one slot of concurrency", urls(got))
	}
	for _, l := range got {
		if l.run.ID != jc.ID {
			if err := e.done(l, wire.JobOutcome{Check: wire.CheckOK}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := e.pump(); len(got) != 1 {
		t.Fatalf("after the alias finished started %d", len(got))
	}
}

// A class rule groups hosts into one class with its own limits.
func TestClassRules(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.Defaults = Limits{Concurrent: 5}
		c.Classes = []ClassRule{
			{Pattern: "*.shop.test", Class: "shop", Limits: &Limits{Concurrent: 1}},
			{Pattern: "re:^slow\\.test:8080$", Limits: &Limits{Concurrent: 2}},
		}
	})
	e.q.Workers().Set("w", 20)
	a := e.check("http://a.shop.test/")
	e.check("http://b.shop.test/")
	for i := range 3 {
		e.check(hostURL("slow.test:8080", i))
	}
	if a.Class != "shop" || a.Budget != "class:shop" {
		t.Fatalf("class %s budget %s", a.Class, a.Budget)
	}
	got := e.pump()
	per := map[string]int{}
	for _, l := range got {
		per[l.run.Spec.URL[:12]]++
	}
	if len(got) != 3 {
		t.Fatalf("started %v, want 1 shop + 2 slow", urls(got))
	}
	if _, err := New(Config{Runner: e.runner, Classes: []ClassRule{{Pattern: "re:("}}}, e.st); err == nil {
		t.Fatal("a bad class pattern was accepted")
	}
}

// Host slots: at most QueueCount classes have a queue of at most QueueLen;
// the rest waits in the leftover queue (FIFO), bounded by LeftoverMax, and
// moves into a host queue when one frees.
func TestHostSlotsLeftover(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.QueueCount, c.QueueLen, c.LeftoverMax = 2, 2, 3
		c.Defaults = Limits{Concurrent: 1}
	})
	a1, a2, a3 := e.check(hostURL("a.test", 1)), e.check(hostURL("a.test", 2)), e.check(hostURL("a.test", 3))
	b1 := e.check(hostURL("b.test", 1))
	c1 := e.check(hostURL("c.test", 1))
	s := e.q.Stats()
	if s.Queued["a.test:80"] != 2 || s.Queued["b.test:80"] != 1 || s.Queued["leftover"] != 2 {
		t.Fatalf("queued = %v; want a:2 b:1 leftover:2 (a3 over Queue_Len, c without a slot)", s.Queued)
	}
	e.check(hostURL("d.test", 1))
	_, err := e.q.Submit(context.Background(), admit(t, wire.JobSpec{Kind: wire.JobCheck, URL: hostURL("e.test", 1)}))
	var full *QueueFullError
	if !errors.Is(err, ErrQueueFull) || !errors.As(err, &full) || full.RetryAfter <= 0 {
		t.Fatalf("over the leftover bound: %v", err)
	}
	// A batch that does not fit is refused whole.
	if _, err := e.q.SubmitBatch(context.Background(), admitAll(t, []wire.JobSpec{{Kind: wire.JobCheck, URL: "http://f.test/"}, {Kind: wire.JobCheck, URL: "http://g.test/"}})); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("batch over the bound: %v", err)
	}
	e.q.Workers().Set("w", 10)
	// Launches of one pump run concurrently: compare pump numbers.
	round := map[string]int{}
	for i := range 10 {
		for _, l := range e.pump() {
			round[l.run.ID] = i
			if err := e.done(l, wire.JobOutcome{Check: wire.CheckOK}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(round) != 6 {
		t.Fatalf("ran %d jobs, want 6", len(round))
	}
	if !(round[a1.ID] < round[a2.ID] && round[a2.ID] < round[a3.ID]) {
		t.Fatalf("class a did not run FIFO: %d %d %d", round[a1.ID], round[a2.ID], round[a3.ID])
	}
	if round[b1.ID] != 0 || round[c1.ID] != 0 {
		// b held a slot; its queue emptied at its start, which freed the
		// slot for c in the same pump.
		t.Fatalf("b ran in pump %d, c in %d; want 0, 0", round[b1.ID], round[c1.ID])
	}
	if s := e.q.Stats(); s.Queued["leftover"] != 0 || len(s.Queued) != 1 {
		t.Fatalf("queues left: %v", s.Queued)
	}
}

// A WORKING job without a report for 2×ReportEvery is given up, retried on
// another worker, and the old attempt's late reports are ignored.
func TestLeaseExpiryRetriesElsewhere(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.ReportEvery = time.Second })
	e.q.Workers().Set("w1", 1)
	j := e.check("http://a.test/")
	first := e.pump()
	if len(first) != 1 || first[0].worker != "w1" {
		t.Fatalf("first = %v", workersOf(first))
	}
	e.q.Workers().Set("w2", 1)
	e.clock.Advance(1900 * time.Millisecond)
	if err := e.q.Workers().Working("w1", wire.JobProgress{ID: j.ID, Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(1900 * time.Millisecond) // renewed: 3.8 s after start, 1.9 s after the report
	if got := e.tick(); len(got) != 0 || e.state(j.ID) != wire.JobWorking {
		t.Fatalf("renewed lease expired early: %v %s", urls(got), e.state(j.ID))
	}
	e.clock.Advance(100 * time.Millisecond)
	second := e.tick()
	if len(second) != 1 || second[0].worker != "w2" || second[0].run.Attempt != 2 {
		t.Fatalf("after the lease: %v attempt %v", workersOf(second), second)
	}
	if len(e.runner.cancels) != 1 || e.runner.cancels[0].worker != "w1" {
		t.Fatalf("cancels = %v", e.runner.cancels)
	}
	// The abandoned attempt reports late: ignored, never two at once.
	if err := e.q.Workers().Working("w1", wire.JobProgress{ID: j.ID, Attempt: 1}); !errors.Is(err, ErrStaleReport) {
		t.Fatalf("late WORKING: %v", err)
	}
	if err := e.done(first[0], wire.JobOutcome{Check: wire.CheckOK}); !errors.Is(err, ErrStaleReport) {
		t.Fatalf("late DONE: %v", err)
	}
	got, _ := e.q.Get(j.ID)
	if got.State != wire.JobWorking || got.Worker != "w2" || got.Tries != 2 {
		t.Fatalf("after the late report: %+v", got)
	}
	if freeSlots(e.q, "w1") != 1 || freeSlots(e.q, "w2") != 0 {
		t.Fatal("slots wrong after the late report")
	}
	if err := e.done(second[0], wire.JobOutcome{Check: wire.CheckOK}); err != nil {
		t.Fatal(err)
	}
	got, _ = e.q.Get(j.ID)
	if got.State != wire.JobDone || len(got.Attempts) != 2 || !strings.Contains(got.Attempts[0].Err, "lease expired") {
		t.Fatalf("final: %+v", got)
	}
}

// A worker that leaves: its jobs are retried on another worker at once.
func TestWorkerRemovedRetries(t *testing.T) {
	e := newEnv(t, nil)
	e.q.Workers().Set("w1", 2)
	j := e.check("http://a.test/")
	if got := e.pump(); len(got) != 1 {
		t.Fatal("not started")
	}
	e.q.Workers().Set("w2", 2)
	e.q.Workers().Remove(context.Background(), "w1")
	got := e.pump()
	if len(got) != 1 || got[0].worker != "w2" || got[0].run.ID != j.ID {
		t.Fatalf("retry: %v", workersOf(got))
	}
	jj, _ := e.q.Get(j.ID)
	if jj.Attempts[0].Err != "worker w1 left" {
		t.Fatalf("attempt 1 = %+v", jj.Attempts[0])
	}
}

// Attempts are bounded; the job then FAILS with every attempt's reason. A
// permanent failure fails at once.
func TestBoundedAttempts(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxAttempts = 3 })
	e.q.Workers().Set("w1", 1)
	e.q.Workers().Set("w2", 1)
	j := e.check("http://a.test/")
	var ws []string
	for i := range 3 {
		got := e.pump()
		if len(got) != 1 {
			t.Fatalf("attempt %d not started", i+1)
		}
		ws = append(ws, got[0].worker)
		if err := e.done(got[0], wire.JobOutcome{Err: "boom " + string(rune('A'+i))}); err != nil {
			t.Fatal(err)
		}
	}
	if ws[0] == ws[1] || ws[1] == ws[2] {
		t.Fatalf("retries did not prefer another worker: %v", ws)
	}
	got, _ := e.q.Get(j.ID)
	if got.State != wire.JobFailed || !strings.Contains(got.Reason, "boom A") || !strings.Contains(got.Reason, "boom B") || !strings.Contains(got.Reason, "boom C") {
		t.Fatalf("final: %s %q", got.State, got.Reason)
	}
	if n := len(e.pump()); n != 0 {
		t.Fatal("a failed job started again")
	}
	p := e.check("http://b.test/")
	l := e.pump()
	if err := e.done(l[0], wire.JobOutcome{Err: "result too large", Permanent: true}); err != nil {
		t.Fatal(err)
	}
	if st := e.state(p.ID); st != wire.JobFailed {
		t.Fatalf("permanent failure: %s", st)
	}
}

// A worker that refuses a run: the job stays queued and that worker is
// skipped until its next slot change.
func TestRefusedRunStaysQueued(t *testing.T) {
	e := newEnv(t, nil)
	e.runner.setRefuse("w1", true)
	e.q.Workers().Set("w1", 5)
	j := e.check("http://a.test/")
	e.pump()
	got, _ := e.q.Get(j.ID)
	if got.State != wire.JobQueued || len(got.Attempts) != 0 || freeSlots(e.q, "w1") != 5 {
		t.Fatalf("after a refusal: %+v", got)
	}
	if n := len(e.pump()); n != 0 {
		t.Fatal("a refusing worker was tried again at once")
	}
	e.runner.setRefuse("w1", false)
	e.q.Workers().Set("w1", 5)
	if l := e.pump(); len(l) != 1 || l[0].run.Attempt != 2 {
		t.Fatalf("after Workers.Set: %v", l)
	}
	// A refusal without a slot change is retried after the back-off (the
	// worker's count lagged: its last attempt was still reporting).
	e.runner.setRefuse("w1", true)
	j2 := e.check("http://b.test/")
	e.pump()
	e.runner.setRefuse("w1", false)
	if n := len(e.pump()); n != 0 {
		t.Fatal("tried again before the back-off")
	}
	e.clock.Advance(refuseBackoff)
	if l := e.pump(); len(l) != 1 || l[0].run.ID != j2.ID {
		t.Fatalf("after the back-off: %v", l)
	}
}

func TestCancel(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Defaults = Limits{Concurrent: 1} })
	e.q.Workers().Set("w", 5)
	var finished []string
	e.q.cfg.OnFinish = func(j Job, _ []byte) { finished = append(finished, j.ID+":"+j.State) }
	a := e.check("http://a.test/1")
	b := e.check("http://a.test/2")
	l := e.pump()
	if len(l) != 1 {
		t.Fatal("not started")
	}
	if got, err := e.q.Cancel(context.Background(), b.ID); err != nil || got.State != wire.JobCancelled {
		t.Fatalf("cancel queued: %v %v", got.State, err)
	}
	if got, err := e.q.Cancel(context.Background(), a.ID); err != nil || got.State != wire.JobCancelled {
		t.Fatalf("cancel working: %v %v", got.State, err)
	}
	if len(e.runner.cancels) != 1 || e.runner.cancels[0].id != a.ID || e.runner.cancels[0].attempt != 1 {
		t.Fatalf("runner cancels = %v", e.runner.cancels)
	}
	if freeSlots(e.q, "w") != 5 {
		t.Fatal("the cancelled attempt kept its slot")
	}
	if err := e.done(l[0], wire.JobOutcome{Check: wire.CheckOK}); !errors.Is(err, ErrStaleReport) {
		t.Fatalf("report after cancel: %v", err)
	}
	if _, err := e.q.Cancel(context.Background(), a.ID); !errors.Is(err, ErrFinished) {
		t.Fatalf("second cancel: %v", err)
	}
	if _, err := e.q.Cancel(context.Background(), "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown: %v", err)
	}
	if len(finished) != 2 {
		t.Fatalf("OnFinish = %v", finished)
	}
}

func TestResultAndLimit(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxResultBytes = 10 })
	e.q.Workers().Set("w", 5)
	var cached []byte
	e.q.cfg.OnFinish = func(j Job, body []byte) { cached = body }
	j := e.submit(wire.JobSpec{Kind: wire.JobRender, URL: "http://a.test/"})
	if j.Spec.Format != wire.FormatPNG || j.Spec.TimeoutMs != DefaultTimeout || j.Spec.MaxBytes != 10 {
		t.Fatalf("defaults not filled: %+v", j.Spec)
	}
	l := e.pump()
	if err := e.done(l[0], wire.JobOutcome{Body: []byte("PNG.."), ContentType: "image/png", Status: 200}); err != nil {
		t.Fatal(err)
	}
	body, ct, err := e.q.Result(j.ID)
	if err != nil || string(body) != "PNG.." || ct != "image/png" || string(cached) != "PNG.." {
		t.Fatalf("result %q %q %v (hook %q)", body, ct, err, cached)
	}
	if got, _ := e.q.Get(j.ID); got.Result == nil || got.Result.Body != nil || got.Result.Status != 200 {
		t.Fatalf("metadata = %+v", got.Result)
	}
	big := e.submit(wire.JobSpec{Kind: wire.JobRender, URL: "http://a.test/big"})
	l = e.pump()
	if err := e.done(l[0], wire.JobOutcome{Body: make([]byte, 11)}); err != nil {
		t.Fatal(err)
	}
	got, _ := e.q.Get(big.ID)
	if got.State != wire.JobFailed || !strings.Contains(got.Reason, "over the limit") {
		t.Fatalf("oversized: %s %q", got.State, got.Reason)
	}
	if _, _, err := e.q.Result(big.ID); !errors.Is(err, ErrNoResult) {
		t.Fatalf("result of a failed job: %v", err)
	}
	if _, err := e.q.Get("nope"); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	list, next := e.q.List(ListOptions{State: wire.JobFailed})
	if len(list) != 1 || list[0].ID != big.ID || next != "" {
		t.Fatalf("list failed = %v %q", list, next)
	}
	all, next := e.q.List(ListOptions{Limit: 1})
	if len(all) != 1 || all[0].ID != j.ID || next != j.ID {
		t.Fatalf("page 1 = %v next %q", all, next)
	}
	all, next = e.q.List(ListOptions{Limit: 1, After: next})
	if len(all) != 1 || all[0].ID != big.ID || next != "" {
		t.Fatalf("page 2 = %v next %q", all, next)
	}
}

// List by submitter: each principal's jobs only, paged among themselves.
func TestListByUser(t *testing.T) {
	e := newEnv(t, nil)
	var alice []string
	for i, user := range []string{"alice", "bob", "alice", "", "alice"} {
		j := e.submit(wire.JobSpec{Kind: wire.JobCheck, URL: fmt.Sprintf("ftp://x/%d", i), User: user})
		if user == "alice" {
			alice = append(alice, j.ID)
		}
	}
	var got []string
	next := ""
	for {
		page, n := e.q.List(ListOptions{User: "alice", Limit: 2, After: next})
		for _, j := range page {
			got = append(got, j.ID)
		}
		if next = n; next == "" {
			break
		}
	}
	if !slices.Equal(got, alice) {
		t.Fatalf("alice's jobs = %v, want %v", got, alice)
	}
	if all, _ := e.q.List(ListOptions{}); len(all) != 5 {
		t.Fatalf("every job: %d, want 5", len(all))
	}
	if bob, _ := e.q.List(ListOptions{User: "bob"}); len(bob) != 1 || bob[0].Spec.User != "bob" {
		t.Fatalf("bob's jobs = %v", bob)
	}
}

// Retention: finished jobs go after Retention, and beyond MaxFinished.
func TestRetentionSweep(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Retention = time.Hour; c.MaxFinished = 2 })
	var ids []string
	for i := range 3 {
		ids = append(ids, e.check("ftp://x/"+string(rune('a'+i))).ID) // disallowed at once: finished
		e.clock.Advance(time.Minute)
	}
	e.tick()
	if _, err := e.q.Get(ids[0]); !errors.Is(err, ErrNotFound) {
		t.Fatal("over MaxFinished, the oldest was kept")
	}
	e.clock.Advance(time.Hour)
	e.tick()
	for _, id := range ids[1:] {
		if _, err := e.q.Get(id); !errors.Is(err, ErrNotFound) {
			t.Fatal("a job past retention was kept")
		}
	}
}

// Run pumps on a kick and ends with its context.
func TestRunLoop(t *testing.T) {
	r := &runner{}
	started := make(chan string, 1)
	r.onRun = func(_ string, run wire.JobRun) { started <- run.ID }
	st, _ := openMem(t)
	cfg := DefaultConfig()
	cfg.Runner = r
	cfg.Resolver = func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
	}
	cfg.Robots = func(context.Context, string, string) ([]byte, int, error) { return nil, 404, nil }
	q, err := New(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- q.Run(ctx) }()
	q.Workers().Set("w", 1)
	j, err := q.Submit(ctx, admit(t, wire.JobSpec{Kind: wire.JobCheck, URL: "http://a.test/"}))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-started:
		if id != j.ID {
			t.Fatalf("started %s", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not start the job")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not end with its context")
	}
}
