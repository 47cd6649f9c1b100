package engine

import (
	"sync"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// gestureWindow is how long after a viewer's gesture what the page does
// is taken as that viewer's doing: a copy, a file picker. A browser lets a
// page write the clipboard or open a picker only during a user's
// activation; this is its measure across the wire.
const gestureWindow = 5 * time.Second

// gestures keeps whose gesture (a key, a click, a touch, a paste; not a
// mouse move, a wheel or a resize) came last, and when.
type gestures struct {
	clk clock.Clock
	// on, if set, is told of each gesture's viewer (Config.OnGesture).
	on   func(user string)
	mu   sync.Mutex
	last *client
	at   time.Time
}

// note notes a viewer's input.
func (g *gestures) note(c *client, t browser.InputType) {
	switch t {
	case browser.InputMouseMove, browser.InputWheel, browser.InputResize:
		return // no user activation in a browser either
	}
	g.mu.Lock()
	g.last, g.at = c, g.clk.Now()
	g.mu.Unlock()
	if g.on != nil {
		g.on(c.user)
	}
}

// forget drops a client that left.
func (g *gestures) forget(c *client) {
	g.mu.Lock()
	if g.last == c {
		g.last = nil
	}
	g.mu.Unlock()
}

// actor is the viewer whose gesture came last within gestureWindow and
// who may still drive the browser; nil if none.
func (g *gestures) actor() *client {
	g.mu.Lock()
	c, at := g.last, g.at
	g.mu.Unlock()
	if c == nil || clock.Since(g.clk, at) > gestureWindow || c.readOnly.Load() {
		return nil
	}
	return c
}
