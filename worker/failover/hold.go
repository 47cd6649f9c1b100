package failover

import (
	"context"
	"iter"
	"time"
)

// Holding input for a migration (engine/hold.go says what the clients are
// told and do): the hold is the browser's input gate, BrowserState.inMu,
// which the hub's input passes (BrowserState.Input).

// Input runs take under the read lock of the input gate, held telling
// whether a migration holds the input: a hold takes the write lock, so
// once it is on no input reaches the page.
func (s *BrowserState) Input(take func(held bool)) {
	s.inMu.RLock()
	defer s.inMu.RUnlock()
	take(s.held)
}

// InputHeld reports whether a migration holds the input.
func (s *BrowserState) InputHeld() bool {
	s.inMu.RLock()
	defer s.inMu.RUnlock()
	return s.held
}

// HoldAndSave saves fresh snapshots of browsers from live state, before
// a migration. Each browser's input is held first (for at most
// InputHoldMax), so the snapshot has everything its page took, and what
// the users type from then on reaches the copy the instance moves to
// instead of this one.
func (sn *Snapshots) HoldAndSave(ctx context.Context, browsers iter.Seq[Subject]) error {
	if sn == nil {
		return nil
	}
	for b := range browsers {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		sn.hold(b, InputHoldMax)
		sn.save(b)
	}
	return nil
}

// Resume ends the input holds of browsers at once: the master could not
// move them (the restore failed), so their users type here again instead
// of waiting out InputHoldMax.
func (sn *Snapshots) Resume(browsers iter.Seq[Subject]) {
	if sn == nil {
		return
	}
	for b := range browsers {
		s := b.Snap()
		s.inMu.RLock()
		gen := s.holdGen
		s.inMu.RUnlock()
		sn.resume(b, gen)
	}
}

// hold holds b's input for at most d. When it returns, no input is being
// dispatched to the page and none will be until the hold ends.
func (sn *Snapshots) hold(b Subject, d time.Duration) {
	s := b.Snap()
	s.inMu.Lock()
	s.held = true
	s.holdGen++
	gen := s.holdGen
	s.inMu.Unlock()
	if c := b.Clients(); c != nil {
		c.AnnounceHold()
	}
	sn.clock.AfterFunc(d, func() { sn.resume(b, gen) })
}

// resume ends hold gen of b, if it is still on.
func (sn *Snapshots) resume(b Subject, gen uint64) {
	s := b.Snap()
	s.inMu.Lock()
	if !s.held || s.holdGen != gen {
		s.inMu.Unlock()
		return
	}
	s.held = false
	s.inMu.Unlock()
	if c := b.Clients(); c != nil && !c.Closed() { // not moved after all
		info := b.Describe()
		sn.log.Warn().Str("instance", info.Instance).Str("browser", info.ID).Msg("input held for a migration that did not happen: taken here again")
		c.AnnounceResume()
	}
}
