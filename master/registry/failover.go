package registry

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// Moves places the instances of dead workers again (failover) and
// migrates live ones off draining or leaving workers. Its state is guarded
// by the registry's lock.
type Moves struct {
	r *Registry
	// orphans are instances of dead workers waiting to be placed again;
	// moving is set while a round of re-placements runs.
	orphans map[string]struct{}
	moving  bool
	// stopping: the cluster is shutting down; leaving workers keep their
	// instances (there is nowhere to move them).
	stopping atomic.Bool
}

// BeginShutdown tells the registry the whole cluster is stopping: workers
// that leave now keep their instances.
func (mv *Moves) BeginShutdown() { mv.stopping.Store(true) }

// Failover. When a worker is declared dead its instances stay in the table,
// marked as moving, and are placed again on live workers under the same id
// and a new epoch (CreateInstance with Restore): the new worker restores
// the shared state the master stored and the browsers from their last
// snapshots. Routing follows the table, so the old App-instance and Browser
// URLs keep working; while an instance moves they answer 503 (retry), and
// with no live worker they wait until one registers. If the dead worker
// comes back before its instances found a new home, it simply keeps them.

// errNoWorkerForMove stops a round of re-placements: nothing can host them.
var errNoWorkerForMove = errors.New("no live worker to move instances to")

// orphanLocked marks an instance of a dead worker as moving.
func (mv *Moves) orphanLocked(in *instanceRec) {
	if in.moving == nil {
		in.moving = make(chan struct{})
	}
	mv.orphans[in.ID] = struct{}{}
}

// settleLocked ends an instance's move (placed again, adopted back, or
// given up); waiters go on.
func (mv *Moves) settleLocked(in *instanceRec) {
	in.migrating = false
	if in.moving != nil {
		close(in.moving)
		in.moving = nil
	}
	delete(mv.orphans, in.ID)
}

// kick starts a round of re-placements unless one runs.
func (mv *Moves) kick() {
	mv.r.mu.Lock()
	if len(mv.orphans) == 0 || mv.moving || mv.r.ctx.Err() != nil {
		mv.r.mu.Unlock()
		return
	}
	mv.moving = true
	mv.r.wg.Add(1)
	mv.r.mu.Unlock()
	go func() {
		defer mv.r.wg.Done()
		mv.moveOrphans()
	}()
}

// moveOrphans places every orphan again, one at a time, until none is left
// or no worker can take them (a registration starts the next round).
func (mv *Moves) moveOrphans() {
	for {
		mv.r.mu.Lock()
		var next string
		for iid := range mv.orphans {
			next = iid
			break
		}
		if next == "" || mv.r.ctx.Err() != nil {
			mv.moving = false
			mv.r.mu.Unlock()
			return
		}
		mv.r.mu.Unlock()
		t0 := time.Now()
		wid, err := mv.moveOne(mv.r.ctx, next)
		switch {
		case errors.Is(err, errNoWorkerForMove):
			mv.r.log.Warn().Str("instance", next).Msg("no live worker: the instance waits for one")
			mv.r.mu.Lock()
			mv.moving = false
			mv.r.mu.Unlock()
			return
		case err != nil:
			mv.r.log.Warn().Err(err).Str("instance", next).Msg("moving an instance failed; retrying")
			retry := clock.NewTimer(mv.r.clk, time.Second)
			select {
			case <-mv.r.ctx.Done():
			case <-retry.C:
			}
			retry.Stop()
		default:
			if wid != "" {
				mv.r.log.Info().Str("instance", next).Str("worker", wid).Dur("took", time.Since(t0)).Msg("instance placed again after its worker died")
			}
		}
	}
}

// moveOne places orphan iid on a live worker. It returns the new worker
// ("" if there was nothing to do).
func (mv *Moves) moveOne(ctx context.Context, iid string) (string, error) {
	mv.r.mu.Lock()
	in, ok := mv.r.instances[iid]
	if !ok || in.moving == nil || in.migrating {
		// Settled meanwhile, or a live migration holds it (it orphans the
		// instance again if it fails with its worker gone).
		delete(mv.orphans, iid)
		mv.r.mu.Unlock()
		return "", nil
	}
	moving, info := in.moving, in.InstanceInfo
	if holder := mv.supersededLocked(in); holder != "" {
		mv.giveWayLocked(in, holder, mv.r.clk.Now())
		mv.r.mu.Unlock()
		return "", nil
	}
	mv.r.mu.Unlock()
	app, ok := mv.r.apps.App(info.App)
	if !ok { // the app went away meanwhile: nothing to restore
		mv.r.mu.Lock()
		mv.r.removeInstanceLocked(iid)
		mv.r.lost[iid] = lostRec{app: info.App, at: mv.r.clk.Now()}
		mv.settleLocked(in)
		mv.r.mu.Unlock()
		return "", nil
	}
	var wid string
	err := mv.r.Placer.firstTaker(func(c candidate) (bool, error) {
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		done := mv.r.Gate.aim(iid, c.wid)
		err := c.apps.CreateInstance(cctx, restoreRequest(app, info, c.epoch))
		done()
		cancel()
		if err != nil {
			return true, fmt.Errorf("restore %s on %s: %w", iid, c.wid, err)
		}
		mv.r.mu.Lock()
		_, alive := mv.r.workers[c.wid]
		if !alive || in.moving != moving || mv.r.instances[iid] != in {
			// Its old worker came back and kept it, or the new one died:
			// drop the copy just made.
			mv.r.mu.Unlock()
			mv.r.bal.Release(c.wid)
			if alive {
				dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
				// Under this epoch only: never another live copy.
				_ = c.apps.CloseInstance(dctx, wire.ClosedInstance{ID: iid, Epoch: c.epoch})
				dcancel()
			}
			return false, nil
		}
		in.Worker, in.Epoch, in.Version, in.unconfirmed = c.wid, c.epoch, app.Version, false
		mv.r.journal.markLocked(iid)
		mv.settleLocked(in)
		mv.r.mu.Unlock()
		wid = c.wid
		return false, nil
	})
	switch {
	case errors.Is(err, errNoPick):
		return "", errNoWorkerForMove
	case err != nil:
		return "", err
	case wid != "":
		mv.r.placements.Add(1)
		mv.r.inval.instances(iid)
	}
	return wid, nil
}

// restoreRequest places instance info again under epoch, from the state
// and browser snapshots the master keeps.
func restoreRequest(app wire.App, info wire.InstanceInfo, epoch uint64) wire.CreateInstance {
	return wire.CreateInstance{App: app, InstanceID: info.ID, Owner: info.Owner, ClientIP: info.ClientIP,
		Epoch: epoch, Restore: true, Created: info.Created, Name: info.Name}
}

// giveWayLocked closes an instance in favour of holder, the one that took
// its strategy key: its URLs say so (410 replaced). Its stored state is
// kept (the admin API shows it): what its users saw acknowledged is never
// deleted by the cluster on its own.
func (mv *Moves) giveWayLocked(in *instanceRec, holder string, now time.Time) {
	mv.r.removeInstanceLocked(in.ID)
	mv.r.lost[in.ID] = lostRec{app: in.App, at: now, mergedInto: holder}
}

// supersededLocked returns the instance that holds in's strategy key if it
// is another one ("" otherwise).
func (mv *Moves) supersededLocked(in *instanceRec) string {
	if in.key == "" {
		return ""
	}
	if holder, ok := mv.r.byKey[in.key]; ok && holder != in.ID {
		return holder
	}
	return ""
}
