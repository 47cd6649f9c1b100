package pool

import (
	"context"
	"errors"
	"testing"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// Lease.Reuse: a general-pool browser whose reset succeeds is lent again
// (no new browser); one whose reset fails, a specific pool's, and one
// without a reset function are handled as by Return.
func TestReuse(t *testing.T) {
	okReset := func(context.Context, browser.Browser) error { return nil }
	badReset := func(context.Context, browser.Browser) error { return errors.New("boom") }
	for _, tc := range []struct {
		name      string
		app       string
		cfg       *Config
		reset     ResetFunc
		sameAgain bool // the next lease gets the same browser
		reused    int64
		failures  int64
	}{
		{"general, reset ok", "", nil, okReset, true, 1, 0},
		{"general, reset fails", "", nil, badReset, false, 0, 1},
		{"general, no reset", "", nil, nil, false, 0, 0},
		{"specific pool: its back sequence", "app", cfg(1, 1), okReset, true, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 4, 0)
			l := e.lease(tc.app, tc.cfg)
			first := e.id(l)
			var got browser.Browser
			reset := tc.reset
			if reset != nil {
				inner := reset
				reset = func(ctx context.Context, b browser.Browser) error { got = b; return inner(ctx, b) }
			}
			l.Reuse(reset)
			e.settle()
			l.Reuse(okReset) // a second give-back does nothing
			e.settle()
			if tc.app == "" && tc.reset != nil && got != l.Browser() {
				t.Fatalf("reset ran on %v, want the leased browser", got)
			}
			next := e.lease(tc.app, tc.cfg)
			if same := e.id(next) == first; same != tc.sameAgain {
				t.Fatalf("next lease got browser %d (first %d), want same=%v", e.id(next), first, tc.sameAgain)
			}
			if !tc.sameAgain && !closed(e.f.browser(first)) {
				t.Error("a browser not reused was not closed")
			}
			s := e.pool(tc.app)
			if s.Reused != tc.reused || s.SequenceFailures[SeqReset] != tc.failures || s.Returns != 1 {
				t.Errorf("counters %+v", s.Counters)
			}
		})
	}
}

// A browser is reused at most MaxReuses times, then closed.
func TestReuseLimit(t *testing.T) {
	e := newEnv(t, 4, 0)
	ok := func(context.Context, browser.Browser) error { return nil }
	l := e.lease("", nil)
	first := e.id(l)
	for range MaxReuses {
		l.Reuse(ok)
		e.settle()
		l = e.lease("", nil)
		if e.id(l) != first {
			t.Fatalf("browser %d leased before the limit, want %d", e.id(l), first)
		}
	}
	l.Reuse(ok)
	e.settle()
	if !closed(e.f.browser(first)) {
		t.Fatal("a browser past MaxReuses was not closed")
	}
	if s := e.pool(""); s.Reused != MaxReuses {
		t.Errorf("reused %d, want %d", s.Reused, MaxReuses)
	}
}
