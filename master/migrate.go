package master

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// Live migration: on a drain with migration, or when a worker leaves on
// SIGTERM, each of its instances moves to another worker from live state.
// The old worker snapshots its browsers; the master gives the instance a
// new epoch (from then on the old worker's writes are refused, so nothing
// acknowledged can be lost), the new worker restores it, routing switches,
// and the old worker releases it, sending its clients on to the same URLs
// ({"t":"moved"}), which they reconnect to at once.

// migrate moves every instance of worker from elsewhere (the worker should
// be draining, so nothing new lands on it meanwhile).
func (m *WorkerManager) migrate(ctx context.Context, from string) wire.MigrationResult {
	res := wire.MigrationResult{Worker: from, Failed: map[string]string{}}
	m.mu.Lock()
	var iids []string
	for iid, in := range m.instances {
		if in.Worker == from && in.moving == nil {
			iids = append(iids, iid)
		}
	}
	m.mu.Unlock()
	for _, iid := range iids {
		t0 := time.Now()
		to, err := m.migrateOne(ctx, from, iid)
		if err != nil {
			res.Failed[iid] = err.Error()
			m.log.Warn().Err(err).Str("instance", iid).Str("worker", from).Msg("migration failed; the instance stays")
			continue
		}
		if to != "" {
			res.Migrated++
			m.log.Info().Str("instance", iid).Str("from", from).Str("to", to).Dur("took", time.Since(t0)).Msg("instance migrated")
		}
	}
	return res
}

// migrateOne moves one instance; it returns the new worker ("" when there
// was nothing to move).
func (m *WorkerManager) migrateOne(ctx context.Context, from, iid string) (string, error) {
	m.mu.Lock()
	in, ok := m.instances[iid]
	src, srcOK := m.workers[from]
	if !ok || in.Worker != from || in.moving != nil || !srcOK || src.ref == nil {
		m.mu.Unlock()
		return "", nil
	}
	oldRef, info := src.ref, in.InstanceInfo
	m.mu.Unlock()
	app, ok := m.apps(info.App)
	if !ok {
		return "", nil
	}
	// The target first: the snapshot below holds the browsers' input
	// until the move, which must not happen when there is nowhere to go.
	wid, err := m.bal.Pick()
	if err != nil {
		return "", fmt.Errorf("no other worker: %w", err)
	}
	newRef := m.refOf(wid)
	if wid == from || newRef == nil {
		m.bal.Release(wid)
		return "", errors.New("no other worker is available")
	}
	// Fresh snapshots of the browsers, from live state (best effort: an
	// older worker has no such method; the periodic ones remain).
	sctx, scancel := context.WithTimeout(ctx, 15*time.Second)
	if err := (contract.WorkerAppsClient{R: oldRef}).SnapshotInstance(sctx, iid); err != nil && !errors.Is(err, rmi.ErrNoMethod) {
		m.log.Warn().Err(err).Str("instance", iid).Msg("snapshot before migration failed; using the last one")
	}
	scancel()
	epoch, err := m.epochs.next()
	if err != nil {
		m.bal.Release(wid)
		m.resume(ctx, oldRef, iid)
		return "", fmt.Errorf("placement epoch: %w", err)
	}
	// From here on the old worker's writes are refused: the new worker
	// starts from exactly what was acknowledged.
	m.mu.Lock()
	if m.instances[iid] != in || in.moving != nil {
		m.mu.Unlock()
		m.bal.Release(wid)
		return "", nil
	}
	in.Epoch, in.moving, in.migrating = epoch, make(chan struct{}), true
	m.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	req := restoreRequest(app, info, epoch)
	req.WaitBrowsers = true // the old copy serves until the browsers are back
	done := m.aim(iid, wid)
	err = contract.WorkerAppsClient{R: newRef}.CreateInstance(cctx, req)
	done()
	cancel()
	m.mu.Lock()
	if err != nil {
		m.bal.Release(wid)
		if _, alive := m.workers[from]; !alive && m.instances[iid] == in {
			// Its worker died meanwhile (dead() left it to us): it moves
			// like any orphan; its waiters go on waiting.
			in.migrating = false
			m.orphanLocked(in)
			m.mu.Unlock()
			m.kickMoves()
			return "", fmt.Errorf("restore on %s: %w (its worker is gone: placed again)", wid, err)
		}
		// It stays where it was, under its old epoch again, and its users
		// type there again at once.
		in.Epoch = info.Epoch
		m.settleLocked(in)
		m.mu.Unlock()
		m.resume(ctx, oldRef, iid)
		return "", fmt.Errorf("restore on %s: %w", wid, err)
	}
	in.Worker, in.Version = wid, app.Version
	m.markLocked(iid)
	m.settleLocked(in)
	m.mu.Unlock()
	m.placements.Add(1)
	m.bal.Release(from)
	// The old copy's clients reconnect as soon as it is released: the
	// proxies must have dropped its route by then.
	m.invalidateAcked(ctx, iid)
	rctx, rcancel := context.WithTimeout(ctx, 15*time.Second)
	defer rcancel()
	if err := (contract.WorkerAppsClient{R: oldRef}).ReleaseInstance(rctx, wire.FencedInstance{ID: iid,
		Reason: "This app instance moved to another worker.", Location: "/" + info.App, Moved: true}); err != nil {
		// Its copy is fenced anyway (epoch), and dropped at its next
		// registration.
		m.log.Warn().Err(err).Str("instance", iid).Str("worker", from).Msg("the old worker did not release a migrated instance")
	}
	return wid, nil
}

// leave is a worker's announcement that it stops (SIGTERM): no more
// placements on it, its instances migrate, and when its connection drops it
// is removed at once instead of after the grace period.
func (m *WorkerManager) leave(ctx context.Context, id string) (wire.MigrationResult, error) {
	if m.stopping.Load() {
		// The whole cluster stops: nowhere to move to.
		return wire.MigrationResult{Worker: id}, nil
	}
	m.mu.Lock()
	w, ok := m.workers[id]
	if ok {
		w.leaving, w.draining = true, true
	}
	m.mu.Unlock()
	if !ok {
		return wire.MigrationResult{}, wire.Err(wire.CodeUnknownWorker, "no worker "+id)
	}
	_ = m.bal.SetDraining(id, true)
	m.publishSlots(id)
	m.log.Info().Str("worker", id).Msg("worker leaving: migrating its instances")
	return m.migrate(ctx, id), nil
}

// callerIs refuses a call whose arguments name worker id when it was not
// made over id's connection.
func (m *WorkerManager) callerIs(c *rmi.Conn, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.connIsLocked(id, c) {
		return wire.Errorf(wire.CodeForbidden, "the call names worker %q, but the connection (peer %q) is not its registration", id, peerName(c))
	}
	return nil
}

// resume gives back the input the migration's snapshot held on the old
// worker (best effort: an older worker has no such method, and its hold
// ends by itself after inputHoldMax).
func (m *WorkerManager) resume(ctx context.Context, ref contract.RefCaller, iid string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := (contract.WorkerAppsClient{R: ref}).ResumeInstance(ctx, iid); err != nil && !errors.Is(err, rmi.ErrNoMethod) {
		m.log.Warn().Err(err).Str("instance", iid).Msg("could not give the held input back after a failed migration")
	}
}
