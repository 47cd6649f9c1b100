package worker

import (
	"context"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
	"sync/atomic"
	"time"
)

// Resting browsers, for density. A browser nobody watches still
// holds its renderer's compositor tiles and buffers; after RestAfter
// without a client its page rests (browser.Browser.SetResting: hidden, its
// scripts still running), and the next client wakes it before its first
// frame. In Chromium this takes an idle browser from ~20 to ~12 MiB of
// private memory (docs/chromium.md), and waking costs a millisecond and
// one new frame.

// DefaultRestAfter is the default Config.RestAfter: long enough that a
// reload or a reconnecting client engine finds the page awake.
const DefaultRestAfter = 10 * time.Second

// restTimeout bounds one SetResting call.
const restTimeout = 10 * time.Second

// restCounters are the worker's totals of resting browsers.
type restCounters struct {
	resting      atomic.Int64 // browsers resting now
	rests, wakes atomic.Uint64
}

// hubRest is a hub's resting state. mu in the hub guards cd; callMu
// serializes the browser calls and guards resting.
type hubRest struct {
	cd     countdown // cd.d 0 = never rest
	counts *restCounters

	callMu  chan struct{} // a 1-slot lock, so waiting honours a context
	resting bool
}

// startRest turns resting on and starts the countdown (a browser nobody
// ever connected to rests too).
func (h *hub) startRest(after time.Duration, clk clock.Clock, counts *restCounters) {
	if after <= 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rest.cd.set(after, clk)
	h.rest.counts = counts
	if len(h.clients) == 0 && !h.closed {
		h.rest.cd.arm(h.restFired)
	}
}

// restFired rests the page if nobody joined since the countdown started.
// Taking the call lock first and checking the clients under it means a
// client that joins meanwhile either stops this or wakes the page after it.
func (h *hub) restFired(gen uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), restTimeout)
	defer cancel()
	if !h.lockRest(ctx) {
		return
	}
	defer h.unlockRest()
	h.mu.Lock()
	stale := !h.rest.cd.current(gen) || h.closed || len(h.clients) > 0
	after := h.rest.cd.d
	h.mu.Unlock()
	if stale || h.rest.resting {
		return
	}
	// The hub's mu is not held here: a client joining now waits in wake
	// for this call, then wakes the page.
	if err := h.vb.b.SetResting(ctx, true); err != nil {
		h.log.Debug().Err(err).Msg("could not rest the browser")
		return
	}
	h.rest.resting = true
	h.rest.counts.resting.Add(1)
	h.rest.counts.rests.Add(1)
	h.log.Debug().Dur("after", after).Msg("no client: browser resting")
}

// wake shows a resting page again; a client that joined calls it before
// its first frame, and a browser going back to its pool gets it too.
func (h *hub) wake(ctx context.Context) {
	if !h.lockRest(ctx) {
		return
	}
	defer h.unlockRest()
	if !h.rest.resting {
		return
	}
	t0 := time.Now()
	if err := h.vb.b.SetResting(ctx, false); err != nil {
		// The page stays hidden: the client sees the last frame and no
		// new ones; a closed or crashed browser tells it so on its own.
		select {
		case <-h.vb.b.Done():
			h.log.Debug().Err(err).Msg("could not wake the browser: it ended")
		default:
			h.log.Warn().Err(err).Msg("could not wake the browser")
		}
		return
	}
	h.rest.resting = false
	h.rest.counts.resting.Add(-1)
	h.rest.counts.wakes.Add(1)
	h.log.Debug().Dur("took", time.Since(t0)).Msg("browser woken")
}

func (h *hub) lockRest(ctx context.Context) bool {
	select {
	case h.rest.callMu <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (h *hub) unlockRest() { <-h.rest.callMu }
