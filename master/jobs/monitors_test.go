package jobs

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// Monitors: LastCheck and Reason always move; State and LastStateChange
// only when the state changes (a first state is a change); a monitor has
// one job at a time; checks carry the previous hash.
func TestMonitorStateRules(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.ReportEvery = time.Hour }) // leases outlast the test's minutes
	var notes [][2]Monitor
	e.q.cfg.OnMonitorChange = func(old, new Monitor) { notes = append(notes, [2]Monitor{old, new}) }
	e.q.Workers().Set("w", 5)
	m, err := e.q.Monitors().Add(context.Background(), monitorSpec(t, wire.JobSpec{Kind: wire.JobCheck, URL: "http://a.test/"}), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.q.Monitors().Add(context.Background(), monitorSpec(t, wire.JobSpec{Kind: wire.JobCheck, URL: "http://a.test/"}), time.Second); err == nil {
		t.Fatal("a 1s monitor was accepted")
	}
	run := func(o wire.JobOutcome) Monitor {
		t.Helper()
		l := e.tick()
		if len(l) != 1 {
			t.Fatalf("monitor started %d jobs", len(l))
		}
		if err := e.done(l[0], o); err != nil {
			t.Fatal(err)
		}
		got, _ := e.q.Monitors().Get(m.ID)
		return got
	}
	// Unknown state: reason updated, state and last change untouched.
	got := run(wire.JobOutcome{Reason: "Nothing happened", Hash: "h1"})
	if got.State != "" || got.Reason != "Nothing happened" || !got.LastStateChange.IsZero() || got.LastCheck.IsZero() {
		t.Fatalf("unknown state: %+v", got)
	}
	// Not due yet: nothing submitted.
	if l := e.tick(); len(l) != 0 {
		t.Fatal("monitor ran before its interval")
	}
	e.clock.Advance(time.Minute)
	// The job carries the previous hash; a first state is a change.
	l := e.tick()
	if len(l) != 1 || l[0].run.Spec.PrevHash != "h1" {
		t.Fatalf("prev hash: %+v", l)
	}
	// While its job runs, a due monitor submits nothing more.
	e.clock.Advance(time.Minute)
	if l2 := e.tick(); len(l2) != 0 {
		t.Fatal("a monitor submitted a second job while its first ran")
	}
	if err := e.done(l[0], wire.JobOutcome{Check: wire.CheckOK, Reason: "200", Hash: "h1"}); err != nil {
		t.Fatal(err)
	}
	got, _ = e.q.Monitors().Get(m.ID)
	first := got.LastStateChange
	if got.State != wire.CheckOK || first.IsZero() {
		t.Fatalf("first state: %+v", got)
	}
	// Same state again: LastStateChange stays.
	e.clock.Advance(time.Minute)
	got = run(wire.JobOutcome{Check: wire.CheckOK, Reason: "200 again", Hash: "h1"})
	if !got.LastStateChange.Equal(first) || got.Reason != "200 again" {
		t.Fatalf("same state moved the change time: %+v", got)
	}
	// A different state moves it.
	e.clock.Advance(time.Minute)
	got = run(wire.JobOutcome{Check: wire.CheckUnavailable, Reason: "503"})
	if got.State != wire.CheckUnavailable || !got.LastStateChange.After(first) {
		t.Fatalf("state change: %+v", got)
	}
	if ls := e.q.Monitors().List(wire.CheckUnavailable); len(ls) != 1 {
		t.Fatalf("filter unavailable = %d", len(ls))
	}
	if ls := e.q.Monitors().List(wire.CheckOK); len(ls) != 0 {
		t.Fatalf("filter ok = %d", len(ls))
	}
	ch := e.q.Monitors().StateChanges()
	if len(ch) != 2 || ch[0].From != "" || ch[0].To != wire.CheckOK || ch[1].To != wire.CheckUnavailable {
		t.Fatalf("changes = %+v", ch)
	}
	// A content change reaches the hook (cache staleness).
	e.clock.Advance(time.Minute)
	run(wire.JobOutcome{Check: wire.CheckChanged, Hash: "h2"})
	last := notes[len(notes)-1]
	if last[0].Hash != "h1" || last[1].Hash != "h2" {
		t.Fatalf("hook = %+v", last)
	}
	if err := e.q.Monitors().Remove(m.ID); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Hour)
	if l := e.tick(); len(l) != 0 {
		t.Fatal("a removed monitor ran")
	}
}

// A render monitor is a scheduled render: NoCache, robots obeyed.
func TestScheduledRender(t *testing.T) {
	e := newEnv(t, nil)
	e.robots["a.test:80"] = robotsAnswer{body: "User-agent: *\nDisallow: /no\n", status: 200}
	e.q.Workers().Set("w", 5)
	m, err := e.q.Monitors().Add(context.Background(), monitorSpec(t, wire.JobSpec{Kind: wire.JobRender, URL: "http://a.test/yes", Format: "pdf"}), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	l := e.tick()
	if len(l) != 1 || !l[0].run.Spec.NoCache || l[0].run.Spec.Format != "pdf" {
		t.Fatalf("scheduled render = %+v", l)
	}
	if got, _ := e.q.Monitors().Get(m.ID); got.LastJob != l[0].run.ID {
		t.Fatalf("monitor's job = %q", got.LastJob)
	}
	bad, _ := e.q.Monitors().Add(context.Background(), monitorSpec(t, wire.JobSpec{Kind: wire.JobCheck, URL: "http://a.test/no"}), time.Hour)
	if l := e.tick(); len(l) != 0 {
		t.Fatal("a robots-disallowed monitor job reached a worker")
	}
	got, _ := e.q.Monitors().Get(bad.ID)
	if got.State != wire.CheckError || !strings.Contains(got.Reason, "robots.txt") {
		t.Fatalf("disallowed monitor = %+v", got)
	}
}

// TestRenderMonitorHoldsCache: a render monitor's job is keyed as an
// on-demand render and holds the reservation MonitorCache gives, so its
// result warms the cache; without a reservation it runs all the same.
func TestRenderMonitorHoldsCache(t *testing.T) {
	var reserved []string
	holder := "h1"
	e := newEnv(t, func(c *Config) {
		c.ReportEvery = time.Hour
		c.MonitorCache = &MonitorCache{
			Key: func(s wire.JobSpec) (string, string, error) { return "sig:" + s.URL, s.URL, nil },
			Reserve: func(s Spec) string {
				reserved = append(reserved, s.Signature())
				return holder
			},
			Release: func(Spec, string, error) { t.Error("released a reservation of a submitted job") },
		}
	})
	e.q.Workers().Set("w", 5)
	if _, err := e.q.Monitors().Add(context.Background(), monitorSpec(t, wire.JobSpec{Kind: wire.JobRender, URL: "http://a.test/", Format: wire.FormatText}), time.Minute); err != nil {
		t.Fatal(err)
	}
	l := e.tick()
	if len(l) != 1 {
		t.Fatalf("monitor started %d jobs", len(l))
	}
	if s := l[0].run.Spec; s.CacheSig != "sig:http://a.test/" || s.CacheHolder != "h1" || !s.NoCache {
		t.Fatalf("the render monitor's job: sig %q holder %q noCache %v", s.CacheSig, s.CacheHolder, s.NoCache)
	}
	if err := e.done(l[0], wire.JobOutcome{Hash: "x"}); err != nil {
		t.Fatal(err)
	}
	// Another render of it is being made: the job runs without filling.
	holder = ""
	e.clock.Advance(time.Minute)
	l = e.tick()
	if len(l) != 1 || l[0].run.Spec.CacheHolder != "" || l[0].run.Spec.CacheSig != "" {
		t.Fatalf("without a reservation: %+v", l)
	}
	if len(reserved) != 2 || reserved[0] != "sig:http://a.test/" {
		t.Fatalf("reservations asked: %v", reserved)
	}
	// A check monitor is never keyed.
	if _, err := e.q.Monitors().Add(context.Background(), monitorSpec(t, wire.JobSpec{Kind: wire.JobCheck, URL: "http://b.test/"}), time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, x := range e.tick() {
		if x.run.Spec.CacheSig != "" {
			t.Fatalf("a check monitor's job is keyed: %+v", x.run.Spec)
		}
	}
	if len(reserved) != 2 {
		t.Fatalf("a check asked for a reservation: %v", reserved)
	}
}
