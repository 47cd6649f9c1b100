package engine

import (
	"context"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
)

// Resting browsers, for density. A browser nobody watches still
// holds its renderer's compositor tiles and buffers; after a while
// without a client (StartRest) its page rests (browser.Browser.SetResting:
// hidden, its scripts still running), and the next client wakes it before
// its first frame. In Chromium this takes an idle browser from ~20 to ~12
// MiB of private memory (docs/chromium.md), and waking costs a millisecond
// and one new frame.

// hubRest is a hub's resting state. mu in the hub guards cd; callMu
// serializes the browser calls and guards resting.
type hubRest struct {
	cd countdown // cd.d 0 = never rest

	callMu  chan struct{} // a 1-slot lock, so waiting honours a context
	resting bool
}

// StartRest turns resting after a pause without a client on (after > 0)
// and starts the countdown (a browser nobody ever connected to rests too).
func (h *Hub) StartRest(after time.Duration, clk clock.Clock) {
	if after <= 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rest.cd.set(after, clk)
	if len(h.clients) == 0 && !h.closed {
		h.rest.cd.arm(h.restFired)
	}
}

// restFired rests the page if nobody joined since the countdown started.
// Taking the call lock first and checking the clients under it means a
// client that joins meanwhile either stops this or wakes the page after it.
func (h *Hub) restFired(gen uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), RestTimeout)
	defer cancel()
	if !h.rest.lock(ctx) {
		return
	}
	defer h.rest.unlock()
	h.mu.Lock()
	stale := !h.rest.cd.current(gen) || h.closed || len(h.clients) > 0
	after := h.rest.cd.d
	h.mu.Unlock()
	if stale || h.rest.resting {
		return
	}
	// The hub's mu is not held here: a client joining now waits in Wake
	// for this call, then wakes the page.
	if err := h.b.SetResting(ctx, true); err != nil {
		h.log.Debug().Err(err).Msg("could not rest the browser")
		return
	}
	h.rest.resting = true
	h.frames.resting.Add(1)
	h.frames.rests.Add(1)
	h.log.Debug().Dur("after", after).Msg("no client: browser resting")
}

// Wake shows a resting page again; a client that joined calls it before
// its first frame, and a browser going back to its pool gets it too.
func (h *Hub) Wake(ctx context.Context) {
	if !h.rest.lock(ctx) {
		return
	}
	defer h.rest.unlock()
	if !h.rest.resting {
		return
	}
	t0 := time.Now()
	if err := h.b.SetResting(ctx, false); err != nil {
		// The page stays hidden: the client sees the last frame and no
		// new ones; a closed or crashed browser tells it so on its own.
		select {
		case <-h.b.Done():
			h.log.Debug().Err(err).Msg("could not wake the browser: it ended")
		default:
			h.log.Warn().Err(err).Msg("could not wake the browser")
		}
		return
	}
	h.rest.resting = false
	h.frames.resting.Add(-1)
	h.frames.wakes.Add(1)
	h.log.Debug().Dur("took", time.Since(t0)).Msg("browser woken")
}

// lock takes the call lock, unless ctx ends first.
func (r *hubRest) lock(ctx context.Context) bool {
	select {
	case r.callMu <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (r *hubRest) unlock() { <-r.callMu }
