package proxy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock/clocktest"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/urlkind"
)

const ttl = 10 * time.Second

func newTestCache(up Router) (*CachingRouter, *clocktest.Clock) {
	clk := clocktest.New(time.Unix(1_700_000_000, 0))
	return NewCachingRouter(up, ttl, WithClock(clk), WithStaleFor(time.Minute)), clk
}

func instTarget(k urlkind.Kind, iid string) urlkind.Target {
	return urlkind.Target{Kind: k, App: "chat", InstanceID: iid, BrowserID: testBrowser}
}

var (
	w1 = Route{WorkerID: "w-one", Addr: "10.0.0.1:8001"}
	w2 = Route{WorkerID: "w-two", Addr: "10.0.0.2:8001"}
)

func mustRoute(t *testing.T, c *CachingRouter, tg urlkind.Target, want Route) {
	t.Helper()
	got, err := c.Route(context.Background(), tg)
	if err != nil || got != want {
		t.Fatalf("Route(%+v) = %+v, %v; want %+v", tg, got, err, want)
	}
}

func TestCachingRouterHitsAndExpiry(t *testing.T) {
	up := &fakeRouter{route: w1}
	c, clk := newTestCache(up)
	iid := "w-one.aaaa"

	// Every instance-keyed kind shares the instance's entry.
	for _, k := range []urlkind.Kind{urlkind.KindInstance, urlkind.KindBrowser, urlkind.KindResource, urlkind.KindWebSocket} {
		mustRoute(t, c, instTarget(k, iid), w1)
	}
	if n := up.calls.Load(); n != 1 {
		t.Fatalf("upstream calls = %d, want 1", n)
	}
	if s := c.Stats(); s.Hits != 3 || s.Misses != 1 || s.Entries != 1 {
		t.Fatalf("stats = %+v", s)
	}

	clk.Advance(ttl - time.Nanosecond)
	mustRoute(t, c, instTarget(urlkind.KindResource, iid), w1)
	if n := up.calls.Load(); n != 1 {
		t.Fatalf("entry expired early: upstream calls = %d", n)
	}
	clk.Advance(time.Nanosecond)
	up.set(w2, nil) // the instance moved; the refreshed answer must be used
	mustRoute(t, c, instTarget(urlkind.KindResource, iid), w2)
	if n := up.calls.Load(); n != 2 {
		t.Fatalf("after ttl: upstream calls = %d, want 2", n)
	}
}

func TestCachingRouterInvalidate(t *testing.T) {
	up := &fakeRouter{}
	up.fn = func(_ context.Context, t urlkind.Target) (Route, error) {
		if t.InstanceID[:5] == "w-one" {
			return w1, nil
		}
		return w2, nil
	}
	c, _ := newTestCache(up)
	a, b, d := "w-one.aaaa", "w-one.bbbb", "w-two.cccc"
	for _, iid := range []string{a, b, d} {
		c.Route(context.Background(), instTarget(urlkind.KindInstance, iid))
	}
	if up.calls.Load() != 3 {
		t.Fatal("setup: expected 3 lookups")
	}

	c.Invalidate(a)
	mustRoute(t, c, instTarget(urlkind.KindInstance, a), w1)
	mustRoute(t, c, instTarget(urlkind.KindInstance, b), w1)
	if n := up.calls.Load(); n != 4 {
		t.Fatalf("after Invalidate(a): upstream calls = %d, want 4", n)
	}

	c.InvalidateWorker("w-one")
	if s := c.Stats(); s.Entries != 1 || s.Workers != 1 {
		t.Fatalf("after InvalidateWorker: %+v, want only w-two's entry", s)
	}
	mustRoute(t, c, instTarget(urlkind.KindInstance, d), w2) // untouched
	mustRoute(t, c, instTarget(urlkind.KindInstance, b), w1)
	if n := up.calls.Load(); n != 5 {
		t.Fatalf("after InvalidateWorker: upstream calls = %d, want 5", n)
	}
}

func TestCachingRouterInvalidateAll(t *testing.T) {
	up := &fakeRouter{route: w1}
	c, _ := newTestCache(up)
	for _, iid := range []string{"w-one.aaaa", "w-one.bbbb"} {
		mustRoute(t, c, instTarget(urlkind.KindInstance, iid), w1)
	}
	c.InvalidateAll()
	if s := c.Stats(); s.Entries != 0 || s.Workers != 1 {
		t.Fatalf("after InvalidateAll: %+v; want no routes but the worker address kept for fallback", s)
	}
	up.set(w2, nil)
	mustRoute(t, c, instTarget(urlkind.KindInstance, "w-one.aaaa"), w2)
	if n := up.calls.Load(); n != 3 {
		t.Fatalf("upstream calls = %d, want 3", n)
	}
}

func TestCachingRouterNeverCachesApps(t *testing.T) {
	up := &fakeRouter{route: w1}
	c, _ := newTestCache(up)
	for i := 0; i < 3; i++ {
		mustRoute(t, c, urlkind.Target{Kind: urlkind.KindApp, App: "chat"}, w1)
	}
	if n := up.calls.Load(); n != 3 {
		t.Fatalf("app lookups = %d, want 3 (every Application URL is balanced)", n)
	}
	if s := c.Stats(); s.Entries != 0 || s.Workers != 1 || s.Hits != 0 {
		t.Fatalf("stats = %+v, want no entries but a learned worker", s)
	}
}

func TestCachingRouterErrorsNotCached(t *testing.T) {
	up := &fakeRouter{err: fmt.Errorf("master says: %w", ErrUnknownInstance)}
	c, _ := newTestCache(up)
	for i := 0; i < 2; i++ {
		if _, err := c.Route(context.Background(), instTarget(urlkind.KindInstance, "w-one.x")); !errors.Is(err, ErrUnknownInstance) {
			t.Fatalf("err = %v, want ErrUnknownInstance", err)
		}
	}
	if n := up.calls.Load(); n != 2 {
		t.Fatalf("upstream calls = %d, want 2 (no negative caching)", n)
	}
}

func TestCachingRouterFallback(t *testing.T) {
	down := fmt.Errorf("rmi: dial master: %w", ErrMasterUnavailable)
	tests := []struct {
		name       string
		prepare    func(c *CachingRouter, up *fakeRouter, clk *clocktest.Clock)
		iid        string
		want       Route
		wantErr    error
		wantFallbk uint64
	}{
		{
			name: "stale entry while master down",
			prepare: func(c *CachingRouter, up *fakeRouter, clk *clocktest.Clock) {
				up.set(w2, nil) // moved instance: id says w-one but it lives on w-two
				c.Route(context.Background(), instTarget(urlkind.KindInstance, "w-one.moved"))
				clk.Advance(ttl)
			},
			iid: "w-one.moved", want: w2, wantFallbk: 1,
		},
		{
			name: "decoded worker learned from an app route",
			prepare: func(c *CachingRouter, up *fakeRouter, clk *clocktest.Clock) {
				up.set(w1, nil)
				c.Route(context.Background(), urlkind.Target{Kind: urlkind.KindApp, App: "chat"})
			},
			iid: "w-one.neverseen", want: w1, wantFallbk: 1,
		},
		{
			name: "decoded worker after stale window",
			prepare: func(c *CachingRouter, up *fakeRouter, clk *clocktest.Clock) {
				up.set(w1, nil)
				c.Route(context.Background(), instTarget(urlkind.KindInstance, "w-one.old"))
				clk.Advance(time.Hour)
			},
			iid: "w-one.old", want: w1, wantFallbk: 1,
		},
		{
			name:    "unknown worker",
			prepare: func(c *CachingRouter, up *fakeRouter, clk *clocktest.Clock) {},
			iid:     "w-one.x", wantErr: ErrMasterUnavailable,
		},
		{
			name: "id without worker",
			prepare: func(c *CachingRouter, up *fakeRouter, clk *clocktest.Clock) {
				up.set(w1, nil)
				c.Route(context.Background(), urlkind.Target{Kind: urlkind.KindApp, App: "chat"})
			},
			iid: "nodot", wantErr: ErrMasterUnavailable,
		},
		{
			name: "no fallback after InvalidateWorker",
			prepare: func(c *CachingRouter, up *fakeRouter, clk *clocktest.Clock) {
				up.set(w1, nil)
				c.Route(context.Background(), instTarget(urlkind.KindInstance, "w-one.a"))
				c.InvalidateWorker("w-one")
			},
			iid: "w-one.a", wantErr: ErrMasterUnavailable,
		},
		{
			name: "no fallback for other errors",
			prepare: func(c *CachingRouter, up *fakeRouter, clk *clocktest.Clock) {
				up.set(w1, nil)
				c.Route(context.Background(), instTarget(urlkind.KindInstance, "w-one.a"))
				clk.Advance(ttl)
				up.set(Route{}, ErrUnknownInstance) // master is up and says it is gone
			},
			iid: "w-one.a", wantErr: ErrUnknownInstance,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			up := &fakeRouter{}
			c, clk := newTestCache(up)
			tc.prepare(c, up, clk)
			if tc.wantErr != ErrUnknownInstance {
				up.set(Route{}, down)
			}
			got, err := c.Route(context.Background(), instTarget(urlkind.KindBrowser, tc.iid))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
			} else if err != nil || got != tc.want {
				t.Fatalf("Route = %+v, %v; want %+v", got, err, tc.want)
			}
			if f := c.Stats().Fallbacks; f != tc.wantFallbk {
				t.Fatalf("fallbacks = %d, want %d", f, tc.wantFallbk)
			}
		})
	}
}

// App URLs have no fallback: a new instance needs the balancer.
func TestCachingRouterAppDuringOutage(t *testing.T) {
	up := &fakeRouter{route: w1}
	c, _ := newTestCache(up)
	c.Route(context.Background(), urlkind.Target{Kind: urlkind.KindApp, App: "chat"})
	up.set(Route{}, ErrMasterUnavailable)
	if _, err := c.Route(context.Background(), urlkind.Target{Kind: urlkind.KindApp, App: "chat"}); !errors.Is(err, ErrMasterUnavailable) {
		t.Fatalf("err = %v", err)
	}
}

func TestCachingRouterLookupTimeoutFallsBack(t *testing.T) {
	const timeout = 5 * time.Second
	up := &fakeRouter{route: w1}
	clk := clocktest.New(time.Unix(0, 0))
	c := NewCachingRouter(up, ttl, WithClock(clk), WithLookupTimeout(timeout))
	c.Route(context.Background(), urlkind.Target{Kind: urlkind.KindApp, App: "chat"}) // learn w-one
	up.mu.Lock()
	up.fn = func(ctx context.Context, t urlkind.Target) (Route, error) { <-ctx.Done(); return Route{}, ctx.Err() } // hung master
	up.mu.Unlock()
	type result struct {
		r   Route
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := c.Route(context.Background(), instTarget(urlkind.KindInstance, "w-one.z"))
		done <- result{r, err}
	}()
	testutil.Eventually(t, 10*time.Second, testutil.Cond("the lookup's timeout armed", func() bool { return clk.Active() == 1 }))
	clk.Advance(timeout - time.Nanosecond)
	select {
	case res := <-done:
		t.Fatalf("the lookup ended before its timeout: %+v", res)
	default:
	}
	clk.Advance(time.Nanosecond)
	if res := <-done; res.err != nil || res.r != w1 {
		t.Fatalf("Route = %+v, %v; want fallback to %+v", res.r, res.err, w1)
	}
}

func TestCachingRouterCoalesces(t *testing.T) {
	const n = 8
	release := make(chan struct{})
	var sawCanceled atomic.Bool
	up := &fakeRouter{}
	up.fn = func(ctx context.Context, t urlkind.Target) (Route, error) {
		<-release
		sawCanceled.Store(ctx.Err() != nil)
		return w1, nil
	}
	c, _ := newTestCache(up)
	var joined sync.WaitGroup
	joined.Add(n + 1)
	c.testHookJoined = joined.Done

	// One impatient caller gives up; that must not fail the shared lookup.
	ctx, cancel := context.WithCancel(context.Background())
	impatient := make(chan error, 1)
	go func() {
		_, err := c.Route(ctx, instTarget(urlkind.KindWebSocket, "w-one.q"))
		impatient <- err
	}()

	results := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			r, err := c.Route(context.Background(), instTarget(urlkind.KindResource, "w-one.q"))
			if err == nil && r != w1 {
				err = fmt.Errorf("route %+v", r)
			}
			results <- err
		}()
	}
	joined.Wait()
	cancel()
	if err := <-impatient; !errors.Is(err, context.Canceled) {
		t.Fatalf("impatient caller: %v", err)
	}
	close(release)
	for i := 0; i < n; i++ {
		if err := <-results; err != nil {
			t.Fatal(err)
		}
	}
	if got := up.calls.Load(); got != 1 {
		t.Fatalf("upstream calls = %d, want 1", got)
	}
	if sawCanceled.Load() {
		t.Fatal("shared lookup saw the impatient caller's cancellation")
	}
}

// An Invalidate that lands while a lookup is in flight wins: the lookup's
// (possibly stale) answer is not cached.
func TestCachingRouterInvalidateDuringLookup(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	up := &fakeRouter{}
	up.fn = func(ctx context.Context, t urlkind.Target) (Route, error) {
		if up.calls.Load() == 1 {
			close(started)
			<-release
		}
		return w1, nil
	}
	c, _ := newTestCache(up)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Route(context.Background(), instTarget(urlkind.KindInstance, "w-one.r"))
	}()
	<-started
	c.Invalidate("w-one.r")
	close(release)
	<-done
	mustRoute(t, c, instTarget(urlkind.KindInstance, "w-one.r"), w1)
	if n := up.calls.Load(); n != 2 {
		t.Fatalf("upstream calls = %d, want 2", n)
	}
}

func TestCachingRouterSweep(t *testing.T) {
	up := &fakeRouter{route: w1}
	c, clk := newTestCache(up)
	for i := 0; i < 1000; i++ {
		c.Route(context.Background(), instTarget(urlkind.KindInstance, fmt.Sprintf("w-one.%d", i)))
	}
	clk.Advance(time.Hour) // beyond ttl + staleFor
	for i := 1000; i < 1030; i++ {
		c.Route(context.Background(), instTarget(urlkind.KindInstance, fmt.Sprintf("w-one.%d", i)))
	}
	if e := c.Stats().Entries; e >= 1000 {
		t.Fatalf("entries = %d, expected old ones swept", e)
	}
}
