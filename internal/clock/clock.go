// Package clock is the one time source that packages take in their Config,
// so tests can drive time with clocktest.Clock instead of sleeping.
//
// A Clock is only Now and AfterFunc; Since, NewTimer, NewTicker and
// WithTimeout are built on those, so every Clock (clocktest's, a test's
// own) has them and a fake clock fires them when its test advances time.
package clock

import (
	"context"
	"sync"
	"time"
)

// Clock tells the time and runs timers.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine (or, for a fake clock, in the
	// one advancing time) after d.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a stoppable pending call.
type Timer interface {
	// Stop reports whether it stopped the call before it ran.
	Stop() bool
}

// Real is the system clock, the default everywhere.
var Real Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time                            { return time.Now() }
func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Since is the time elapsed on c since t.
func Since(c Clock, t time.Time) time.Duration { return c.Now().Sub(t) }

// WithTimeout is context.WithTimeout on c. On a clock other than Real the
// context has no Deadline (callees' deadlines are in real time) and is
// canceled, with cause context.DeadlineExceeded, when c passes d.
func WithTimeout(ctx context.Context, c Clock, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := c.(realClock); ok {
		return context.WithTimeout(ctx, d)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	t := c.AfterFunc(d, func() { cancel(context.DeadlineExceeded) })
	return ctx, func() {
		t.Stop()
		cancel(context.Canceled)
	}
}

// ChanTimer sends c's time on C once, after d, unless stopped: time.Timer
// on any Clock.
type ChanTimer struct {
	C <-chan time.Time
	t Timer
}

// Stop reports whether it stopped the timer before it fired; C is then
// never sent on.
func (t *ChanTimer) Stop() bool { return t.t.Stop() }

// NewTimer returns a timer on c that fires after d.
func NewTimer(c Clock, d time.Duration) *ChanTimer {
	if _, ok := c.(realClock); ok {
		t := time.NewTimer(d)
		return &ChanTimer{C: t.C, t: t}
	}
	ch := make(chan time.Time, 1) // one send at most: never blocks the clock
	return &ChanTimer{C: ch, t: c.AfterFunc(d, func() { ch <- c.Now() })}
}

// Ticker sends c's time on C every d until stopped; as with time.Ticker,
// ticks a slow receiver has not taken are dropped.
type Ticker struct {
	C    <-chan time.Time
	stop func()
}

// Stop ends the ticks; it does not close C.
func (t *Ticker) Stop() { t.stop() }

// NewTicker returns a ticker on c; d must be positive.
func NewTicker(c Clock, d time.Duration) *Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	if _, ok := c.(realClock); ok {
		t := time.NewTicker(d) // no drift from re-arming
		return &Ticker{C: t.C, stop: t.Stop}
	}
	ch := make(chan time.Time, 1)
	k := &ticker{c: c, d: d, ch: ch}
	k.mu.Lock()
	k.t = c.AfterFunc(d, k.tick)
	k.mu.Unlock()
	return &Ticker{C: ch, stop: k.stop}
}

// ticker re-arms an AfterFunc on each tick; on a fake clock the next one
// is due exactly d after this one.
type ticker struct {
	c  Clock
	d  time.Duration
	ch chan time.Time

	mu      sync.Mutex
	t       Timer
	stopped bool
}

func (k *ticker) tick() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		return
	}
	select {
	case k.ch <- k.c.Now():
	default: // the last tick is still unread
	}
	k.t = k.c.AfterFunc(k.d, k.tick)
}

func (k *ticker) stop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.stopped = true
	k.t.Stop()
}
