package master

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

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
func (m *WorkerManager) orphanLocked(in *instanceRec) {
	if in.moving == nil {
		in.moving = make(chan struct{})
	}
	m.orphans[in.ID] = struct{}{}
}

// settleLocked ends an instance's move (placed again, adopted back, or
// given up); waiters go on.
func (m *WorkerManager) settleLocked(in *instanceRec) {
	in.migrating = false
	if in.moving != nil {
		close(in.moving)
		in.moving = nil
	}
	delete(m.orphans, in.ID)
}

// kickMoves starts a round of re-placements unless one runs.
func (m *WorkerManager) kickMoves() {
	m.mu.Lock()
	if len(m.orphans) == 0 || m.moving || m.ctx.Err() != nil {
		m.mu.Unlock()
		return
	}
	m.moving = true
	m.wg.Add(1)
	m.mu.Unlock()
	go func() {
		defer m.wg.Done()
		m.moveOrphans()
	}()
}

// moveOrphans places every orphan again, one at a time, until none is left
// or no worker can take them (a registration starts the next round).
func (m *WorkerManager) moveOrphans() {
	for {
		m.mu.Lock()
		var next string
		for iid := range m.orphans {
			next = iid
			break
		}
		if next == "" || m.ctx.Err() != nil {
			m.moving = false
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
		t0 := time.Now()
		wid, err := m.moveOne(m.ctx, next)
		switch {
		case errors.Is(err, errNoWorkerForMove):
			m.log.Warn().Str("instance", next).Msg("no live worker: the instance waits for one")
			m.mu.Lock()
			m.moving = false
			m.mu.Unlock()
			return
		case err != nil:
			m.log.Warn().Err(err).Str("instance", next).Msg("moving an instance failed; retrying")
			select {
			case <-m.ctx.Done():
			case <-time.After(time.Second):
			}
		default:
			if wid != "" {
				m.log.Info().Str("instance", next).Str("worker", wid).Dur("took", time.Since(t0)).Msg("instance placed again after its worker died")
			}
		}
	}
}

// moveOne places orphan iid on a live worker. It returns the new worker
// ("" if there was nothing to do).
func (m *WorkerManager) moveOne(ctx context.Context, iid string) (string, error) {
	m.mu.Lock()
	in, ok := m.instances[iid]
	if !ok || in.moving == nil || in.migrating {
		// Settled meanwhile, or a live migration holds it (it orphans the
		// instance again if it fails with its worker gone).
		delete(m.orphans, iid)
		m.mu.Unlock()
		return "", nil
	}
	moving, info := in.moving, in.InstanceInfo
	if holder := m.supersededLocked(in); holder != "" {
		m.giveWayLocked(in, holder, time.Now())
		m.mu.Unlock()
		return "", nil
	}
	m.mu.Unlock()
	app, ok := m.apps(info.App)
	if !ok { // the app went away meanwhile: nothing to restore
		m.mu.Lock()
		m.removeInstanceLocked(iid)
		m.lost[iid] = lostRec{app: info.App, at: time.Now()}
		m.settleLocked(in)
		m.mu.Unlock()
		return "", nil
	}
	var wid string
	err := m.firstTaker(func(c candidate) (bool, error) {
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		done := m.aim(iid, c.wid)
		err := c.apps.CreateInstance(cctx, restoreRequest(app, info, c.epoch))
		done()
		cancel()
		if err != nil {
			return true, fmt.Errorf("restore %s on %s: %w", iid, c.wid, err)
		}
		m.mu.Lock()
		_, alive := m.workers[c.wid]
		if !alive || in.moving != moving || m.instances[iid] != in {
			// Its old worker came back and kept it, or the new one died:
			// drop the copy just made.
			m.mu.Unlock()
			m.bal.Release(c.wid)
			if alive {
				dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
				// Under this epoch only: never another live copy.
				_ = c.apps.CloseInstance(dctx, wire.ClosedInstance{ID: iid, Epoch: c.epoch})
				dcancel()
			}
			return false, nil
		}
		in.Worker, in.Epoch, in.Version, in.unconfirmed = c.wid, c.epoch, app.Version, false
		m.markLocked(iid)
		m.settleLocked(in)
		m.mu.Unlock()
		wid = c.wid
		return false, nil
	})
	switch {
	case errors.Is(err, errNoPick):
		return "", errNoWorkerForMove
	case err != nil:
		return "", err
	case wid != "":
		m.placements.Add(1)
		m.invalidate(iid)
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
func (m *WorkerManager) giveWayLocked(in *instanceRec, holder string, now time.Time) {
	m.removeInstanceLocked(in.ID)
	m.lost[in.ID] = lostRec{app: in.App, at: now, mergedInto: holder}
}

// supersededLocked returns the instance that holds in's strategy key if it
// is another one ("" otherwise).
func (m *WorkerManager) supersededLocked(in *instanceRec) string {
	if in.key == "" {
		return ""
	}
	if holder, ok := m.byKey[in.key]; ok && holder != in.ID {
		return holder
	}
	return ""
}
