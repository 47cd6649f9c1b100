package pool

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
	"github.com/cloudbrowser-go/cloudbrowser/internal/sequence"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/seqrun"
)

// state is where a browser is in its pool's lifecycle.
type state int

const (
	stCreating state = iota // being made and initialized
	stFree                  // unlocked, ready for a lease
	stLocked                // leased (or handed to a waiting lease)
	stBusy                  // running back, touch, init after a failure, or a TTL replacement
	stGone                  // destroyed
)

// entry is one browser of a pool. All fields are guarded by Manager.mu;
// b is also read without it by the one goroutine that owns a creating or
// busy entry.
type entry struct {
	id     uint64
	p      *pool
	b      browser.Browser // nil while creating
	st     state
	born   time.Time // when b started (TTL)
	used   time.Time // last time it was made, or freed after a use (idle destroy)
	active time.Time // last use or touch (idle refresh)
	lease  *Lease
	// reuses counts the resets that lent it again (Lease.Reuse);
	// resetting says one runs (the entry is busy).
	reuses    int
	resetting bool
}

func (e *entry) crashed() bool {
	if e.b == nil {
		return false
	}
	select {
	case <-e.b.Done():
		return true
	default:
		return false
	}
}

type waiter struct {
	ch chan result // receives exactly one result
}

type result struct {
	e      *entry
	err    error
	reason string
}

// pool is a specific pool (app != "") or a type's general pool.
type pool struct {
	m       *Manager
	app     string
	general bool
	ts      *typeState
	cfg     Config
	log     zerolog.Logger

	entries  []*entry
	waiters  []*waiter
	retired  bool
	refreshT clock.Timer
	destroyT clock.Timer
	refillT  clock.Timer // the general pool's pending refill after leases
	c        Counters
}

// RefillDelay is how long after a lease the general pool starts the next
// user's browser: not at once, when making it (a few hundred ms of CPU)
// would compete with preparing the leased one and with its user's first
// frame. Leases meanwhile coalesce into one refill.
const RefillDelay = time.Second

func (m *Manager) newPool(app string, ts *typeState, cfg Config) *pool {
	p := &pool{m: m, app: app, general: app == "", ts: ts, cfg: cfg, c: newCounters()}
	lc := m.log.With().Str("type", ts.name)
	if p.general {
		lc = lc.Str("pool", "general")
	} else {
		lc = lc.Str("app", app)
	}
	p.log = lc.Logger()
	m.all[p] = struct{}{}
	return p
}

// count applies f to the pool's and the manager's counters.
func (p *pool) count(f func(c *Counters)) {
	f(&p.c)
	f(&p.m.total)
}

func (p *pool) leaseFailed(reason string) {
	p.count(func(c *Counters) { c.LeaseFailures[reason]++ })
}

func (p *pool) size() int { return len(p.entries) }

// pending counts browsers that will probably become free: being created
// or prepared. Waiting leases count on them.
func (p *pool) pending() int {
	n := 0
	for _, e := range p.entries {
		if e.st == stCreating || e.st == stBusy {
			n++
		}
	}
	return n
}

func (p *pool) newEntry() *entry {
	p.m.nextID++
	e := &entry{id: p.m.nextID, p: p, st: stCreating}
	p.entries = append(p.entries, e)
	p.m.spawn(func() { p.create(e) })
	return e
}

// short reports whether the pool is below its minimum. A specific pool's
// minimum counts all its browsers (its document's rule: leased ones come
// back through the back sequence). The general pool's counts the browsers
// ready for the next user, free or being made: its leased browsers never
// come back (nothing resets them), so counting them would leave it empty
// after GeneralMin leases, and every later first visit cold. Browsers
// being reset (Lease.Reuse) count: they come back.
func (p *pool) short() bool {
	if !p.general {
		return p.size() < p.cfg.MinSize
	}
	ready := 0
	for _, e := range p.entries {
		if e.st == stFree || e.st == stCreating || e.resetting {
			ready++
		}
	}
	return ready < p.cfg.MinSize
}

// fill starts browsers until the pool has its minimum (short), as far as
// the global limit allows (no shifting: that is for leases). At the pool's
// start a shortfall is a warning, as the document says.
func (p *pool) fill(start bool) {
	for p.short() {
		if !p.m.reserve(p.ts) {
			ev := p.log.Debug()
			if start {
				ev = p.log.Warn()
			}
			ev.Int("browsers", p.size()).Int("minSize", p.cfg.MinSize).Int("globalMax", p.ts.bt.Max).
				Msg("global maximum number of browsers has been reached: pool below its minimum size")
			return
		}
		p.newEntry()
	}
}

// grow adds a browser for a lease, in the document's order: the pool's
// maximum, then the global limit, then shifting a free general-pool
// browser to this pool.
func (p *pool) grow(forLease bool) error {
	if !p.general && p.size() >= p.cfg.MaxSize {
		return &LimitError{Reason: ReasonPoolMax, App: p.app, BrowserType: p.ts.name, Max: p.cfg.MaxSize}
	}
	shifted := false
	if !p.m.reserve(p.ts) {
		var victim *entry
		if !p.general && forLease {
			victim = p.ts.general.oldestFree()
		}
		if victim == nil {
			return &LimitError{Reason: ReasonGlobalMax, App: p.app, BrowserType: p.ts.name, Max: p.ts.bt.Max}
		}
		// Shifting: the general pool loses a free browser, this pool gets
		// a new one in its slot. Never the other way round.
		g := p.ts.general
		g.destroy(victim, "shifted to a specific pool")
		g.count(func(c *Counters) { c.ShiftedOut++ })
		p.m.reserve(p.ts)
		shifted = true
	}
	e := p.newEntry()
	if shifted {
		p.count(func(c *Counters) { c.ShiftedIn++ })
		p.log.Info().Uint64("browser", e.id).Msg("global limit reached: shifted a free general-pool browser to this pool")
	}
	return nil
}

// oldestFree is the free browser unused the longest.
func (p *pool) oldestFree() *entry {
	var best *entry
	for _, e := range p.entries {
		if e.st == stFree && !e.crashed() && (best == nil || e.used.Before(best.used)) {
			best = e
		}
	}
	return best
}

// takeFree takes the most recently used free browser (so the others idle
// and can be destroyed when idle destroy is on), dropping crashed ones.
func (p *pool) takeFree() *entry {
	for {
		var best *entry
		for _, e := range p.entries {
			if e.st == stFree && (best == nil || !e.used.Before(best.used)) {
				best = e
			}
		}
		if best == nil {
			return nil
		}
		if best.crashed() {
			p.destroy(best, "crashed while free")
			continue
		}
		if p.expired(best) {
			// The TTL also holds at handout: a browser that sat free past
			// it is not given to a user; the lease gets another free one
			// or a new one (the slot is free again).
			p.destroy(best, "older than its TTL at lease")
			p.count(func(c *Counters) { c.Expired++ })
			p.log.Info().Uint64("browser", best.id).Msg("free browser older than its TTL destroyed instead of leased")
			p.fill(false)
			continue
		}
		best.st = stLocked
		return best
	}
}

// expired reports whether e has lived past the pool's TTL (0: never).
func (p *pool) expired(e *entry) bool {
	ttl := p.cfg.TTL.D()
	return ttl > 0 && !e.born.IsZero() && p.m.clock.Now().Sub(e.born) >= ttl
}

// lease hands a locked entry to a caller; the general pool starts the
// next user's browser RefillDelay later.
func (p *pool) lease(e *entry, start time.Time) *Lease {
	if p.general && p.refillT == nil {
		p.refillT = p.m.clock.AfterFunc(RefillDelay, p.refill)
	}
	l := &Lease{m: p.m, e: e, b: e.b, app: p.app, specific: !p.general}
	e.lease = l
	now := p.m.clock.Now()
	e.used, e.active = now, now
	wait := now.Sub(start)
	p.count(func(c *Counters) { c.Leases++; c.waitTotal += wait })
	return l
}

func (p *pool) removeWaiter(w *waiter) bool {
	i := slices.Index(p.waiters, w)
	if i < 0 {
		return false
	}
	p.waiters = slices.Delete(p.waiters, i, i+1)
	return true
}

// release makes a prepared browser free (or gives it to the first waiting
// lease), or destroys it if the pool is gone or the browser crashed.
func (p *pool) release(e *entry) {
	switch {
	case e.st == stGone:
		return
	case p.retired || p.m.closed:
		p.destroy(e, "pool retired")
		return
	case e.crashed():
		p.destroy(e, "crashed")
		p.dispatch(nil, "")
		return
	}
	e.st = stFree
	p.dispatch(nil, "")
}

// dispatch serves waiting leases in order: free browsers first; if more
// leases wait than browsers are coming, one fails with cause (the reason a
// coming browser was lost) or the pool grows for them.
func (p *pool) dispatch(cause error, reason string) {
	for len(p.waiters) > 0 {
		e := p.takeFree()
		if e == nil {
			break
		}
		w := p.waiters[0]
		p.waiters = p.waiters[1:]
		w.ch <- result{e: e}
	}
	for len(p.waiters) > p.pending() {
		if cause != nil {
			w := p.waiters[0]
			p.waiters = p.waiters[1:]
			w.ch <- result{err: cause, reason: reason}
			cause = nil
			continue
		}
		if err := p.grow(true); err != nil {
			w := p.waiters[len(p.waiters)-1]
			p.waiters = p.waiters[:len(p.waiters)-1]
			w.ch <- result{err: err, reason: reasonOf(err)}
		}
	}
}

// destroy removes e from the pool and closes its browser in the
// background; it frees e's slot of the global limit.
func (p *pool) destroy(e *entry, why string) {
	if e.st == stGone {
		return
	}
	e.st = stGone
	e.lease = nil
	p.entries = slices.DeleteFunc(p.entries, func(x *entry) bool { return x == e })
	p.ts.count--
	if b := e.b; b != nil {
		p.count(func(c *Counters) { c.Destroyed++ })
		p.m.spawn(func() { closeBrowser(b) })
	}
	p.log.Debug().Uint64("browser", e.id).Str("why", why).Msg("browser destroyed")
	if p.retired && len(p.entries) == 0 {
		delete(p.m.all, p)
	}
}

func closeBrowser(b browser.Browser) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_ = b.Close(ctx)
}

// create makes e's browser and runs the initialization sequence on it.
func (p *pool) create(e *entry) {
	m := p.m
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.CreateTimeout)
	b, err := m.newBrowser(ctx, p.ts, p.app)
	cancel()
	m.mu.Lock()
	if err != nil {
		if e.st != stGone {
			p.destroy(e, "creation failed")
			if m.ctx.Err() == nil {
				p.count(func(c *Counters) { c.CreateFailures++ })
				p.log.Warn().Err(err).Msg("creating a browser failed")
			}
			p.dispatch(fmt.Errorf("creating a browser: %w", err), ReasonCreateFailed)
		}
		m.mu.Unlock()
		return
	}
	if e.st == stGone { // closed or retired meanwhile
		m.mu.Unlock()
		closeBrowser(b)
		return
	}
	e.b = b
	p.count(func(c *Counters) { c.Created++ })
	m.mu.Unlock()

	if err := p.run(e, SeqInit, p.cfg.Init); err != nil {
		// The document: init fails at creation → destroy.
		m.mu.Lock()
		p.destroy(e, "initialization sequence failed")
		p.dispatch(fmt.Errorf("initialization sequence: %w", err), ReasonInitFailed)
		m.mu.Unlock()
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	e.born, e.used, e.active = now, now, now
	p.release(e)
}

// run runs one of the pool's sequences on e's browser, counting and
// logging a failure (with the step index, kind and cause).
func (p *pool) run(e *entry, kind string, q sequence.Sequence) error {
	if len(q) == 0 {
		return nil
	}
	m := p.m
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.SequenceTimeout)
	defer cancel()
	start := time.Now()
	err := m.cfg.Runner.Run(ctx, e.b, q)
	if err == nil {
		p.log.Debug().Uint64("browser", e.id).Str("sequence", kind).Dur("took", time.Since(start)).Msg("sequence done")
		return nil
	}
	if m.ctx.Err() != nil {
		return err // closing: not the sequence's fault
	}
	ev := p.log.Warn().Uint64("browser", e.id).Str("sequence", kind).Str("error", err.Error())
	var se *seqrun.StepError
	if errors.As(err, &se) {
		ev = ev.Int("step", se.Index).Str("kind", string(se.Kind))
	}
	ev.Msg("sequence failed")
	m.mu.Lock()
	p.count(func(c *Counters) { c.SequenceFailures[kind]++ })
	m.mu.Unlock()
	return err
}

// returned takes a browser back from its lease.
func (p *pool) returned(e *entry) {
	p.count(func(c *Counters) { c.Returns++ })
	switch {
	case p.retired || p.m.closed:
		p.destroy(e, "returned to a retired pool")
	case p.general || len(p.cfg.Back) == 0:
		// Without a back sequence nothing puts the browser in a known
		// state: it is never reused by another user.
		p.destroy(e, "returned (no back sequence)")
		p.fill(false)
		p.dispatch(nil, "")
	case e.crashed():
		p.destroy(e, "returned crashed")
		p.dispatch(nil, "")
	default:
		e.st = stBusy
		p.m.spawn(func() { p.back(e) })
	}
}

// back runs the back sequence on a returned browser; the document's chain:
// back fails → init; that fails → destroy. Then the TTL check.
func (p *pool) back(e *entry) {
	if err := p.run(e, SeqBack, p.cfg.Back); err != nil {
		if err := p.run(e, SeqInit, p.cfg.Init); err != nil {
			p.lost(e, "back and initialization sequences failed")
			return
		}
	} else {
		p.m.mu.Lock()
		p.count(func(c *Counters) { c.Backs++ })
		p.m.mu.Unlock()
	}
	if ttl := p.cfg.TTL.D(); ttl > 0 {
		p.m.mu.Lock()
		old := p.m.clock.Now().Sub(e.born) >= ttl
		p.m.mu.Unlock()
		if old {
			p.recycle(e)
		}
	}
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	now := p.m.clock.Now()
	e.used, e.active = now, now
	p.release(e)
}

// lost destroys a browser its sequences could not recover.
func (p *pool) lost(e *entry, why string) {
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	p.destroy(e, why)
	p.dispatch(nil, "")
}

// recycle replaces e's browser, older than the TTL, by a new one showing
// the same page with the old one's cookies. On failure the old browser
// stays (and is retried at its next return).
func (p *pool) recycle(e *entry) {
	m := p.m
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.CreateTimeout)
	defer cancel()
	old := e.b
	page := old.Page()
	nb, err := func() (browser.Browser, error) {
		cookies, err := old.Cookies(ctx)
		if err != nil {
			return nil, fmt.Errorf("reading cookies: %w", err)
		}
		nb, err := m.newBrowser(ctx, p.ts, p.app)
		if err != nil {
			return nil, fmt.Errorf("creating the new browser: %w", err)
		}
		if err := nb.SetCookies(ctx, cookies); err != nil {
			closeBrowser(nb)
			return nil, fmt.Errorf("transferring %d cookies: %w", len(cookies), err)
		}
		if page.URL != "" && page.URL != "about:blank" {
			// Through the runner, so the page is loaded, not just committed.
			if err := m.cfg.Runner.Run(ctx, nb, sequence.Sequence{sequence.Navigate(page.URL)}); err != nil {
				closeBrowser(nb)
				return nil, fmt.Errorf("loading %s: %w", page.URL, err)
			}
		}
		return nb, nil
	}()
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		if m.ctx.Err() == nil {
			p.count(func(c *Counters) { c.SequenceFailures[SeqTTL]++ })
			p.log.Warn().Uint64("browser", e.id).Err(err).Msg("TTL replacement failed: keeping the old browser")
		}
		return
	}
	if e.st == stGone {
		m.spawn(func() { closeBrowser(nb) })
		return
	}
	e.b = nb
	e.born = m.clock.Now()
	p.count(func(c *Counters) { c.Recycled++; c.Created++; c.Destroyed++ })
	m.spawn(func() { closeBrowser(old) })
	p.log.Info().Uint64("browser", e.id).Str("url", page.URL).Msg("browser older than its TTL replaced")
}

// startTimers starts the validation loops the config enables.
func (p *pool) startTimers() {
	if p.cfg.Refreshes() {
		p.refreshT = p.m.clock.AfterFunc(p.cfg.RefreshValidationInterval.D(), p.refreshCheck)
	}
	if p.cfg.DestroysIdle() {
		p.destroyT = p.m.clock.AfterFunc(p.cfg.DestroyValidationInterval.D(), p.destroyCheck)
	}
}

// refill is the general pool's delayed fill after leases.
func (p *pool) refill() {
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	p.refillT = nil
	if p.retired || p.m.closed {
		return
	}
	p.fill(false)
}

// refreshCheck runs the touch session sequence on free browsers idle for
// MaxIdleToRefresh.
func (p *pool) refreshCheck() {
	p.idleCheck(func(now time.Time) {
		for _, e := range p.entries {
			if e.st == stFree && now.Sub(e.active) >= p.cfg.MaxIdleToRefresh.D() {
				e.st = stBusy
				p.m.spawn(func() { p.touch(e) })
			}
		}
		p.refreshT = p.m.clock.AfterFunc(p.cfg.RefreshValidationInterval.D(), p.refreshCheck)
	})
}

// idleCheck runs one of the validation timers' checks under the manager's
// lock, unless the pool is retired or the manager closed (the check then
// does not schedule itself again).
func (p *pool) idleCheck(check func(now time.Time)) {
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	if p.retired || p.m.closed {
		return
	}
	check(p.m.clock.Now())
}

// touch keeps e's session alive; the document's chain: touch fails →
// init; that fails → destroy. Touching is not use: idle destroy still
// counts from the last lease.
func (p *pool) touch(e *entry) {
	err := p.run(e, SeqTouch, p.cfg.TouchSession)
	if err != nil {
		if err := p.run(e, SeqInit, p.cfg.Init); err != nil {
			p.lost(e, "touch and initialization sequences failed")
			return
		}
	}
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	if err == nil {
		p.count(func(c *Counters) { c.Touches++ })
	}
	e.active = p.m.clock.Now()
	p.release(e)
}

// destroyCheck destroys free browsers unused for MaxIdleToDestroy, without
// replacement.
func (p *pool) destroyCheck() {
	p.idleCheck(func(now time.Time) {
		for _, e := range slices.Clone(p.entries) {
			if e.st == stFree && now.Sub(e.used) >= p.cfg.MaxIdleToDestroy.D() {
				p.destroy(e, "idle")
				p.log.Info().Uint64("browser", e.id).Msg("idle browser destroyed")
			}
		}
		p.destroyT = p.m.clock.AfterFunc(p.cfg.DestroyValidationInterval.D(), p.destroyCheck)
	})
}

// retire stops the pool: timers stop, waiting leases fail, free browsers
// are destroyed; the others are destroyed when they come back.
func (p *pool) retire(err error, reason string) {
	p.retired = true
	for _, t := range []clock.Timer{p.refreshT, p.destroyT, p.refillT} {
		if t != nil {
			t.Stop()
		}
	}
	for _, w := range p.waiters {
		w.ch <- result{err: err, reason: reason}
	}
	p.waiters = nil
	for _, e := range slices.Clone(p.entries) {
		if e.st == stFree {
			p.destroy(e, "pool retired")
		}
	}
	if len(p.entries) == 0 {
		delete(p.m.all, p)
	}
}
