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
	m := bundle.Manifest{Name: app.Name, MountPoint: app.MountPoint, Description: app.Description,
		Entry: app.Entry, Strategy: app.Strategy, Public: &app.Public}
	var files map[string]bool
	if app.Files != nil {
		files = make(map[string]bool, len(app.Files))
		for f := range app.Files {
			files[f] = true
		}
	}
	if err := m.Validate(files); err != nil {
		return wire.Errorf(wire.CodeInvalid, err.Error())
	}
	app.Strategy = m.Strategy
	a.mu.Lock()
	if old, ok := a.apps[app.MountPoint]; ok {
		app.Version = old.Version + 1
	} else if app.Version == 0 {
		app.Version = 1
	}
	a.apps[app.MountPoint] = app
	a.mu.Unlock()
	a.log.Info().Str("app", app.MountPoint).Int("version", app.Version).Str("strategy", app.Strategy).Msg("application added")
	a.push(ctx, wire.WorkerAddApplication, app)
	return nil
}

// Remove uninstalls an app everywhere.
func (a *AppManager) Remove(ctx context.Context, name string) error {
	a.mu.Lock()
	_, ok := a.apps[name]
	delete(a.apps, name)
	a.mu.Unlock()
	if !ok {
		return wire.Errorf(wire.CodeUnknownApp, "no application is mounted at /"+name)
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
