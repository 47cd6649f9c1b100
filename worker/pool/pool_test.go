package pool

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/bundle"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/seqrun"
)

// One test per rule of the "Specific Browser Pool" document, then our
// refinements (no reuse without back sequence, waiting leases,
// statistics, Close).

// "The specific browser pool for a wrapper is created the first time the
// wrapper is executed. ... a number of browsers equal to min pool size are
// started and the Initialization Sequence is executed."
func TestPoolCreatedOnFirstUseWithMinBrowsers(t *testing.T) {
	e := newEnv(t, 10, 0)
	if n := len(e.m.Stats().Pools); n != 1 { // only the general pool
		t.Fatalf("%d pools before the first lease", n)
	}
	l := e.lease("app", cfg(3, 5))
	s := e.pool("app")
	if s.Size != 3 || s.Free != 2 || s.Locked != 1 || s.Created != 3 {
		t.Errorf("stats %+v", s.Gauges)
	}
	if n := e.r.count("init#"); n != 3 {
		t.Errorf("init ran %d times, want 3", n)
	}
	if got := l.Browser().Page().URL; got != searchURL {
		t.Errorf("leased browser shows %s, want the page init left it on", got)
	}
	if !l.Specific() {
		t.Error("lease not from the specific pool")
	}
}

// "If not all those browsers can be started because the browser limit has
// been reached ... a warning is logged."
func TestStartBelowMinAtGlobalLimitWarns(t *testing.T) {
	e := newEnv(t, 2, 0)
	e.lease("app", cfg(3, 5))
	if s := e.pool("app"); s.Size != 2 {
		t.Errorf("size %d, want 2 (the global limit)", s.Size)
	}
	var warned bool
	for _, line := range strings.Split(e.logs.String(), "\n") {
		if strings.Contains(line, `"level":"warn"`) && strings.Contains(line, "global maximum number of browsers has been reached") {
			warned = true
		}
	}
	if !warned {
		t.Errorf("no warning in logs:\n%s", e.logs)
	}
}

// "if there is any free/unlocked browser, then it is returned to the
// wrapper and it is marked as locked."
func TestLeaseLocksAFreeBrowser(t *testing.T) {
	e := newEnv(t, 10, 0)
	c := cfg(2, 2)
	a := e.lease("app", c)
	b := e.lease("app", c)
	if e.id(a) == e.id(b) {
		t.Fatal("two leases got the same browser")
	}
	if s := e.pool("app"); s.Locked != 2 || s.Free != 0 || s.Created != 2 || s.Leases != 2 {
		t.Errorf("stats %+v %+v", s.Gauges, s.Counters)
	}
}

// "If the specific pool contains the configured maximum number of browsers,
// then an error is thrown (maximum number of browsers in the specific pool
// has been reached)."
func TestPoolMaxError(t *testing.T) {
	e := newEnv(t, 10, 0)
	c := cfg(1, 2)
	e.lease("app", c)
	e.lease("app", c)
	_, err := e.m.Lease(context.Background(), "app", c)
	var le *LimitError
	if !errors.Is(err, ErrPoolMax) || !errors.As(err, &le) || le.Max != 2 || le.App != "app" {
		t.Fatalf("err %#v", err)
	}
	if err.Error() != "maximum number of browsers in the specific pool has been reached" {
		t.Errorf("message %q", err)
	}
	if n := e.pool("app").LeaseFailures[ReasonPoolMax]; n != 1 {
		t.Errorf("poolMax failures %d", n)
	}
}

// "If the sum of the number of browsers ... is below the global pool limit,
// then a new browser is created in the specific pool."
func TestLeaseCreatesBelowGlobalLimit(t *testing.T) {
	e := newEnv(t, 10, 0)
	c := cfg(1, 3)
	a := e.lease("app", c)
	b := e.lease("app", c)
	if e.id(a) == e.id(b) {
		t.Fatal("same browser")
	}
	if s := e.pool("app"); s.Size != 2 || s.Created != 2 {
		t.Errorf("stats %+v", s.Gauges)
	}
	if n := e.r.count("init#"); n != 2 {
		t.Errorf("init ran %d times", n)
	}
	if b.Browser().Page().URL != searchURL {
		t.Error("new browser not initialized")
	}
}

// "If the global limit to the number of browsers has been reached, an
// unlocked/free browser in the general pool is shifted to the
// wrapper-specific pool (the free browser from the global pool is destroyed
// and a new one is created in the specific pool)."
func TestGlobalLimitShiftsAFreeGeneralBrowser(t *testing.T) {
	e := newEnv(t, 3, 2)
	if g := e.pool(""); g.Free != 2 {
		t.Fatalf("general pool %+v", g.Gauges)
	}
	generalBrowsers := []browser.Browser{e.f.browser(1), e.f.browser(2)}
	c := cfg(1, 3)
	e.lease("app", c) // pool starts with 1: 3 browsers, the limit
	l := e.lease("app", c)
	g, s := e.pool(""), e.pool("app")
	if g.Size != 1 || g.ShiftedOut != 1 || s.Size != 2 || s.ShiftedIn != 1 {
		t.Errorf("general %+v %+v, app %+v %+v", g.Gauges, g.Counters, s.Gauges, s.Counters)
	}
	if n := closedCount(generalBrowsers); n != 1 {
		t.Errorf("%d general browsers destroyed, want 1", n)
	}
	if l.Browser().Page().URL != searchURL {
		t.Error("the shifted browser is not a new initialized one")
	}
	if st := e.m.Stats(); st.Types[0].Browsers != 3 || st.ShiftedIn != 1 {
		t.Errorf("manager %+v", st)
	}
}

func closedCount(bs []browser.Browser) int {
	n := 0
	for _, b := range bs {
		if closed(b) {
			n++
		}
	}
	return n
}

// GeneralMin browsers are kept ready for the next users: a lease from the
// general pool starts a replacement RefillDelay later (its browser never
// comes back), as far as the global limit allows; leased browsers do not
// count. Leases within the delay share one refill.
func TestGeneralPoolKeepsBrowsersReady(t *testing.T) {
	e := newEnv(t, 5, 2)
	e.lease("app", nil)
	e.lease("app", nil)
	if g := e.pool(""); g.Free != 0 || g.Size != 2 {
		t.Fatalf("before the refill: general pool %+v, want 0 free of 2", g.Gauges)
	}
	e.clock.Advance(RefillDelay)
	e.settle()
	if g := e.pool(""); g.Free != 2 || g.Size != 4 {
		t.Fatalf("after the refill: general pool %+v, want 2 free of 4", g.Gauges)
	}
	var leases []*Lease
	for i, want := range []struct{ free, size int }{{2, 5}, {1, 5}, {0, 5}} {
		leases = append(leases, e.lease("app", nil))
		e.clock.Advance(RefillDelay)
		e.settle()
		if g := e.pool(""); g.Free != want.free || g.Size != want.size {
			t.Fatalf("after lease %d: general pool %+v, want %d free of %d", i+1, g.Gauges, want.free, want.size)
		}
	}
	if g := e.pool(""); g.Leases != 5 || g.CreateFailures != 0 {
		t.Fatalf("general pool %+v", g.Counters)
	}
	// A user leaves: their browser is destroyed and the slot makes a ready one.
	e.ret(leases[0])
	if g := e.pool(""); g.Free != 1 || g.Size != 5 {
		t.Fatalf("after a return: general pool %+v, want 1 free of 5", g.Gauges)
	}
}

// "If no such unlocked/free browser can be found, an error is thrown
// (global maximum number of browsers has been reached)."
func TestGlobalMaxWithoutFreeGeneralBrowser(t *testing.T) {
	e := newEnv(t, 2, 0)
	e.lease("other", nil) // a general-pool browser, locked
	c := cfg(1, 5)
	e.lease("app", c)
	_, err := e.m.Lease(context.Background(), "app", c)
	if !errors.Is(err, ErrGlobalMax) || err.Error() != "global maximum number of browsers has been reached" {
		t.Fatalf("err %v", err)
	}
	if n := e.pool("app").LeaseFailures[ReasonGlobalMax]; n != 1 {
		t.Errorf("globalMax failures %d", n)
	}
}

// "Browsers created inside specific browser pools count toward the global
// browser limit ... the global browser pool could only contain other N-M
// browsers."
func TestSpecificBrowsersCountTowardGlobalLimit(t *testing.T) {
	e := newEnv(t, 3, 0)
	e.lease("app", cfg(2, 2)) // M = 2
	e.lease("other", nil)     // N-M = 1 general browser
	_, err := e.m.Lease(context.Background(), "other", nil)
	if !errors.Is(err, ErrGlobalMax) {
		t.Fatalf("err %v", err)
	}
	if n := e.pool("").LeaseFailures[ReasonGlobalMax]; n != 1 {
		t.Errorf("general globalMax failures %d", n)
	}
}

// "Once a wrapper is in a wrapper-specific pool, it never returns to the
// general pool": a general lease at the limit never takes (or shifts) a
// free browser of a specific pool.
func TestNoShiftingBackToGeneralPool(t *testing.T) {
	e := newEnv(t, 2, 0)
	l := e.lease("app", cfg(2, 2))
	e.ret(l)
	if s := e.pool("app"); s.Free != 2 {
		t.Fatalf("app pool %+v", s.Gauges)
	}
	_, err := e.m.Lease(context.Background(), "other", nil)
	if !errors.Is(err, ErrGlobalMax) {
		t.Fatalf("err %v", err)
	}
	if s := e.pool("app"); s.Free != 2 || s.Destroyed != 0 || s.ShiftedOut != 0 {
		t.Errorf("app pool lost a browser: %+v %+v", s.Gauges, s.Counters)
	}
}

// "Other wrappers should not use the browsers created to be used by this
// wrapper."
func TestPoolsAreExclusive(t *testing.T) {
	e := newEnv(t, 10, 0)
	e.ret(e.lease("a", cfg(1, 1)))
	b := e.lease("b", cfg(1, 1))
	g := e.lease("c", nil)
	if s := e.pool("a"); s.Free != 1 || s.Leases != 1 {
		t.Errorf("pool a %+v %+v", s.Gauges, s.Counters)
	}
	if e.id(b) == 1 || e.id(g) == 1 || g.Specific() {
		t.Errorf("a's browser leased by another app (b=%d c=%d)", e.id(b), e.id(g))
	}
	if g.Browser().Page().URL != "about:blank" {
		t.Errorf("general browser shows %s", g.Browser().Page().URL)
	}
}

// The limit is per browser type (MSIE / Denodo Browser in the document).
func TestGlobalLimitIsPerBrowserType(t *testing.T) {
	bundle.BrowserTypes = append(bundle.BrowserTypes, "other")
	defer func() { bundle.BrowserTypes = bundle.BrowserTypes[:len(bundle.BrowserTypes)-1] }()
	other := newFactory()
	e := newEnv(t, 1, 0, func(c *ManagerConfig) {
		c.Types["other"] = BrowserType{Factory: other, Max: 1}
	})
	e.lease("a", cfg(1, 2)) // chromium: full
	oc := cfg(1, 2)
	oc.BrowserType = "other"
	lb := e.lease("b", oc) // other type: its own limit
	if other.open() != 1 {
		t.Errorf("other type has %d browsers", other.open())
	}
	if _, err := e.m.Lease(context.Background(), "a", cfg(1, 2)); !errors.Is(err, ErrGlobalMax) {
		t.Errorf("chromium err %v", err)
	}
	if _, err := e.m.Lease(context.Background(), "b", oc); !errors.Is(err, ErrGlobalMax) {
		t.Errorf("other err %v", err)
	}
	e.m.Remove("b") // a leased browser is destroyed when it comes back
	e.settle()
	if other.open() != 1 {
		t.Error("leased browser destroyed at Remove")
	}
	e.ret(lb)
	if other.open() != 0 {
		t.Error("browser of a removed pool not destroyed on return")
	}
}

// "When the wrapper execution ends, ... situate the browser in the same
// page" (back sequence) and "the browser is marked as free/unlocked": the
// next lease gets it without the initialization sequence.
func TestReturnRunsBackSequenceAndUnlocks(t *testing.T) {
	e := newEnv(t, 10, 0)
	c := cfg(1, 1)
	l := e.lease("app", c)
	if err := l.Browser().Navigate(context.Background(), "http://app.test/results?q=x"); err != nil {
		t.Fatal(err)
	}
	e.ret(l)
	if s := e.pool("app"); s.Free != 1 || s.Locked != 0 {
		t.Errorf("after return %+v", s.Gauges)
	}
	l2 := e.lease("app", c)
	if e.id(l2) != e.id(l) || l2.Browser().Page().URL != searchURL {
		t.Errorf("got browser %d at %s", e.id(l2), l2.Browser().Page().URL)
	}
	if e.r.count("init#") != 1 || e.r.count("back#") != 1 {
		t.Errorf("runs %v", e.r.runs)
	}
	e.ret(l2)
	l2.Return() // a second return does nothing
	e.settle()
	if e.r.count("back#") != 2 {
		t.Errorf("runs %v", e.r.runs)
	}
}

// Without a back sequence a returned browser is destroyed (never
// reused by another user) and the pool refills to its minimum.
func TestNoBackSequenceDestroysAndRefills(t *testing.T) {
	e := newEnv(t, 10, 1)
	c := cfg(1, 2)
	c.Back = nil
	l := e.lease("app", c)
	first := l.Browser()
	e.ret(l)
	if !closed(first) {
		t.Error("returned browser not destroyed")
	}
	s := e.pool("app")
	if s.Size != 1 || s.Free != 1 || s.Created != 2 || s.Destroyed != 1 {
		t.Errorf("app pool %+v %+v", s.Gauges, s.Counters)
	}
	if l2 := e.lease("app", c); l2.Browser() == first {
		t.Error("browser reused")
	}
	// The general pool works the same way.
	g := e.lease("other", nil)
	gb := g.Browser()
	e.ret(g)
	if gs := e.pool(""); !closed(gb) || gs.Free != 1 || gs.Destroyed != 1 {
		t.Errorf("general %+v %+v", gs.Gauges, gs.Counters)
	}
}

// "Browser TTL ... When the pool returns a browser ... running more than
// the specified TTL ... destroyed and a new one is created to substitute
// it, with the same page loaded (the session cookies are transferred).
// A value of 0 ... disabled."
func TestBrowserTTL(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ttl      time.Duration
		age      time.Duration
		replaced bool
	}{
		{"older than ttl", time.Hour, 2 * time.Hour, true},
		{"younger than ttl", 3 * time.Hour, 2 * time.Hour, false},
		{"ttl 0 disables", 0, 1000 * time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 10, 0)
			c := cfg(1, 1)
			c.TTL = Duration(tc.ttl)
			l := e.lease("app", c)
			old := l.Browser()
			ctx := context.Background()
			// The user's work adds a cookie; back returns to the search page.
			if err := old.SetCookies(ctx, []browser.Cookie{{Name: "pref", Value: "x", Domain: "app.test", Path: "/"}}); err != nil {
				t.Fatal(err)
			}
			e.clock.Advance(tc.age)
			e.ret(l)
			l2 := e.lease("app", c)
			nb := l2.Browser()
			if replaced := nb != old; replaced != tc.replaced {
				t.Fatalf("replaced %v, want %v", replaced, tc.replaced)
			}
			if !tc.replaced {
				return
			}
			if !closed(old) {
				t.Error("old browser not destroyed")
			}
			if nb.Page().URL != searchURL {
				t.Errorf("new browser shows %s", nb.Page().URL)
			}
			oldCookies, _ := old.Cookies(ctx)
			_ = oldCookies // closed: read from the new one instead
			got, _ := nb.Cookies(ctx)
			want := map[string]string{"sid": "1", "pref": "x"}
			if len(got) != len(want) {
				t.Fatalf("cookies %+v", got)
			}
			for _, ck := range got {
				if want[ck.Name] != ck.Value {
					t.Errorf("cookie %s=%s", ck.Name, ck.Value)
				}
			}
			if e.r.count("init#") != 1 {
				t.Error("the replacement ran the initialization sequence")
			}
			if s := e.pool("app"); s.Recycled != 1 || s.Size != 1 {
				t.Errorf("stats %+v %+v", s.Gauges, s.Counters)
			}
			// The replacement's age starts over.
			e.clock.Advance(30 * time.Minute)
			e.ret(l2)
			if l3 := e.lease("app", c); l3.Browser() != nb {
				t.Error("young replacement replaced again")
			}
		})
	}
}

// TTL replacement failing keeps the old browser.
func TestBrowserTTLReplacementFailureKeepsBrowser(t *testing.T) {
	e := newEnv(t, 10, 0)
	c := cfg(1, 1)
	c.TTL = Duration(time.Minute)
	l := e.lease("app", c)
	e.clock.Advance(time.Hour)
	e.f.fails = 1
	e.ret(l)
	if s := e.pool("app"); s.Free != 1 || closed(l.Browser()) {
		t.Errorf("browser lost: %+v", s.Gauges)
	}
	if n := e.pool("app").SequenceFailures[SeqTTL]; n != 1 {
		t.Errorf("ttl failures %d", n)
	}
	// Still past its TTL when handed out: a new one is made.
	if l2 := e.lease("app", c); l2.Browser() == l.Browser() || !closed(l.Browser()) {
		t.Error("the browser past its TTL was leased")
	}
}

// "Max idle time to refresh ... Refresh Validation Interval ... Touch
// Session Sequence ... A value of 0 for ... Max idle time to refresh or
// Refresh Validation interval indicates that this functionality is
// disabled."
func TestIdleRefresh(t *testing.T) {
	for _, tc := range []struct {
		name              string
		maxIdle, interval time.Duration
		on                bool
	}{
		{"enabled", 10 * time.Minute, time.Minute, true},
		{"max idle 0 disables", 0, time.Minute, false},
		{"interval 0 disables", 10 * time.Minute, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 10, 0)
			c := cfg(2, 2)
			c.MaxIdleToRefresh, c.RefreshValidationInterval, c.TouchSession = Duration(tc.maxIdle), Duration(tc.interval), seqTouch
			locked := e.lease("app", c) // one browser leased, one free
			e.clock.Advance(9 * time.Minute)
			if n := e.r.count("touch#"); n != 0 {
				t.Fatalf("touched %d times before max idle", n)
			}
			e.clock.Advance(time.Minute)
			want := 0
			if tc.on {
				want = 1
			}
			if n := e.r.count("touch#"); n != want {
				t.Fatalf("touched %d times at max idle, want %d (%v)", n, want, e.r.runs)
			}
			if tc.on && e.r.count("touch#"+strconv.Itoa(e.id(locked))) != 0 {
				t.Error("a leased browser was touched")
			}
			// Touching is activity: the next touch comes MaxIdleToRefresh later.
			e.clock.Advance(9 * time.Minute)
			if n := e.r.count("touch#"); n != want {
				t.Fatalf("touched %d times, want %d", n, want)
			}
			e.clock.Advance(time.Minute)
			if tc.on && (e.r.count("touch#") != 2 || e.pool("app").Touches != 2) {
				t.Fatalf("touched %d times, want 2 (stats %d)", e.r.count("touch#"), e.pool("app").Touches)
			}
			if s := e.pool("app"); s.Size != 2 || s.Free != 1 {
				t.Errorf("stats %+v", s.Gauges)
			}
		})
	}
}

// "Max idle time to destroy ... the browser is destroyed and removed from
// the pool (no other browser is created to substitute it at that moment).
// ... A value of 0 for any of the two parameters indicates that this
// functionality is disabled."
func TestIdleDestroy(t *testing.T) {
	for _, tc := range []struct {
		name              string
		maxIdle, interval time.Duration
		on                bool
	}{
		{"enabled", 10 * time.Minute, time.Minute, true},
		{"max idle 0 disables", 0, time.Minute, false},
		{"interval 0 disables", 10 * time.Minute, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 10, 0)
			c := cfg(2, 3)
			c.MaxIdleToDestroy, c.DestroyValidationInterval = Duration(tc.maxIdle), Duration(tc.interval)
			// Touching every 3 minutes is not use: it does not keep
			// browsers from being destroyed.
			c.MaxIdleToRefresh, c.RefreshValidationInterval, c.TouchSession = Duration(3*time.Minute), Duration(time.Minute), seqTouch
			l := e.lease("app", c)
			e.ret(l)
			e.clock.Advance(9 * time.Minute)
			if s := e.pool("app"); s.Size != 2 {
				t.Fatalf("size %d before max idle", s.Size)
			}
			e.clock.Advance(time.Minute)
			s := e.pool("app")
			want := 2
			if tc.on {
				want = 0 // below minSize: no replacement
			}
			if s.Size != want {
				t.Fatalf("size %d, want %d", s.Size, want)
			}
			if e.r.count("touch#") == 0 {
				t.Error("no touch happened")
			}
			e.clock.Advance(time.Hour)
			if s := e.pool("app"); s.Size != want || s.Created != 2 {
				t.Errorf("pool refilled: %+v %+v", s.Gauges, s.Counters)
			}
			if tc.on {
				// The next batch: the first lease creates a browser again.
				l := e.lease("app", c)
				if l.Browser().Page().URL != searchURL || e.pool("app").Created != 3 {
					t.Error("no new initialized browser")
				}
			}
		})
	}
}

// "If the Touch Session Sequence fails, then the Initialization Sequence
// is executed. If this sequence also fails, then the browser is destroyed
// and removed from the pool."
func TestTouchFailureChain(t *testing.T) {
	for _, tc := range []struct {
		name      string
		initFails bool
	}{
		{"touch fails, init recovers", false},
		{"touch and init fail: destroyed", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 10, 0)
			c := cfg(1, 1)
			c.MaxIdleToRefresh, c.RefreshValidationInterval, c.TouchSession = Duration(time.Minute), Duration(time.Minute), seqTouch
			e.ret(e.lease("app", c))
			e.r.setFails("touch", 1)
			if tc.initFails {
				e.r.setFails("init", 1)
			}
			e.clock.Advance(time.Minute)
			s := e.pool("app")
			if e.r.count("touch#") != 1 || e.r.count("init#") != 2 {
				t.Fatalf("runs %v", e.r.runs)
			}
			if s.SequenceFailures[SeqTouch] != 1 {
				t.Errorf("touch failures %v", s.SequenceFailures)
			}
			if tc.initFails {
				if s.Size != 0 || s.Destroyed != 1 || s.SequenceFailures[SeqInit] != 1 || !closed(e.f.browser(1)) {
					t.Errorf("not destroyed: %+v %+v", s.Gauges, s.Counters)
				}
			} else if s.Free != 1 || s.Destroyed != 0 {
				t.Errorf("not kept: %+v %+v", s.Gauges, s.Counters)
			}
		})
	}
}

// "If the Back Sequence fails, then the Initialization Sequence is
// executed. If this sequence also fails, then the browser is destroyed
// and removed from the pool."
func TestBackFailureChain(t *testing.T) {
	for _, tc := range []struct {
		name      string
		initFails bool
	}{
		{"back fails, init recovers", false},
		{"back and init fail: destroyed", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 10, 0)
			c := cfg(1, 1)
			l := e.lease("app", c)
			_ = l.Browser().Navigate(context.Background(), "http://app.test/elsewhere")
			e.r.setFails("back", 1)
			if tc.initFails {
				e.r.setFails("init", 1)
			}
			e.ret(l)
			s := e.pool("app")
			if e.r.count("back#") != 1 || e.r.count("init#") != 2 || s.SequenceFailures[SeqBack] != 1 {
				t.Fatalf("runs %v, failures %v", e.r.runs, s.SequenceFailures)
			}
			if tc.initFails {
				if s.Size != 0 || s.Destroyed != 1 || !closed(l.Browser()) {
					t.Errorf("not destroyed: %+v %+v", s.Gauges, s.Counters)
				}
				return
			}
			if s.Free != 1 {
				t.Errorf("not kept: %+v", s.Gauges)
			}
			if l2 := e.lease("app", c); l2.Browser() != l.Browser() || l2.Browser().Page().URL != searchURL {
				t.Error("recovered browser not reused on the init page")
			}
		})
	}
}

// "If the Initialization Sequence fails when the browser is created, then
// the browser is destroyed and removed from the pool."
func TestInitFailureAtCreationDestroys(t *testing.T) {
	e := newEnv(t, 10, 0)
	e.r.setFails("init", -1)
	c := cfg(2, 3)
	_, err := e.m.Lease(context.Background(), "app", c)
	var se *seqrun.StepError
	if err == nil || !strings.Contains(err.Error(), "initialization sequence") || !errors.As(err, &se) {
		t.Fatalf("err %v", err)
	}
	e.settle()
	s := e.pool("app")
	if s.Size != 0 || s.Created != 2 || s.Destroyed != 2 || s.SequenceFailures[SeqInit] != 2 || s.LeaseFailures[ReasonInitFailed] != 1 {
		t.Errorf("stats %+v %+v", s.Gauges, s.Counters)
	}
	if e.f.open() != 0 {
		t.Errorf("%d browsers open", e.f.open())
	}
	// Later leases try again with a new browser.
	e.r.setFails("init", 0)
	if l := e.lease("app", c); l.Browser().Page().URL != searchURL {
		t.Error("no recovery")
	}
}

func TestCreateFailure(t *testing.T) {
	e := newEnv(t, 10, 0)
	e.f.fails = 1
	_, err := e.m.Lease(context.Background(), "other", nil)
	if err == nil || !strings.Contains(err.Error(), "no more browsers") {
		t.Fatalf("err %v", err)
	}
	e.settle()
	g := e.pool("")
	if g.Size != 0 || g.CreateFailures != 1 || g.LeaseFailures[ReasonCreateFailed] != 1 {
		t.Errorf("stats %+v %+v", g.Gauges, g.Counters)
	}
	if st := e.m.Stats(); st.Types[0].Browsers != 0 {
		t.Errorf("slot not released: %+v", st.Types)
	}
}

// A lease that finds no free browser but one being prepared (created by the
// pool, or running its back sequence) waits for it instead of failing at
// the maximum; its wait counts in the statistics.
func TestLeaseWaitsForABrowserBeingPrepared(t *testing.T) {
	e := newEnv(t, 10, 0)
	c := cfg(1, 1)
	l := e.lease("app", c)
	open := e.r.gate("back")
	l.Return() // back sequence blocked: browser busy
	got := make(chan *Lease, 1)
	go func() {
		l, err := e.m.Lease(context.Background(), "app", c)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	testutil.Eventually(t, 10*time.Second, testutil.Cond("a waiting lease", func() bool { return e.pool("app").Waiting == 1 }))
	e.clock.OnFire(nil) // settling would wait for the blocked back sequence
	e.clock.Advance(2 * time.Second)
	e.clock.OnFire(e.settle)
	open()
	l2 := <-got
	e.settle()
	if l2.Browser() != l.Browser() {
		t.Error("got another browser")
	}
	s := e.pool("app")
	if s.AvgLeaseWaitMs != 1000 { // (0 + 2000) / 2
		t.Errorf("avg lease wait %v ms", s.AvgLeaseWaitMs)
	}
	// A waiting lease whose context ends gives up; the browser stays.
	open = e.r.gate("back")
	defer open()
	l2.Return()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := e.m.Lease(ctx, "app", c); errc <- err }()
	testutil.Eventually(t, 10*time.Second, testutil.Cond("a waiting lease", func() bool { return e.pool("app").Waiting == 1 }))
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("err %v", err)
	}
	open()
	e.settle()
	if s := e.pool("app"); s.Free != 1 || s.Waiting != 0 || s.LeaseFailures[ReasonCanceled] != 1 {
		t.Errorf("stats %+v %+v", s.Gauges, s.Counters)
	}
}

func TestCrashedFreeBrowserIsDropped(t *testing.T) {
	e := newEnv(t, 10, 0)
	c := cfg(2, 2)
	l := e.lease("app", c)
	e.clock.Advance(time.Second)
	e.ret(l)
	// Crash the browser a lease would pick (the most recently used).
	crashed := e.id(l)
	_ = l.Browser().Close(context.Background())
	l = e.lease("app", c)
	if e.id(l) == crashed || closed(l.Browser()) {
		t.Errorf("leased the crashed browser %d", crashed)
	}
	if s := e.pool("app"); s.Size != 1 || s.Destroyed != 1 {
		t.Errorf("stats %+v %+v", s.Gauges, s.Counters)
	}
}

func TestConfigChangeReplacesPool(t *testing.T) {
	e := newEnv(t, 10, 0)
	c1 := cfg(2, 2)
	held := e.lease("app", c1)
	c2 := cfg(1, 2)
	c2.TTL = Duration(time.Hour)
	l := e.lease("app", c2)
	if l.Browser() == held.Browser() || closed(held.Browser()) {
		t.Fatal("old pool's browsers misused")
	}
	// The old pool made browsers 1 and 2 at once: either may be the held one.
	free := e.f.browser(1)
	if free == held.Browser() {
		free = e.f.browser(2)
	}
	if !closed(free) {
		t.Error("old pool's free browser not destroyed")
	}
	e.ret(held)
	if !closed(held.Browser()) {
		t.Error("old pool's leased browser not destroyed on return")
	}
	if s := e.pool("app"); s.MinSize != 1 || s.Size != 1 {
		t.Errorf("new pool %+v", s)
	}
	if st := e.m.Stats(); st.Types[0].Browsers != 1 || st.Size != 1 {
		t.Errorf("manager %+v", st.Gauges)
	}
	// Without a pool configuration the app gets general-pool browsers (the
	// document: extra browsers of an execution come from there); its
	// specific pool stays until Remove.
	off := *c2
	off.Enabled = false
	if g := e.lease("app", &off); g.Specific() {
		t.Error("disabled pool still used")
	}
	e.m.Remove("app")
	e.settle()
	for _, p := range e.m.Stats().Pools {
		if p.App == "app" {
			t.Error("pool not removed")
		}
	}
	if closed(l.Browser()) {
		t.Error("leased browser of a removed pool closed before its return")
	}
	e.ret(l)
	if !closed(l.Browser()) {
		t.Error("browser of a removed pool not destroyed on return")
	}
}

// Many leases and returns at once, with failing sequences and creations:
// the race detector watches, and the books must balance at the end.
func TestConcurrentLeases(t *testing.T) {
	e := newEnv(t, 5, 1)
	e.clock.OnFire(nil)
	c := cfg(1, 3)
	c.TTL = Duration(time.Second)
	nb := cfg(0, 2)
	nb.Back = nil
	e.r.setFails("back", 7)
	done := make(chan struct{})
	for g := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 40 {
				app, pc := "a", c
				switch (g + i) % 3 {
				case 1:
					app, pc = "b", nb
				case 2:
					app, pc = "x", nil
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i%4)*time.Millisecond+time.Millisecond)
				l, err := e.m.Lease(ctx, app, pc)
				cancel()
				if err != nil {
					continue
				}
				if i%5 == 0 {
					e.clock.Advance(300 * time.Millisecond)
				}
				l.Return()
			}
		}()
	}
	for range 8 {
		<-done
	}
	e.settle()
	st := e.m.Stats()
	if st.Types[0].Browsers != st.Size || st.Size > 5 || st.Locked != 0 || st.Busy != 0 || st.Waiting != 0 {
		t.Errorf("books do not balance: %+v %+v", st.Types, st.Gauges)
	}
	if int(st.Created-st.Destroyed) != st.Size || e.f.open() != st.Size {
		t.Errorf("created %d destroyed %d size %d open %d", st.Created, st.Destroyed, st.Size, e.f.open())
	}
	if st.Leases == 0 || st.Returns != st.Leases {
		t.Errorf("leases %d returns %d", st.Leases, st.Returns)
	}
	t.Logf("leases %d, failures %v, sequence failures %v, recycled %d", st.Leases, st.LeaseFailures, st.SequenceFailures, st.Recycled)
}

func TestCloseDestroysEverything(t *testing.T) {
	e := newEnv(t, 10, 1)
	c := cfg(2, 3)
	c.MaxIdleToRefresh, c.RefreshValidationInterval, c.TouchSession = Duration(time.Minute), Duration(time.Minute), seqTouch
	c.MaxIdleToDestroy, c.DestroyValidationInterval = Duration(time.Hour), Duration(time.Minute)
	held := e.lease("app", c)
	open := e.r.gate("init")
	defer open()
	e.lease("app", c) // the second free one
	errc := make(chan error, 1)
	go func() { _, err := e.m.Lease(context.Background(), "app", c); errc <- err }() // waits on a creation
	testutil.Eventually(t, 10*time.Second, testutil.Cond("a waiting lease", func() bool { return e.pool("app").Waiting == 1 }))
	if e.clock.Active() != 2 {
		t.Errorf("%d timers", e.clock.Active())
	}
	if err := e.m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Errorf("waiting lease: %v", err)
	}
	if !closed(held.Browser()) {
		t.Error("leased browser still open")
	}
	held.Return() // no-op
	if _, err := e.m.Lease(context.Background(), "app", c); !errors.Is(err, ErrClosed) {
		t.Errorf("lease after close: %v", err)
	}
	// Cleanup checks that no browser and no timer is left.
}

func TestStatsJSON(t *testing.T) {
	e := newEnv(t, 4, 1)
	e.lease("app", cfg(1, 1))
	_, _ = e.m.Lease(context.Background(), "app", cfg(1, 1))
	raw, err := json.Marshal(e.m.Stats())
	if err != nil {
		t.Fatal(err)
	}
	var st map[string]any
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"size", "free", "locked", "busy", "created", "destroyed", "shiftedIn", "shiftedOut",
		"leases", "leaseFailures", "sequenceFailures", "avgLeaseWaitMs", "types", "pools"} {
		if _, ok := st[k]; !ok {
			t.Errorf("no %q in %s", k, raw)
		}
	}
	if !strings.Contains(string(raw), `"leaseFailures":{"poolMax":1}`) {
		t.Errorf("failures missing: %s", raw)
	}
	pools := st["pools"].([]any)
	if len(pools) != 2 || pools[0].(map[string]any)["general"] != true || pools[1].(map[string]any)["app"] != "app" {
		t.Errorf("pools %v", pools)
	}
}

func TestManagerConfigErrors(t *testing.T) {
	f := newFactory()
	r := &fakeRunner{f: f}
	for _, tc := range []struct {
		name string
		cfg  ManagerConfig
	}{
		{"no types", ManagerConfig{Runner: r}},
		{"no runner", ManagerConfig{Types: map[string]BrowserType{"chromium": {Factory: f, Max: 1}}}},
		{"no factory", ManagerConfig{Runner: r, Types: map[string]BrowserType{"chromium": {Max: 1}}}},
		{"max 0", ManagerConfig{Runner: r, Types: map[string]BrowserType{"chromium": {Factory: f}}}},
		{"general min > max", ManagerConfig{Runner: r, Types: map[string]BrowserType{"chromium": {Factory: f, Max: 1, GeneralMin: 2}}}},
		{"unknown default", ManagerConfig{Runner: r, DefaultType: "x", Types: map[string]BrowserType{"chromium": {Factory: f, Max: 1}}}},
	} {
		if m, err := NewManager(tc.cfg); err == nil {
			m.Close(context.Background())
			t.Errorf("%s: no error", tc.name)
		}
	}
}

func TestInvalidConfigRejectedAtLease(t *testing.T) {
	e := newEnv(t, 4, 0)
	bad := cfg(3, 1)
	if _, err := e.m.Lease(context.Background(), "app", bad); err == nil || !strings.Contains(err.Error(), "pool.minSize") {
		t.Errorf("err %v", err)
	}
}
