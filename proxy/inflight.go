package proxy

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
)

// inFlight is the net/http path's traffic with workers in progress: the
// WebSocket relays (and their handshakes) and the forwarded exchanges, by
// worker. CloseWorker ends a dead worker's; Shutdown closes the relays and
// waits for them (plain exchanges are the http.Server's to drain).
type inFlight struct {
	open *atomic.Int64 // Stats.WebSocketsOpen

	mu       sync.Mutex
	closing  bool
	relays   map[*relay]struct{}
	forwards map[string]map[*context.CancelCauseFunc]struct{} // by worker id
	drained  chan struct{}                                    // closed when closing && len(relays)==0
}

func newInFlight(open *atomic.Int64) *inFlight {
	return &inFlight{open: open, relays: map[*relay]struct{}{},
		forwards: map[string]map[*context.CancelCauseFunc]struct{}{}}
}

// track adds rl; false once shutting down (the caller must not relay).
func (f *inFlight) track(rl *relay) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closing {
		return false
	}
	f.relays[rl] = struct{}{}
	f.open.Add(1)
	return true
}

func (f *inFlight) untrack(rl *relay) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.relays, rl)
	f.open.Add(-1)
	if f.closing && len(f.relays) == 0 {
		close(f.drained)
	}
}

func (f *inFlight) isClosing() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closing
}

// shutdown refuses new relays and closes the open ones; the channel it
// returns is closed once the last one is untracked.
func (f *inFlight) shutdown() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closing {
		f.closing = true
		f.drained = make(chan struct{})
		if len(f.relays) == 0 {
			close(f.drained)
		}
	}
	for rl := range f.relays {
		rl.close()
	}
	return f.drained
}

// closeRelays closes the relays to worker wid and returns how many.
func (f *inFlight) closeRelays(wid string) int {
	f.mu.Lock()
	var gone []*relay
	for rl := range f.relays {
		if rl.workerID == wid {
			gone = append(gone, rl)
		}
	}
	f.mu.Unlock()
	for _, rl := range gone {
		rl.close()
	}
	return len(gone)
}

// trackForward gives r a context that endForwards cancels when worker wid
// is declared dead; done forgets it.
func (f *inFlight) trackForward(r *http.Request, wid string) (*http.Request, func()) {
	ctx, cancel := context.WithCancelCause(r.Context())
	key := &cancel
	f.mu.Lock()
	if f.forwards[wid] == nil {
		f.forwards[wid] = map[*context.CancelCauseFunc]struct{}{}
	}
	f.forwards[wid][key] = struct{}{}
	f.mu.Unlock()
	return r.WithContext(ctx), func() {
		f.mu.Lock()
		delete(f.forwards[wid], key)
		if len(f.forwards[wid]) == 0 {
			delete(f.forwards, wid)
		}
		f.mu.Unlock()
		cancel(nil)
	}
}

// endForwards cancels the exchanges with worker wid.
func (f *inFlight) endForwards(wid string) {
	f.mu.Lock()
	var cancels []context.CancelCauseFunc
	for c := range f.forwards[wid] {
		cancels = append(cancels, *c)
	}
	f.mu.Unlock()
	for _, c := range cancels {
		c(errWorkerDead)
	}
}
