package master

import (
	"context"
	"sync"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/master/registry"
)

// history keeps each worker's load over the last 15 minutes for the
// dashboard: one point every historyStep, at most historyPoints per worker;
// workers gone for longer than the window are forgotten.
const (
	historyStep   = 5 * time.Second
	historyPoints = int(15 * time.Minute / historyStep)
)

// loadPoint is [unix ms, total, go heap, browser pss, projected].
type loadPoint [5]int64

type history struct {
	mu     sync.Mutex
	series map[string][]loadPoint
	seen   map[string]time.Time
}

func newHistory() *history {
	return &history{series: map[string][]loadPoint{}, seen: map[string]time.Time{}}
}

func (h *history) sample(now time.Time, views []registry.WorkerView) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, w := range views {
		s := append(h.series[w.ID], loadPoint{now.UnixMilli(), int64(w.Load.Total), int64(w.Load.GoHeap),
			int64(w.Load.BrowserPSS), int64(w.Projected)})
		if len(s) > historyPoints {
			s = append(s[:0], s[len(s)-historyPoints:]...)
		}
		h.series[w.ID] = s
		h.seen[w.ID] = now
	}
	for id, t := range h.seen {
		if now.Sub(t) > time.Duration(historyPoints)*historyStep {
			delete(h.series, id)
			delete(h.seen, id)
		}
	}
}

func (h *history) snapshot() map[string][]loadPoint {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string][]loadPoint, len(h.series))
	for id, s := range h.series {
		out[id] = append([]loadPoint(nil), s...)
	}
	return out
}

// run records the history of the workers views returns until ctx ends.
func (h *history) run(ctx context.Context, views func() []registry.WorkerView) {
	t := time.NewTicker(historyStep)
	defer t.Stop()
	h.sample(time.Now(), views())
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			h.sample(now, views())
		}
	}
}
