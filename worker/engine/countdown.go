package engine

import (
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
)

// countdown is a restartable timer for "no client for d": the hub's idle
// release and its resting both use one. The hub's mu guards it. gen
// invalidates a timer that fired after disarm: Stop cannot take back a
// callback already running, so the callback checks the generation it was
// armed with under the same lock.
type countdown struct {
	d     time.Duration // 0 = off
	clk   clock.Clock
	timer clock.Timer
	gen   uint64
}

// set configures the countdown, stopping one already running (a hub's
// settings can be given again, e.g. with the instance's own idle timeout).
func (c *countdown) set(d time.Duration, clk clock.Clock) {
	c.disarm()
	c.d, c.clk = d, clk
}

// on reports whether the countdown was configured.
func (c *countdown) on() bool { return c.d > 0 }

// arm (re)starts the countdown; fire gets the generation it was armed with.
func (c *countdown) arm(fire func(gen uint64)) {
	if !c.on() {
		return
	}
	c.disarm()
	gen := c.gen
	c.timer = c.clk.AfterFunc(c.d, func() { fire(gen) })
}

// disarm stops the countdown and invalidates a callback already on its way.
func (c *countdown) disarm() {
	c.gen++
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
}

// current reports whether gen is still the armed generation, and forgets
// the timer if so (it has fired).
func (c *countdown) current(gen uint64) bool {
	if gen != c.gen {
		return false
	}
	c.timer = nil
	return true
}
