package registry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/ids"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
	"golang.org/x/sync/singleflight"
)

// Placer places new instances: it finds or creates the one an app's
// strategy gives a user, with the balancer's pick, under a new epoch and
// within the instance quotas.
type Placer struct {
	r  *Registry
	sf singleflight.Group
}

// Place finds or creates the instance the app's strategy gives this user
// and, unless req.NoBrowser, opens the user's browser in it on the hosting
// worker, so the user can be redirected straight to a Browser URL (the
// paper's flow).
func (pl *Placer) Place(ctx context.Context, req wire.PlaceRequest) (p wire.Placement, err error) {
	if pl.r.observe != nil {
		defer func() {
			strategy := "unknown"
			if app, ok := pl.r.apps.App(req.App); ok {
				strategy = app.Strategy
			}
			outcome := "existing"
			switch {
			case err != nil:
				outcome = "failed"
			case p.Created:
				outcome = "created"
			}
			pl.r.observe.Placed(strategy, outcome)
		}()
	}
	for {
		p, err = pl.placeInstance(ctx, req)
		if err != nil || req.NoBrowser {
			return p, err
		}
		p.BrowserID, err = pl.openBrowser(ctx, p, req)
		if err == nil || ctx.Err() != nil || !pl.movedSince(p.InstanceID, p.WorkerID) {
			return p, err
		}
		// Its worker was declared dead while we asked it (a stall, a cut):
		// the instance is being placed again; wait for it and ask there,
		// rather than failing the user's request.
		pl.r.log.Info().Str("instance", p.InstanceID).Str("worker", p.WorkerID).Msg("placement: the instance's worker went away; waiting for its new home")
	}
}

// openBrowser opens req's user's browser in placement p on its worker.
func (pl *Placer) openBrowser(ctx context.Context, p wire.Placement, req wire.PlaceRequest) (string, error) {
	ref := pl.r.RefOf(p.WorkerID)
	if ref == nil {
		return "", wire.Err(wire.CodeNoWorkers, "worker "+p.WorkerID+" is not connected")
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	bid, err := contract.WorkerAppsClient{R: ref}.OpenBrowserFor(cctx, wire.OpenBrowser{InstanceID: p.InstanceID, User: req.User, ClientIP: req.ClientIP})
	var re *rmi.RemoteError
	if errors.As(err, &re) && re.Code == wire.CodeQuota {
		return "", err // the worker's words are for the user
	}
	if err != nil {
		return "", fmt.Errorf("open browser in %s: %w", p.InstanceID, err)
	}
	return bid, nil
}

// movedSince: instance iid is no longer simply on worker wid (it is moving,
// or lives elsewhere now).
func (pl *Placer) movedSince(iid, wid string) bool {
	pl.r.mu.Lock()
	defer pl.r.mu.Unlock()
	in, ok := pl.r.instances[iid]
	return ok && (in.Worker != wid || in.moving != nil)
}

// placeInstance finds or creates the instance. Concurrent requests for the
// same strategy key share one creation.
func (pl *Placer) placeInstance(ctx context.Context, req wire.PlaceRequest) (wire.Placement, error) {
	app, ok := pl.r.apps.App(req.App)
	if !ok {
		return wire.Placement{}, wire.Err(wire.CodeUnknownApp, "no application is mounted at /"+req.App)
	}
	if app.Disabled {
		return wire.Placement{}, wire.Err(wire.CodeAppDisabled, "application /"+req.App+" is disabled")
	}
	key := strategyKey(app, req.User)
	if key == "" || req.New {
		return pl.create(ctx, app, req.User, req.ClientIP, req.RequestID)
	}
	if p, ok, err := pl.existing(ctx, key); ok || err != nil {
		return p, err
	}
	ch := pl.sf.DoChan(key, func() (any, error) {
		// Detached: the creation serves every waiter, not just the first.
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if p, ok, err := pl.existing(cctx, key); ok || err != nil {
			return p, err
		}
		return pl.create(cctx, app, req.User, req.ClientIP, req.RequestID)
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return wire.Placement{}, r.Err
		}
		p := r.Val.(wire.Placement)
		if r.Shared {
			p.Created = false // only one waiter created it
		}
		return p, nil
	case <-ctx.Done():
		return wire.Placement{}, ctx.Err()
	}
}

// HolderWait bounds how long a placement waits for the instance holding
// its strategy key to be reachable again (a variable for tests).
var HolderWait = 30 * time.Second

// existing returns the instance that holds key (ok false: none does). An
// instance whose worker is unreachable, or which is moving, is waited for
// and never replaced: a second instance for the key would split its users,
// and when the first came back one of the two would have to give way with
// the writes its users saw acknowledged. If it does not become reachable
// within HolderWait (or ctx), the answer is "instance moving" (503, retry).
func (pl *Placer) existing(ctx context.Context, key string) (wire.Placement, bool, error) {
	ctx, cancel := clock.WithTimeout(ctx, pl.r.clk, HolderWait)
	defer cancel()
	for {
		pl.r.mu.Lock()
		iid, ok := pl.r.byKey[key]
		if !ok {
			pl.r.mu.Unlock()
			return wire.Placement{}, false, nil
		}
		in := pl.r.instances[iid]
		w, wok := pl.r.workers[in.Worker]
		var wait <-chan struct{}
		switch {
		case in.moving != nil:
			wait = in.moving // its worker died: it is being placed again
		case wok && w.state == stateConnected:
			pl.r.mu.Unlock()
			return wire.Placement{InstanceID: iid, WorkerID: in.Worker}, true, nil
		case wok && w.back != nil:
			wait = w.back // disconnected: back, or declared dead (then moving)
		}
		pl.r.mu.Unlock()
		if wait == nil {
			return wire.Placement{}, false, holderUnreachable(iid)
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return wire.Placement{}, false, holderUnreachable(iid)
		}
	}
}

func holderUnreachable(iid string) error {
	return wire.Err(wire.CodeInstanceMoving, "app instance "+iid+" is on a worker that does not answer right now, or is moving to another one; try again in a moment")
}

// create places a new instance on the balancer's pick, trying another worker
// if the first fails to create it. The owner's and the client address's
// instance quotas are checked (and a place reserved) first.
func (pl *Placer) create(ctx context.Context, app wire.App, owner, clientIP, requestID string) (p wire.Placement, err error) {
	var qUser, qIP string
	if countsForQuota(app, true) {
		if qUser, qIP, err = pl.r.quota.reserve(owner, clientIP); err != nil {
			pl.r.log.Info().Str("request_id", requestID).Str("app", app.MountPoint).Str("owner", owner).Str("client_ip", clientIP).
				Err(err).Msg("instance refused: quota")
			return wire.Placement{}, err
		}
		defer func() {
			if err != nil {
				pl.r.quota.release(qUser, qIP)
			}
		}()
	}
	err = pl.firstTaker(func(c candidate) (bool, error) {
		iid := ids.NewInstance(c.wid)
		defer pl.r.Gate.aim(iid, c.wid)()
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err := c.apps.CreateInstance(cctx, wire.CreateInstance{App: app, InstanceID: iid, Owner: owner, ClientIP: clientIP, Epoch: c.epoch})
		cancel()
		if err != nil {
			pl.r.log.Warn().Str("worker", c.wid).Str("app", app.MountPoint).Err(err).Msg("instance creation failed")
			return ctx.Err() == nil, fmt.Errorf("create instance of %s on %s: %w", app.MountPoint, c.wid, err)
		}
		pl.r.mu.Lock()
		defer pl.r.mu.Unlock()
		if _, still := pl.r.workers[c.wid]; !still {
			return true, wire.Err(wire.CodeNoWorkers, "worker "+c.wid+" died while creating the instance")
		}
		pl.r.addInstanceLocked(wire.InstanceInfo{ID: iid, App: app.MountPoint, Version: app.Version, Owner: owner, Worker: c.wid,
			Created: pl.r.clk.Now(), ClientIP: clientIP, Epoch: c.epoch}, qUser, qIP, true)
		p = wire.Placement{InstanceID: iid, WorkerID: c.wid, Created: true}
		return false, nil
	})
	if errors.Is(err, errNoPick) {
		return wire.Placement{}, pl.r.noWorkers("no worker is available to host " + app.MountPoint)
	}
	if err != nil {
		return wire.Placement{}, err
	}
	if err := pl.r.journal.sync(ctx); err != nil {
		// The instance exists and its worker reports it at a master
		// restart; only a double fault before the write would lose it.
		pl.r.log.Error().Err(err).Str("instance", p.InstanceID).Msg("new instance not yet in the stored table")
	}
	pl.r.placements.Add(1)
	pl.r.log.Info().Str("request_id", requestID).Str("instance", p.InstanceID).Str("app", app.MountPoint).Str("worker", p.WorkerID).Str("owner", owner).Msg("instance placed")
	return p, nil
}

// candidate is a worker the balancer picked for a placement: its
// Application Manager and the placement's new epoch.
type candidate struct {
	wid   string
	apps  contract.WorkerAppsClient
	epoch uint64
}

// errNoPick: the balancer had no (other) connected worker to offer.
var errNoPick = errors.New("no worker to pick")

// firstTaker offers up to three distinct connected workers, as the
// balancer picks them, each with a new epoch, to try in turn until one
// takes the placement (try returns nil; its pick is kept). A failed try's
// pick is released; retry says whether the next worker is tried. It
// returns errNoPick if no worker was tried, else the last try's error.
func (pl *Placer) firstTaker(try func(c candidate) (retry bool, err error)) error {
	tried := map[string]bool{}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		wid, err := pl.r.bal.Pick()
		if err != nil || tried[wid] {
			if err == nil {
				pl.r.bal.Release(wid)
			}
			break
		}
		tried[wid] = true
		ref := pl.r.RefOf(wid)
		if ref == nil {
			pl.r.bal.Release(wid)
			continue
		}
		epoch, err := pl.r.epochs.next()
		if err != nil {
			pl.r.bal.Release(wid)
			return fmt.Errorf("placement epoch: %w", err)
		}
		retry, err := try(candidate{wid: wid, apps: contract.WorkerAppsClient{R: ref}, epoch: epoch})
		if err == nil {
			return nil
		}
		pl.r.bal.Release(wid)
		lastErr = err
		if !retry {
			break
		}
	}
	if lastErr == nil {
		return errNoPick
	}
	return lastErr
}
