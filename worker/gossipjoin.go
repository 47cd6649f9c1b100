package worker

import (
	"context"
	"time"
)

// gossipSeed is the master's gossip member: its name and address.
type gossipSeed struct{ masterID, addr string }

// stayInGossip joins the gossip layer again when this worker's roster no
// longer has the master alive while the master answers over RMI (called
// after each load report it acknowledged). A gossip cut longer than the
// gossip layer keeps talking to the dead (GossipToTheDeadTime) leaves
// both sides believing the other dead for good: the master kept the worker
// because it answers over RMI (SuspectMember), and only a new connection to
// the master (onConnect) would join again, which an RMI connection that
// never broke does not make. Without gossip the master would notice this
// worker's next failure only through its RMI connection.
func (w *Worker) stayInGossip() {
	m, seed := w.gossip(), w.seed.Load()
	if m == nil || seed == nil || seed.addr == "" || m.Alive(seed.masterID) || !w.rejoining.CompareAndSwap(false, true) {
		return
	}
	w.wg.Add(1) // from the report loop, itself counted: never after Close's Wait began
	go func() {
		defer w.wg.Done()
		defer w.rejoining.Store(false)
		ctx, cancel := context.WithTimeout(w.ctx, 5*time.Second)
		defer cancel()
		if err := m.Join(ctx, seed.addr); err != nil {
			if w.ctx.Err() == nil {
				w.log.Debug().Err(err).Str("gossip", seed.addr).Msg("joining the gossip layer again failed")
			}
			return
		}
		w.log.Info().Str("gossip", seed.addr).Msg("joined the gossip layer again: the master was no longer a live member")
	}()
}
