package engine

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

const (
	inputTimeout = 5 * time.Second
	// A failed resize is tried again after resizeRetry, then twice that,
	// resizeTries times in all.
	resizeRetry = 500 * time.Millisecond
	resizeTries = 4
)

// hubInput takes a hub's clients' input to its browser: it turns away
// read-only viewers, the other viewers' window sizes and addresses the app
// does not let users open, tries a failed resize again, and keeps when the
// last input that paints went in, for the CPU grade's input→frame latency.
// A migration's hold comes first (take, hold.go).
type hubInput struct {
	b      browser.Browser
	host   Host
	frames *Counters
	log    zerolog.Logger
	// closed reports whether the hub ended: no resize is tried again then.
	// It takes the hub's mu, which is never held while taking mu below.
	closed func() bool
	// gesture notes a viewer's input the page may answer with a copy.
	gesture func(c *client, t browser.InputType)
	// scrolled follows a wheel or key up (settle.go).
	scrolled func()

	// paintAt is when the last input that paints was handed to the
	// browser (UnixNano, 0 = shown); the hub's next frame takes it.
	paintAt atomic.Int64
	// resizeGen counts the owner's resizes, so a retry of a failed one
	// (resizeLater) yields to a newer; mu guards resizeTimer, the retry.
	resizeGen atomic.Uint64
	// scale is the device pixel ratio of the owner's last resize
	// (float64 bits; 0 = 1): frames carry that many pixels per CSS pixel.
	scale       atomic.Uint64
	mu          sync.Mutex
	resizeTimer *time.Timer
}

// dispatch sends one event in the order the client sent it. Read-only
// viewers are ignored; only the owner's window size drives the viewport.
func (in *hubInput) dispatch(c *client, ev browser.InputEvent) {
	if c.readOnly.Load() || (ev.Type == browser.InputResize && !c.owner) {
		in.frames.ignored.Add(1)
		return
	}
	if ev.Type == browser.InputNavigate && !in.host.MayNavigate(ev.URL) {
		// Only the app's pages decide where its browsers go, unless the
		// app lets users type addresses.
		in.frames.ignored.Add(1)
		c.enqueue(encode(errorMsg{Message: "this app does not let you open addresses of your own"}))
		return
	}
	in.frames.inputs.Add(1)
	if in.gesture != nil {
		in.gesture(c, ev.Type)
	}
	if paints(ev.Type) {
		in.paintAt.Store(time.Now().UnixNano())
	}
	var gen uint64
	if ev.Type == browser.InputResize {
		gen = in.resizeGen.Add(1)
	}
	if err := in.send(ev); err != nil {
		if errors.Is(err, browser.ErrInvalidInput) {
			c.enqueue(encode(errorMsg{Message: err.Error()}))
			return
		}
		if ev.Type == browser.InputResize {
			in.resizeLater(c, ev, gen, 0, err)
			return
		}
		in.log.Debug().Err(err).Str("type", string(ev.Type)).Msg("input failed")
		return
	}
	if in.scrolled != nil && (ev.Type == browser.InputWheel || ev.Type == browser.InputKeyDown || ev.Type == browser.InputRawKeyDown) {
		in.scrolled()
	}
}

// send hands ev to the browser within inputTimeout. The page may have
// changed (snapshotted within the interval), and a size it took is the one
// a snapshot keeps.
func (in *hubInput) send(ev browser.InputEvent) error {
	ctx, cancel := context.WithTimeout(context.Background(), inputTimeout)
	defer cancel()
	err := in.b.Input(ctx, ev)
	in.host.Touched()
	if err == nil && ev.Type == browser.InputResize {
		in.host.Resized(ev.Width, ev.Height)
		in.scale.Store(math.Float64bits(ev.Scale))
	}
	return err
}

// resizeLater tries a failed resize again (a page busy past inputTimeout,
// or between two renderers for longer than a commit takes): an engine
// sends its size only when its window changes, so a lost one would leave
// the page at the wrong size until then. A newer resize, the client's end
// or the hub's stops it; after resizeTries it is given up, loudly.
func (in *hubInput) resizeLater(c *client, ev browser.InputEvent, gen uint64, try int, err error) {
	log := in.log.Warn().Err(err).Int("width", ev.Width).Int("height", ev.Height).Int("try", try+1)
	if try+1 >= resizeTries {
		log.Msg("resize failed; giving up")
		return
	}
	delay := resizeRetry << try
	log.Dur("retry_in", delay).Msg("resize failed; trying again")
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed() {
		return
	}
	if in.resizeTimer != nil {
		in.resizeTimer.Stop()
	}
	in.resizeTimer = time.AfterFunc(delay, func() {
		select {
		case <-c.done:
			return
		default:
		}
		if in.closed() || in.resizeGen.Load() != gen {
			return
		}
		if err := in.send(ev); err != nil {
			if !errors.Is(err, browser.ErrInvalidInput) && in.resizeGen.Load() == gen {
				in.resizeLater(c, ev, gen, try+1, err)
			}
			return
		}
		in.log.Info().Int("width", ev.Width).Int("height", ev.Height).Int("try", try+2).Msg("resized")
	})
}

// deviceScale is the frames' device pixels per CSS pixel (at least 1).
func (in *hubInput) deviceScale() float64 {
	return max(1, math.Float64frombits(in.scale.Load()))
}

// stop ends a resize retry for good: the hub ended (closed reports it
// already, so no retry starts after this).
func (in *hubInput) stop() {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.resizeTimer != nil {
		in.resizeTimer.Stop()
	}
}

// paints reports whether an input event of type t nearly always changes
// the screen (a key typed, a button pressed, a scroll), so the next frame
// answers it; moves and releases often paint nothing.
func paints(t browser.InputType) bool {
	switch t {
	case browser.InputKeyDown, browser.InputChar, browser.InputInsertText, browser.InputCompose, browser.InputMouseDown, browser.InputWheel:
		return true
	}
	return false
}
