// Package clocktest is the fake clock.Clock for tests: time moves only when
// the test says so.
package clocktest

import (
	"slices"
	"sync"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
)

// Clock is a clock.Clock that moves only by Advance and Set. Timers fire in
// the goroutine calling Advance, in time order; so do clock.NewTimer's and
// clock.NewTicker's, which are made of them. Safe for concurrent use.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*timer
	onFire func()
}

var _ clock.Clock = (*Clock)(nil)

// New returns a clock reading start.
func New(start time.Time) *Clock { return &Clock{now: start} }

type timer struct {
	c    *Clock
	at   time.Time
	f    func()
	done bool
}

func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.done
	t.done = true
	return was
}

func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *Clock) AfterFunc(d time.Duration, f func()) clock.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

// OnFire sets a function called after each timer Advance fires and once
// at its end (tests use it to let the code under test settle); nil for none.
func (c *Clock) OnFire(f func()) {
	c.mu.Lock()
	c.onFire = f
	c.mu.Unlock()
}

// Active counts timers that have neither fired nor been stopped.
func (c *Clock) Active() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.done {
			n++
		}
	}
	return n
}

// Set moves the clock to t, backwards too, firing no timers: for tests of
// what code does when the wall clock jumps.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// Advance moves the clock forward by d, firing the timers due on the way,
// each at its own time.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	target := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		var next *timer
		for _, t := range c.timers {
			if !t.done && !t.at.After(target) && (next == nil || t.at.Before(next.at)) {
				next = t
			}
		}
		onFire := c.onFire
		if next == nil {
			if target.After(c.now) { // concurrent Advances never move time back
				c.now = target
			}
			c.timers = slices.DeleteFunc(c.timers, func(t *timer) bool { return t.done })
			c.mu.Unlock()
			if onFire != nil {
				onFire()
			}
			return
		}
		next.done = true
		if next.at.After(c.now) {
			c.now = next.at
		}
		c.mu.Unlock()
		next.f()
		if onFire != nil {
			onFire()
		}
	}
}
