package proxy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
	"github.com/cloudbrowser-go/cloudbrowser/internal/ids"
	"github.com/cloudbrowser-go/cloudbrowser/internal/urlkind"
)

// CachingRouter decorates a Router (the master) with a route cache.
//
// Instance-keyed routes are cached per instance id for ttl, so a page load
// with dozens of resources costs one master round trip. Application URLs are
// never cached: each one must go through the balancer. Every successful
// answer also teaches the cache the address of the worker it names, which is
// what lets existing instances stay reachable while the master is down: the
// instance id encodes its worker (ids.WorkerOf).
type CachingRouter struct {
	up            Router
	ttl           time.Duration
	staleFor      time.Duration
	lookupTimeout time.Duration
	clk           clock.Clock

	mu      sync.RWMutex
	routes  map[string]cacheEntry // instance id -> route
	workers map[string]Route      // worker id -> last known route to it
	gen     uint64                // bumped by every invalidation
	sweepAt int

	sf singleflight.Group

	testHookJoined func() // called once a caller waits on a lookup (tests)

	hits, misses, fallbacks, lookups atomic.Uint64
}

type cacheEntry struct {
	route   Route
	expires time.Time
}

// CacheStats are CachingRouter counters.
type CacheStats struct {
	Hits      uint64 // answered from a fresh entry
	Misses    uint64 // needed the upstream (or joined a lookup in flight)
	Lookups   uint64 // upstream Route calls for instance-keyed targets
	Fallbacks uint64 // answered from stale/decoded routes while the master was unavailable
	Entries   int
	Workers   int
}

// CacheOption tunes a CachingRouter.
type CacheOption func(*CachingRouter)

// WithClock sets the clock of route expiry (default clock.Real).
func WithClock(clk clock.Clock) CacheOption { return func(c *CachingRouter) { c.clk = clk } }

// WithLookupTimeout bounds one upstream lookup, on the cache's clock.
// Lookups are shared by all concurrent callers, so they run detached from
// any single caller's context.
func WithLookupTimeout(d time.Duration) CacheOption {
	return func(c *CachingRouter) { c.lookupTimeout = d }
}

// WithStaleFor sets how long an expired entry may still serve as a fallback
// during a master outage (default 10*ttl, at least one minute).
func WithStaleFor(d time.Duration) CacheOption { return func(c *CachingRouter) { c.staleFor = d } }

// NewCachingRouter wraps upstream with a cache of instance routes.
func NewCachingRouter(upstream Router, ttl time.Duration, opts ...CacheOption) *CachingRouter {
	c := &CachingRouter{
		up:            upstream,
		ttl:           ttl,
		staleFor:      max(10*ttl, time.Minute),
		lookupTimeout: 5 * time.Second,
		clk:           clock.Real,
		routes:        make(map[string]cacheEntry),
		workers:       make(map[string]Route),
		sweepAt:       1024,
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Route implements Router.
func (c *CachingRouter) Route(ctx context.Context, t urlkind.Target) (Route, error) {
	if !t.Kind.InstanceKeyed() {
		r, err := c.up.Route(ctx, t)
		if err == nil {
			c.learn(r)
		}
		return r, err
	}
	if r, ok, _ := c.RouteNow(t); ok {
		return r, nil
	}
	iid := t.InstanceID
	c.misses.Add(1)
	ch := c.sf.DoChan(iid, func() (any, error) { return c.lookup(ctx, t) })
	if c.testHookJoined != nil {
		c.testHookJoined()
	}
	select {
	case res := <-ch:
		if res.Err != nil {
			return Route{}, res.Err
		}
		return res.Val.(Route), nil
	case <-ctx.Done():
		return Route{}, fmt.Errorf("proxy: route lookup for %s: %w", iid, ctx.Err())
	}
}

// RouteNow implements InstantRouter: a fresh cached route.
func (c *CachingRouter) RouteNow(t urlkind.Target) (Route, bool, error) {
	if !t.Kind.InstanceKeyed() {
		return Route{}, false, nil
	}
	c.mu.RLock()
	e, ok := c.routes[t.InstanceID]
	c.mu.RUnlock()
	if !ok || !c.clk.Now().Before(e.expires) {
		return Route{}, false, nil
	}
	c.hits.Add(1)
	return e.route, true, nil
}

// lookup runs once per instance id at a time, on behalf of every waiter.
func (c *CachingRouter) lookup(ctx context.Context, t urlkind.Target) (Route, error) {
	c.lookups.Add(1)
	c.mu.RLock()
	gen := c.gen
	c.mu.RUnlock()

	lctx, cancel := clock.WithTimeout(context.WithoutCancel(ctx), c.clk, c.lookupTimeout)
	defer cancel()
	r, err := c.up.Route(lctx, t)
	if err == nil {
		c.mu.Lock()
		// An invalidation that raced with this lookup may have been about this
		// very route; don't resurrect it.
		if c.gen == gen {
			c.store(t.InstanceID, r)
		}
		c.mu.Unlock()
		return r, nil
	}
	if errors.Is(err, ErrMasterUnavailable) || lctx.Err() != nil {
		if fr, ok := c.fallback(t.InstanceID); ok {
			c.fallbacks.Add(1)
			return fr, nil
		}
		if !errors.Is(err, ErrMasterUnavailable) {
			err = fmt.Errorf("%w: %w", ErrMasterUnavailable, err)
		}
	}
	return Route{}, err
}

// store caches r; c.mu must be held.
func (c *CachingRouter) store(iid string, r Route) {
	now := c.clk.Now()
	c.routes[iid] = cacheEntry{route: r, expires: now.Add(c.ttl)}
	if r.WorkerID != "" && r.Addr != "" {
		c.workers[r.WorkerID] = r
	}
	if len(c.routes) >= c.sweepAt {
		// Amortized cleanup of entries too old even to serve as fallback.
		for k, e := range c.routes {
			if now.After(e.expires.Add(c.staleFor)) {
				delete(c.routes, k)
			}
		}
		c.sweepAt = max(2*len(c.routes), 1024)
	}
}

func (c *CachingRouter) learn(r Route) {
	if r.WorkerID == "" || r.Addr == "" {
		return
	}
	c.mu.RLock()
	known := c.workers[r.WorkerID] == r
	c.mu.RUnlock()
	if known {
		return
	}
	c.mu.Lock()
	c.workers[r.WorkerID] = r
	c.mu.Unlock()
}

// fallback answers for an instance while the master is unavailable: first a
// recently expired master-given route (right even if the instance moved),
// then the worker encoded in the id, if that worker's address is known.
func (c *CachingRouter) fallback(iid string) (Route, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if e, ok := c.routes[iid]; ok && c.clk.Now().Before(e.expires.Add(c.staleFor)) {
		return e.route, true
	}
	wid, ok := ids.WorkerOf(iid)
	if !ok {
		return Route{}, false
	}
	r, ok := c.workers[wid]
	return r, ok
}

// Invalidate drops cached routes of instances that were removed or moved.
func (c *CachingRouter) Invalidate(instanceIDs ...string) {
	c.mu.Lock()
	c.gen++
	for _, id := range instanceIDs {
		delete(c.routes, id)
	}
	c.mu.Unlock()
	for _, id := range instanceIDs {
		c.sf.Forget(id) // later callers must not join a lookup that predates this
	}
}

// InvalidateWorker drops every route to a dead worker and forgets its
// address, so no fallback sends traffic there either.
func (c *CachingRouter) InvalidateWorker(workerID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	delete(c.workers, workerID)
	for k, e := range c.routes {
		if e.route.WorkerID == workerID {
			delete(c.routes, k)
		}
	}
}

// InvalidateAll drops every cached route, e.g. after reconnecting to the
// master, when invalidations may have been missed. Worker addresses are kept
// for the fallback.
func (c *CachingRouter) InvalidateAll() {
	c.mu.Lock()
	c.gen++
	keys := make([]string, 0, len(c.routes))
	for k := range c.routes {
		keys = append(keys, k)
	}
	clear(c.routes)
	c.mu.Unlock()
	for _, k := range keys {
		c.sf.Forget(k)
	}
}

// Apps implements Router; the home page is cheap enough not to cache.
func (c *CachingRouter) Apps(ctx context.Context) ([]AppLink, error) { return c.up.Apps(ctx) }

// Stats returns a snapshot of the counters.
func (c *CachingRouter) Stats() CacheStats {
	c.mu.RLock()
	n, w := len(c.routes), len(c.workers)
	c.mu.RUnlock()
	return CacheStats{
		Hits: c.hits.Load(), Misses: c.misses.Load(), Lookups: c.lookups.Load(),
		Fallbacks: c.fallbacks.Load(), Entries: n, Workers: w,
	}
}
