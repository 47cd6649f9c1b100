package registry

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

// Migrate moves every instance of worker from elsewhere (the worker should
// be draining, so nothing new lands on it meanwhile).
func (mv *Moves) Migrate(ctx context.Context, from string) wire.MigrationResult {
	res := wire.MigrationResult{Worker: from, Failed: map[string]string{}}
	mv.r.mu.Lock()
	var iids []string
	for iid, in := range mv.r.instances {
		if in.Worker == from && in.moving == nil {
			iids = append(iids, iid)
		}
	}
	mv.r.mu.Unlock()
	for _, iid := range iids {
		t0 := time.Now()
		to, err := mv.MigrateOne(ctx, from, iid)
		if err != nil {
			res.Failed[iid] = err.Error()
			mv.r.log.Warn().Err(err).Str("instance", iid).Str("worker", from).Msg("migration failed; the instance stays")
			continue
		}
		if to != "" {
			res.Migrated++
			mv.r.log.Info().Str("instance", iid).Str("from", from).Str("to", to).Dur("took", time.Since(t0)).Msg("instance migrated")
		}
	}
	return res
}

// MigrateOne moves one instance; it returns the new worker ("" when there
// was nothing to move).
func (mv *Moves) MigrateOne(ctx context.Context, from, iid string) (string, error) {
	mv.r.mu.Lock()
	in, ok := mv.r.instances[iid]
	src, srcOK := mv.r.workers[from]
	if !ok || in.Worker != from || in.moving != nil || !srcOK || src.ref == nil {
		mv.r.mu.Unlock()
		return "", nil
	}
	oldRef, info := src.ref, in.InstanceInfo
	mv.r.mu.Unlock()
	app, ok := mv.r.apps.App(info.App)
	if !ok {
		return "", nil
	}
	// The target first: the snapshot below holds the browsers' input
	// until the move, which must not happen when there is nowhere to go.
	wid, err := mv.r.bal.Pick()
	if err != nil {
		return "", fmt.Errorf("no other worker: %w", err)
	}
	newRef := mv.r.RefOf(wid)
	if wid == from || newRef == nil {
		mv.r.bal.Release(wid)
		return "", errors.New("no other worker is available")
	}
	// Fresh snapshots of the browsers, from live state (best effort: an
	// older worker has no such method; the periodic ones remain).
	sctx, scancel := context.WithTimeout(ctx, 15*time.Second)
	if err := (contract.WorkerAppsClient{R: oldRef}).SnapshotInstance(sctx, iid); err != nil && !errors.Is(err, rmi.ErrNoMethod) {
		mv.r.log.Warn().Err(err).Str("instance", iid).Msg("snapshot before migration failed; using the last one")
	}
	scancel()
	epoch, err := mv.r.epochs.next()
	if err != nil {
		mv.r.bal.Release(wid)
		mv.resume(ctx, oldRef, iid)
		return "", fmt.Errorf("placement epoch: %w", err)
	}
	// From here on the old worker's writes are refused: the new worker
	// starts from exactly what was acknowledged.
	mv.r.mu.Lock()
	if mv.r.instances[iid] != in || in.moving != nil {
		mv.r.mu.Unlock()
		mv.r.bal.Release(wid)
		return "", nil
	}
	in.Epoch, in.moving, in.migrating = epoch, make(chan struct{}), true
	mv.r.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	req := restoreRequest(app, info, epoch)
	req.WaitBrowsers = true // the old copy serves until the browsers are back
	done := mv.r.Gate.aim(iid, wid)
	err = contract.WorkerAppsClient{R: newRef}.CreateInstance(cctx, req)
	done()
	cancel()
	mv.r.mu.Lock()
	if err != nil {
		mv.r.bal.Release(wid)
		if _, alive := mv.r.workers[from]; !alive && mv.r.instances[iid] == in {
			// Its worker died meanwhile (dead() left it to us): it moves
			// like any orphan; its waiters go on waiting.
			in.migrating = false
			mv.orphanLocked(in)
			mv.r.mu.Unlock()
			mv.kick()
			return "", fmt.Errorf("restore on %s: %w (its worker is gone: placed again)", wid, err)
		}
		// It stays where it was, under its old epoch again, and its users
		// type there again at once.
		in.Epoch = info.Epoch
		mv.settleLocked(in)
		mv.r.mu.Unlock()
		mv.resume(ctx, oldRef, iid)
		return "", fmt.Errorf("restore on %s: %w", wid, err)
	}
	in.Worker, in.Version = wid, app.Version
	mv.r.journal.markLocked(iid)
	mv.settleLocked(in)
	mv.r.mu.Unlock()
	mv.r.placements.Add(1)
	mv.r.bal.Release(from)
	// The old copy's clients reconnect as soon as it is released: the
	// proxies must have dropped its route by then.
	mv.r.inval.acked(ctx, iid)
	rctx, rcancel := context.WithTimeout(ctx, 15*time.Second)
	defer rcancel()
	if err := (contract.WorkerAppsClient{R: oldRef}).ReleaseInstance(rctx, wire.FencedInstance{ID: iid,
		Reason: "This app instance moved to another worker.", Location: "/" + info.App, Moved: true}); err != nil {
		// Its copy is fenced anyway (epoch), and dropped at its next
		// registration.
		mv.r.log.Warn().Err(err).Str("instance", iid).Str("worker", from).Msg("the old worker did not release a migrated instance")
	}
	return wid, nil
}

// Leave is a worker's announcement that it stops (SIGTERM): no more
// placements on it, its instances migrate, and when its connection drops it
// is removed at once instead of after the grace period.
func (mv *Moves) Leave(ctx context.Context, id string) (wire.MigrationResult, error) {
	if mv.stopping.Load() {
		// The whole cluster stops: nowhere to move to.
		return wire.MigrationResult{Worker: id}, nil
	}
	mv.r.mu.Lock()
	w, ok := mv.r.workers[id]
	if ok {
		w.leaving, w.draining = true, true
	}
	mv.r.mu.Unlock()
	if !ok {
		return wire.MigrationResult{}, wire.Err(wire.CodeUnknownWorker, "no worker "+id)
	}
	_ = mv.r.bal.SetDraining(id, true)
	mv.r.publishSlots(id)
	mv.r.log.Info().Str("worker", id).Msg("worker leaving: migrating its instances")
	return mv.Migrate(ctx, id), nil
}

// resume gives back the input the migration's snapshot held on the old
// worker (best effort: an older worker has no such method, and its hold
// ends by itself after the worker's failover.InputHoldMax).
func (mv *Moves) resume(ctx context.Context, ref contract.RefCaller, iid string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := (contract.WorkerAppsClient{R: ref}).ResumeInstance(ctx, iid); err != nil && !errors.Is(err, rmi.ErrNoMethod) {
		mv.r.log.Warn().Err(err).Str("instance", iid).Msg("could not give the held input back after a failed migration")
	}
}
