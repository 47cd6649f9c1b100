package registry

import (
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// Hooks for the master's tests, which run whole clusters against the
// registry and need to reach into its timing.

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
