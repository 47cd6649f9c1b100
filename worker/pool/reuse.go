package pool

import (
	"context"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// SeqReset is the key of Counters.SequenceFailures for failed resets of
// reused general-pool browsers (Lease.Reuse).
const SeqReset = "reset"

// MaxReuses is how many times a general-pool browser is reset and lent
// again before it is closed: a bound on what a long-lived renderer may
// gather (memory, Chromium's own caches) that no reset reaches.
const MaxReuses = 100

// resetTimeout bounds one reset.
const resetTimeout = 30 * time.Second

// ResetFunc puts a returned browser back into the state of a new one
// (chromium's Reset, and the worker's own per-lease state: egress
// tenant). An error means it may not be blank: the pool closes it.
type ResetFunc func(ctx context.Context, b browser.Browser) error

// Reuse gives a general-pool browser back to be lent again: reset runs in
// the background (Reuse does not block) and, if it succeeds, the browser
// is free for the next lease, so that lease pays no browser creation. If
// reset fails, the browser crashed, it was reused MaxReuses times, or it
// comes from a specific pool, Reuse is Return. A second Return or Reuse
// does nothing.
func (l *Lease) Reuse(reset ResetFunc) {
	m := l.m
	m.mu.Lock()
	defer m.mu.Unlock()
	e := l.take()
	if e == nil {
		return
	}
	p := e.p
	if !p.general || reset == nil || p.retired || m.closed || e.crashed() || e.reuses >= MaxReuses {
		p.returned(e)
		return
	}
	p.count(func(c *Counters) { c.Returns++ })
	e.st, e.resetting = stBusy, true
	m.spawn(func() { p.reset(e, reset) })
}

// reset runs fn on e's browser and frees it, or destroys it on failure.
func (p *pool) reset(e *entry, fn ResetFunc) {
	m := p.m
	ctx, cancel := context.WithTimeout(m.ctx, resetTimeout)
	start := time.Now()
	err := fn(ctx, e.b)
	cancel()
	m.mu.Lock()
	defer m.mu.Unlock()
	e.resetting = false
	if e.st == stGone {
		return
	}
	if err != nil || e.crashed() {
		if err != nil && m.ctx.Err() == nil {
			p.count(func(c *Counters) { c.SequenceFailures[SeqReset]++ })
			p.log.Warn().Uint64("browser", e.id).Err(err).Msg("resetting a returned browser failed: closing it")
		}
		p.destroy(e, "reset failed")
		p.fill(false)
		p.dispatch(nil, "")
		return
	}
	e.reuses++
	p.count(func(c *Counters) { c.Reused++ })
	p.log.Debug().Uint64("browser", e.id).Int("reuses", e.reuses).Dur("took", time.Since(start)).Msg("returned browser reset for reuse")
	now := m.clock.Now()
	e.used, e.active = now, now
	p.release(e)
}
