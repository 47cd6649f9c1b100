package master

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/bundle"
	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/auth"
	"github.com/cloudbrowser-go/cloudbrowser/master/state"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// AppManager is the master's Application Manager: the applications of the
// cluster, pushed to every worker's Application Manager.
type AppManager struct {
	log     zerolog.Logger
	workers func() map[string]*rmi.Ref
	store   *appStore    // nil: nothing persisted (tests)
	state   *state.Store // owners of mount points (nil: none recorded)
	// inlineMax is the most file bytes sent to workers inside RMI frames;
	// larger apps go as archive stubs the workers fetch by chunks (0 =
	// defaultInlineMax).
	inlineMax int64

	deployMu sync.Mutex // serializes changes, not lookups

	mu   sync.RWMutex
	apps map[string]wire.App // by mount point

	packMu sync.Mutex
	packed map[string]packedApp // archive of the current version, large apps only
}

// defaultInlineMax keeps an app's frame well under the RMI frame limit
// (rmi.DefaultMaxFrame, 8 MiB) whatever the encoding overhead.
const defaultInlineMax = 4 << 20

// packedApp is the tar.gz archive of one version of an app.
type packedApp struct {
	version int
	data    []byte
	sum     string // hex SHA-256
}

// PushFailure is a worker that did not take a change.
type PushFailure struct {
	Worker string `json:"worker"`
	Error  string `json:"error"`
}

func newAppManager(log zerolog.Logger, workers func() map[string]*rmi.Ref) *AppManager {
	return &AppManager{log: log.With().Str("component", "apps").Logger(), workers: workers,
		apps: map[string]wire.App{}, packed: map[string]packedApp{}}
}

// Get returns the app mounted at name.
func (a *AppManager) Get(name string) (wire.App, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	app, ok := a.apps[name]
	return app, ok
}

// List returns every app, sorted by mount point.
func (a *AppManager) List() []wire.App {
	a.mu.RLock()
	defer a.mu.RUnlock()
	out := make([]wire.App, 0, len(a.apps))
	for _, app := range a.apps {
		out = append(out, app)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].MountPoint < out[j].MountPoint })
	return out
}

// Add validates and installs (or replaces) an app on behalf of by, then
// pushes it to every connected worker. It returns the installed app and the
// workers that did not take it: the new version stays current on the master
// all the same, and workers that register later get it.
func (a *AppManager) Add(ctx context.Context, app wire.App, by auth.Principal) (wire.App, []PushFailure, error) {
	var b *bundle.Bundle
	if _, ok := app.Files[bundle.ManifestName]; ok {
		var err error
		if b, err = bundle.FromFiles(app.Files); err != nil {
			return wire.App{}, nil, wire.Errorf(wire.CodeInvalid, "%w", err)
		}
		disabled := app.Disabled
		app = b.App()
		app.Disabled = disabled
	} else {
		// An app without a bundle (remote entry only): check its fields.
		m := bundle.Manifest{Name: app.Name, MountPoint: app.MountPoint, Description: app.Description,
			Entry: app.Entry, Strategy: app.Strategy, Public: &app.Public}
		if err := m.Validate(nil); err != nil {
			return wire.App{}, nil, wire.Errorf(wire.CodeInvalid, "%w", err)
		}
		app.Strategy = m.Strategy
	}
	a.deployMu.Lock() // deploys are serialized: versions stay ordered
	defer a.deployMu.Unlock()
	if err := a.authorize(app.MountPoint, by); err != nil {
		return wire.App{}, nil, err
	}
	_, existed := a.Get(app.MountPoint)
	if !existed {
		// Recorded before the app is visible; a stale record of an app
		// whose store write then failed is harmless (authorize ignores
		// owners of mount points that hold no app).
		if err := a.setOwner(app.MountPoint, by.Name); err != nil {
			return wire.App{}, nil, err
		}
	}
	a.mu.Lock()
	if old, ok := a.apps[app.MountPoint]; ok {
		app.Version = old.Version + 1
	} else if app.Version == 0 {
		app.Version = 1
	}
	if a.store != nil && b != nil {
		// Durable before visible: a deploy that was acknowledged survives a crash.
		if err := a.store.save(b, app.Version, app.Disabled); err != nil {
			a.mu.Unlock()
			return wire.App{}, nil, err
		}
	}
	a.apps[app.MountPoint] = app
	a.mu.Unlock()
	if err := a.setDeleted(app.MountPoint, false, by); err != nil {
		// The app is deployed all the same; at worst a restart leaves the
		// start-up set's version of it out.
		a.log.Warn().Err(err).Str("app", app.MountPoint).Msg("deletion record not cleared")
	}
	a.log.Info().Str("app", app.MountPoint).Int("version", app.Version).Str("strategy", app.Strategy).Str("by", by.Name).Msg("application added")
	return app, a.pushApp(ctx, app), nil
}

// pushApp sends an app (inline or as an archive stub) to every worker.
func (a *AppManager) pushApp(ctx context.Context, app wire.App) []PushFailure {
	out, err := a.forWorkers(app, nil)
	if err != nil {
		failed := []PushFailure{}
		for id := range a.workers() {
			failed = append(failed, PushFailure{Worker: id, Error: err.Error()})
		}
		return failed
	}
	// Fetching a large archive takes longer than an ordinary call.
	timeout := pushTimeout + time.Duration(out.ArchiveSize>>20)*2*time.Second
	return a.pushWithin(ctx, timeout, "AddApplication", func(ctx context.Context, w contract.WorkerApps) error {
		return w.AddApplication(ctx, out)
	})
}

// forWorkers is app as sent to workers: with its files, or, when they are
// larger than what is left of *budget (nil: inlineMax), as a stub whose
// archive the worker fetches by chunks.
func (a *AppManager) forWorkers(app wire.App, budget *int64) (wire.App, error) {
	left := a.inlineMax
	config.OrDefault(&left, defaultInlineMax)
	if budget != nil {
		left = *budget
	}
	var n int64
	for _, f := range app.Files {
		n += int64(len(f))
	}
	if n <= left {
		if budget != nil {
			*budget -= n
		}
		return app, nil
	}
	p, err := a.archive(app)
	if err != nil {
		return wire.App{}, err
	}
	app.Files = nil
	app.ArchiveSize, app.ArchiveSum = int64(len(p.data)), p.sum
	return app, nil
}

// listForWorkers is every app as sent in a registration reply: inline until
// the frame budget is used up, stubs after.
func (a *AppManager) listForWorkers() []wire.App {
	budget := a.inlineMax
	config.OrDefault(&budget, defaultInlineMax)
	var out []wire.App
	for _, app := range a.List() {
		w, err := a.forWorkers(app, &budget)
		if err != nil {
			a.log.Error().Str("app", app.MountPoint).Err(err).Msg("cannot pack application for workers; left out")
			continue
		}
		out = append(out, w)
	}
	return out
}

// archive packs (once per version) the tar.gz archive of app.
func (a *AppManager) archive(app wire.App) (packedApp, error) {
	a.packMu.Lock()
	defer a.packMu.Unlock()
	if p, ok := a.packed[app.MountPoint]; ok && p.version == app.Version {
		return p, nil
	}
	data, err := (&bundle.Bundle{Files: app.Files}).Pack()
	if err != nil {
		return packedApp{}, fmt.Errorf("pack /%s: %w", app.MountPoint, err)
	}
	sum := sha256.Sum256(data)
	p := packedApp{version: app.Version, data: data, sum: hex.EncodeToString(sum[:])}
	a.packed[app.MountPoint] = p
	return p, nil
}

// chunk is up to wire.BundleChunkSize bytes at offset of the archive of
// version of the app at mount.
func (a *AppManager) chunk(mount string, version int, offset int64) ([]byte, error) {
	app, ok := a.Get(mount)
	if !ok {
		return nil, wire.Err(wire.CodeUnknownApp, "no application is mounted at /"+mount)
	}
	if app.Version != version {
		return nil, wire.Errorf(wire.CodeInvalid, "version %d of /%s is no longer current (now %d)", version, mount, app.Version)
	}
	p, err := a.archive(app)
	if err != nil {
		return nil, err
	}
	if offset < 0 || offset > int64(len(p.data)) {
		return nil, wire.Errorf(wire.CodeInvalid, "offset %d outside the %d byte archive of /%s", offset, len(p.data), mount)
	}
	return p.data[offset:min(offset+wire.BundleChunkSize, int64(len(p.data)))], nil
}

// SetDisabled disables or enables an app. A disabled app keeps its
// instances running but gets no new ones.
func (a *AppManager) SetDisabled(ctx context.Context, name string, disabled bool, by auth.Principal) error {
	a.deployMu.Lock()
	defer a.deployMu.Unlock()
	app, ok := a.Get(name)
	if !ok {
		return wire.Err(wire.CodeUnknownApp, "no application is mounted at /"+name)
	}
	if err := a.authorize(name, by); err != nil {
		return err
	}
	if a.store != nil && app.Files != nil {
		if err := a.store.setState(name, storeState{Version: app.Version, Disabled: disabled}); err != nil {
			return err
		}
	}
	app.Disabled = disabled
	a.mu.Lock()
	a.apps[name] = app
	a.mu.Unlock()
	a.log.Info().Str("app", name).Bool("disabled", disabled).Str("by", by.Name).Msg("application state changed")
	a.pushApp(ctx, app)
	return nil
}

// loadStored installs the apps of the store (at start, before workers).
func (a *AppManager) loadStored() error {
	if a.store == nil {
		return nil
	}
	apps, err := a.store.load()
	a.mu.Lock()
	for _, app := range apps {
		a.apps[app.MountPoint] = app
	}
	a.mu.Unlock()
	return err
}

// Remove uninstalls an app everywhere.
func (a *AppManager) Remove(ctx context.Context, name string, by auth.Principal) error {
	a.deployMu.Lock()
	defer a.deployMu.Unlock()
	if _, ok := a.Get(name); !ok {
		return wire.Err(wire.CodeUnknownApp, "no application is mounted at /"+name)
	}
	if err := a.authorize(name, by); err != nil {
		return err
	}
	// Recorded first: a deletion that was acknowledged is not undone by
	// the start-up set (--apps) at the next start.
	if err := a.setDeleted(name, true, by); err != nil {
		return err
	}
	a.mu.Lock()
	delete(a.apps, name)
	var err error
	if a.store != nil {
		err = a.store.remove(name)
	}
	a.mu.Unlock()
	a.packMu.Lock()
	delete(a.packed, name)
	a.packMu.Unlock()
	if err != nil {
		return err
	}
	if err := a.setOwner(name, ""); err != nil {
		a.log.Warn().Str("app", name).Err(err).Msg("owner record not removed")
	}
	a.log.Info().Str("app", name).Str("by", by.Name).Msg("application removed")
	a.push(ctx, "RemoveApplication", func(ctx context.Context, w contract.WorkerApps) error {
		return w.RemoveApplication(ctx, name)
	})
	return nil
}

// deletedAppsBucket holds the mount points an admin or author deleted, so
// the start-up set (--apps) does not deploy them again; an explicit deploy
// of the mount point clears its record.
const deletedAppsBucket = "deleted-apps"

// deletedApp is one deletion.
type deletedApp struct {
	At time.Time `json:"at"`
	By string    `json:"by"`
}

// setDeleted records (on) or clears the deletion of mount.
func (a *AppManager) setDeleted(mount string, on bool, by auth.Principal) error {
	if a.state == nil {
		return nil
	}
	if !on {
		return a.state.Delete(deletedAppsBucket, mount)
	}
	return a.state.Put(deletedAppsBucket, mount, deletedApp{At: time.Now().UTC(), By: by.Name})
}

// deleted reports whether mount was deleted and not deployed since.
func (a *AppManager) deleted(mount string) bool {
	if a.state == nil {
		return false
	}
	return a.state.Has(deletedAppsBucket, mount)
}

// pushTimeout bounds one ordinary call to a worker.
const pushTimeout = 10 * time.Second

// push makes call (named what, for logs) on every worker in parallel and
// returns the workers that failed (sorted); failures are logged too. A
// worker that missed an update gets the full list when it re-registers.
func (a *AppManager) push(ctx context.Context, what string, call func(context.Context, contract.WorkerApps) error) []PushFailure {
	return a.pushWithin(ctx, pushTimeout, what, call)
}

func (a *AppManager) pushWithin(ctx context.Context, timeout time.Duration, what string, call func(context.Context, contract.WorkerApps) error) []PushFailure {
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed []PushFailure
	)
	for id, ref := range a.workers() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			if err := call(cctx, contract.WorkerAppsClient{R: ref}); err != nil {
				a.log.Warn().Str("worker", id).Str("method", what).Err(err).Msg("push to worker failed")
				mu.Lock()
				failed = append(failed, PushFailure{Worker: id, Error: err.Error()})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	sort.Slice(failed, func(i, j int) bool { return failed[i].Worker < failed[j].Worker })
	return failed
}
