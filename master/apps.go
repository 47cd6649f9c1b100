package master

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/bundle"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// AppManager is the master's Application Manager: the applications of the
// cluster, pushed to every worker's Application Manager.
type AppManager struct {
	log     zerolog.Logger
	workers func() map[string]*rmi.Ref
	store   *appStore // nil: nothing persisted (tests)

	deployMu sync.Mutex // serializes changes, not lookups

	mu   sync.RWMutex
	apps map[string]wire.App // by mount point
}

func newAppManager(log zerolog.Logger, workers func() map[string]*rmi.Ref) *AppManager {
	return &AppManager{log: log.With().Str("component", "apps").Logger(), workers: workers, apps: map[string]wire.App{}}
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

// Add validates and installs (or replaces) an app, then pushes it to every
// connected worker. Workers that join later get it with their registration.
func (a *AppManager) Add(ctx context.Context, app wire.App) error {
	var b *bundle.Bundle
	if _, ok := app.Files[bundle.ManifestName]; ok {
		var err error
		if b, err = bundle.FromFiles(app.Files); err != nil {
			return wire.Errorf(wire.CodeInvalid, err.Error())
		}
		disabled := app.Disabled
		app = b.App()
		app.Disabled = disabled
	} else {
		// An app without a bundle (remote entry only): check its fields.
		m := bundle.Manifest{Name: app.Name, MountPoint: app.MountPoint, Description: app.Description,
			Entry: app.Entry, Strategy: app.Strategy, Public: &app.Public}
		if err := m.Validate(nil); err != nil {
			return wire.Errorf(wire.CodeInvalid, err.Error())
		}
		app.Strategy = m.Strategy
	}
	a.deployMu.Lock() // deploys are serialized: versions stay ordered
	defer a.deployMu.Unlock()
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
			return err
		}
	}
	a.apps[app.MountPoint] = app
	a.mu.Unlock()
	a.log.Info().Str("app", app.MountPoint).Int("version", app.Version).Str("strategy", app.Strategy).Msg("application added")
	a.push(ctx, wire.WorkerAddApplication, app)
	return nil
}

// SetDisabled disables or enables an app. A disabled app keeps its
// instances running but gets no new ones.
func (a *AppManager) SetDisabled(ctx context.Context, name string, disabled bool) error {
	a.deployMu.Lock()
	defer a.deployMu.Unlock()
	app, ok := a.Get(name)
	if !ok {
		return wire.Errorf(wire.CodeUnknownApp, "no application is mounted at /"+name)
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
	a.log.Info().Str("app", name).Bool("disabled", disabled).Msg("application state changed")
	a.push(ctx, wire.WorkerAddApplication, app)
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
func (a *AppManager) Remove(ctx context.Context, name string) error {
	a.deployMu.Lock()
	defer a.deployMu.Unlock()
	a.mu.Lock()
	_, ok := a.apps[name]
	delete(a.apps, name)
	var err error
	if ok && a.store != nil {
		err = a.store.remove(name)
	}
	a.mu.Unlock()
	if !ok {
		return wire.Errorf(wire.CodeUnknownApp, "no application is mounted at /"+name)
	}
	if err != nil {
		return err
	}
	a.log.Info().Str("app", name).Msg("application removed")
	a.push(ctx, wire.WorkerRemoveApplication, name)
	return nil
}

// push calls method on every worker in parallel; failures are logged (a
// worker that missed an update gets the full list when it re-registers).
func (a *AppManager) push(ctx context.Context, method string, arg any) {
	var wg sync.WaitGroup
	for id, ref := range a.workers() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := ref.Call(cctx, method, nil, arg); err != nil {
				a.log.Warn().Str("worker", id).Str("method", method).Err(err).Msg("push to worker failed")
			}
		}()
	}
	wg.Wait()
}
