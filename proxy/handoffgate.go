package proxy

import (
	"sync"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
)

// handoffBackoff is how long a worker's handoff socket is not tried again
// after it failed (its worker restarted, say): its WebSockets are relayed.
const handoffBackoff = 30 * time.Second

// handoffGate decides which workers' handoff sockets are tried, for the
// net/http path's WebSockets and the edge's worker connections alike: only
// a worker on this host, and not one whose socket failed lately.
type handoffGate struct {
	disabled bool        // Config.DisableHandoff
	hostID   string      // handoff.HostID: workers with the same take handoffs
	clk      clock.Clock // of the backoff
	down     sync.Map    // handoff socket path -> time.Time it is not tried before
}

// allows: route's worker is on this host and takes handoffs.
func (g *handoffGate) allows(route Route) bool {
	if g.disabled || route.Handoff == "" || route.Host == "" || route.Host != g.hostID {
		return false
	}
	if until, ok := g.down.Load(route.Handoff); ok && g.clk.Now().Before(until.(time.Time)) {
		return false
	}
	return true
}

// failed: socket is not tried for handoffBackoff.
func (g *handoffGate) failed(socket string) {
	g.down.Store(socket, g.clk.Now().Add(handoffBackoff))
}
