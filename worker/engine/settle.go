package engine

import (
	"context"
	"math"
	"sync"
	"time"
)

// A scroll the screencast missed. Chromium drops a screencast frame while
// two are unacknowledged, and paints no other on a page that is still: a
// quick scroll's last position may never come, and every viewer keeps an
// old one (seen in TestTileUpdatesShowThePage on a loaded host, with or
// without tiles, and when a program scrolled it over CDP). scrollSettle
// after the last frame or the last wheel or key, the hub compares the
// page's scroll with its last frame's, and if they differ restarts the
// screencast, whose start sends the page as it is.
const scrollSettle = 300 * time.Millisecond

// hubSettle is the pending check.
type hubSettle struct {
	mu sync.Mutex
	t  *time.Timer
	// tried is the scroll the last restart was for: if its frame still
	// shows another (a page whose frames report their scroll otherwise),
	// no restart again until the page moves, or the check would loop.
	tried    [2]float64
	hasTried bool // a restart was made: tried is set
}

// noteScroll (re)arms h's check after a frame or an input that may
// scroll.
func noteScroll(h *Hub) {
	if h.b == nil {
		return // a hub of the bookkeeping tests
	}
	h.settle.mu.Lock()
	defer h.settle.mu.Unlock()
	if h.settle.t == nil {
		h.settle.t = time.AfterFunc(scrollSettle, func() { checkSettled(h) })
		return
	}
	h.settle.t.Reset(scrollSettle)
}

// checkSettled restarts h's screencast if its last frame is not where
// the page is scrolled.
func checkSettled(h *Hub) {
	h.mu.Lock()
	last := h.last
	stale := h.closed || last == nil || len(h.clients) == 0
	h.mu.Unlock()
	if stale {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var at [2]float64
	if err := h.b.Evaluate(ctx, "[scrollX, scrollY]", &at); err != nil ||
		(math.Abs(at[0]-last.hdr.SX) < 0.5 && math.Abs(at[1]-last.hdr.SY) < 0.5) {
		return
	}
	h.settle.mu.Lock()
	again := h.settle.hasTried && h.settle.tried == at
	h.settle.tried, h.settle.hasTried = at, true
	h.settle.mu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	if again || h.closed || h.last != last || len(h.clients) == 0 {
		return // tried for this scroll already, or a frame came meanwhile
	}
	h.frames.castRestarts.Add(1)
	h.log.Debug().Float64("scroll_y", at[1]).Float64("frame_scroll_y", last.hdr.SY).Msg("the screencast missed a scroll: restarting it")
	h.stopCastLocked()
	h.startCastLocked()
}
