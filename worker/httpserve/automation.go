package httpserve

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/cdpticket"
	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
)

// Automation sessions' lifetime on the worker that hosts their browser
// (docs/automation.md, "Lifetime"): a session ends (its instance closes,
// which the master hears, and the master drops the session) after
// KeepAlive without a client (0: when its last client leaves), or after
// Idle with no CDP command and no viewer in the client engine. The master
// ends it at its timeout.

// autoSessions follows the automation sessions with a client here, by
// browser.
type autoSessions struct {
	clk clock.Clock // nil: clock.Real
	mu  sync.Mutex
	by  map[string]*autoSession
}

// autoSession is one browser's automation clients.
type autoSession struct {
	clients int
	leave   clock.Timer // KeepAlive after the last client left
	release func()      // the browser's idle hold, for the session's life here
}

// autoHost is what ending a session needs: closing its instance, and
// whether someone watches it.
type autoHost struct {
	close   func(reason string)
	viewers func() int
	// hold keeps the browser from its app's idle release while the session
	// lasts here (nil: nothing to hold).
	hold func() (release func())
	log  zerolog.Logger
}

func (a *autoSessions) clock() clock.Clock {
	if a.clk == nil {
		return clock.Real
	}
	return a.clk
}

// join counts a client of browser in, and returns its activity hook and
// the function that counts it out when it leaves; cancel ends the
// client's connection, with its cause, when the session goes idle.
func (a *autoSessions) join(browser string, cl cdpticket.Claims, h autoHost, cancel context.CancelCauseFunc) (activity func(), leave func()) {
	clk := a.clock()
	a.mu.Lock()
	if a.by == nil {
		a.by = map[string]*autoSession{}
	}
	s := a.by[browser]
	if s == nil {
		s = &autoSession{release: func() {}}
		if h.hold != nil {
			s.release = h.hold()
		}
		a.by[browser] = s
	}
	s.clients++
	if s.leave != nil {
		s.leave.Stop() // back within its keep-alive
		s.leave = nil
	}
	a.mu.Unlock()

	var last atomic.Int64 // unix ns of the client's last command
	last.Store(clk.Now().UnixNano())
	activity = func() { last.Store(clk.Now().UnixNano()) }
	var idleMu sync.Mutex
	var idle clock.Timer
	left := false
	if cl.Idle > 0 {
		var check func()
		check = func() {
			idleMu.Lock()
			defer idleMu.Unlock()
			if left {
				return
			}
			quiet := clock.Since(clk, time.Unix(0, last.Load()))
			if h.viewers() > 0 {
				activity() // watched: not idle
				quiet = 0
			}
			if quiet < cl.Idle {
				idle = clk.AfterFunc(cl.Idle-quiet, check)
				return
			}
			h.log.Info().Dur("idle", cl.Idle).Msg("automation session idle: ended")
			cancel(errSessionIdle)
			go h.close("automation session ended: idle for " + cl.Idle.String())
		}
		idle = clk.AfterFunc(cl.Idle, check)
	}
	leave = func() {
		idleMu.Lock()
		left = true
		if idle != nil {
			idle.Stop()
		}
		idleMu.Unlock()
		a.mu.Lock()
		defer a.mu.Unlock()
		if s.clients--; s.clients > 0 {
			return
		}
		if cl.KeepAlive <= 0 {
			delete(a.by, browser)
			s.release()
			go h.close("automation session ended: its client left")
			return
		}
		s.leave = clk.AfterFunc(cl.KeepAlive, func() {
			a.mu.Lock()
			if a.by[browser] != s || s.clients > 0 {
				a.mu.Unlock()
				return // a client came back
			}
			delete(a.by, browser)
			a.mu.Unlock()
			s.release()
			h.close("automation session ended: no client for " + cl.KeepAlive.String())
		})
	}
	return activity, leave
}
