package registry

import (
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// Hooks for the master's tests, which run whole clusters against the
// registry and need to reach into its timing.

// SetDeadAfter changes how long a disconnected worker has to come back.
func (r *Registry) SetDeadAfter(d time.Duration) {
	r.mu.Lock()
	r.grace = d
	r.mu.Unlock()
}

// SetReported backdates worker id's last load report.
func (r *Registry) SetReported(id string, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w, ok := r.workers[id]; ok {
		w.reported = at
	}
}

// ConnOf is the connection worker id registered on (nil: none).
func (g *Gate) ConnOf(id string) *rmi.Conn {
	g.r.mu.Lock()
	defer g.r.mu.Unlock()
	if w, ok := g.r.workers[id]; ok {
		return w.conn
	}
	return nil
}

// Orphans is how many instances wait to be placed again.
func (mv *Moves) Orphans() int {
	mv.r.mu.Lock()
	defer mv.r.mu.Unlock()
	return len(mv.orphans)
}
