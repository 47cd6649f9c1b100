package worker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/bundle"
	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
	"github.com/cloudbrowser-go/cloudbrowser/worker/pool"
)

// appCatalog owns the apps installed on this worker: their versions and
// files (a large app's archive fetched from the master), their specific
// pools' configurations, and the registration epochs that keep a push of
// the master's from being undone by an older registration list.
type appCatalog struct {
	w   *Worker
	log zerolog.Logger

	mu   sync.RWMutex
	apps map[string]wire.App
	// epoch counts registrations; touched holds the epoch in which the
	// master last pushed or removed an app, so a registration's list
	// (possibly older: large apps are fetched after the reply) does not
	// undo a push that arrived meanwhile.
	epoch   uint64
	touched map[string]uint64
	pools   map[string]*pool.Config // apps' specific pools (nil: general pool)
}

func newAppCatalog(w *Worker, log zerolog.Logger) *appCatalog {
	return &appCatalog{w: w, log: log, apps: map[string]wire.App{}, pools: map[string]*pool.Config{}, touched: map[string]uint64{}}
}

// install installs or replaces an app, fetching its files over c if it
// came without them.
func (cat *appCatalog) install(ctx context.Context, c *rmi.Conn, app wire.App) error {
	app, err := cat.materialize(ctx, c, app)
	if err != nil {
		return err
	}
	pc, err := appPool(app)
	if err != nil {
		return wire.Err(wire.CodeInvalid, "AddApplication "+app.MountPoint+": "+err.Error())
	}
	cat.mu.Lock()
	old := cat.pools[app.MountPoint]
	cat.apps[app.MountPoint] = app
	cat.touched[app.MountPoint] = cat.epoch
	cat.pools[app.MountPoint] = pc
	cat.mu.Unlock()
	if old != nil && (pc == nil || !reflect.DeepEqual(*old, *pc)) {
		cat.w.pools.Remove(app.MountPoint) // a new version's pool starts afresh
	}
	cat.log.Info().Str("app", app.MountPoint).Int("version", app.Version).Bool("pool", pc != nil).Msg("application installed")
	return nil
}

// remove uninstalls an app; it reports whether it was installed.
func (cat *appCatalog) remove(name string) bool {
	cat.mu.Lock()
	defer cat.mu.Unlock()
	_, ok := cat.apps[name]
	delete(cat.apps, name)
	cat.touched[name] = cat.epoch
	delete(cat.pools, name)
	return ok
}

// appPool is the app's specific pool configuration (nil: general pool).
func appPool(app wire.App) (*pool.Config, error) {
	if len(app.Manifest) == 0 {
		return nil, nil
	}
	m, err := bundle.ParseManifest(app.Manifest)
	if err != nil {
		return nil, err
	}
	pc, err := bundle.ParsePool(m.Pool)
	if err != nil || pc == nil || !pc.Enabled {
		return nil, err
	}
	return pc, nil
}

// appIdle is the app's idleTimeout (the default when the manifest has
// none or cannot be read).
func appIdle(app wire.App) time.Duration {
	if m := manifestOf(app); m != nil {
		return m.Idle()
	}
	return bundle.DefaultIdleTimeout
}

func (cat *appCatalog) poolConfig(name string) *pool.Config {
	cat.mu.RLock()
	defer cat.mu.RUnlock()
	return cat.pools[name]
}

func (cat *appCatalog) app(name string) (wire.App, bool) {
	cat.mu.RLock()
	defer cat.mu.RUnlock()
	app, ok := cat.apps[name]
	return app, ok
}

// materialize returns app with its files: a large app comes as a stub
// (wire.App.ArchiveSize) whose archive is fetched from the master over c by
// chunks, unless this worker already holds that version. It also applies
// the worker's own size limit.
func (cat *appCatalog) materialize(ctx context.Context, c *rmi.Conn, app wire.App) (wire.App, error) {
	if app.ArchiveSize > 0 && app.Files == nil {
		cat.mu.RLock()
		cur, ok := cat.apps[app.MountPoint]
		cat.mu.RUnlock()
		if ok && cur.Version == app.Version && cur.ArchiveSum == app.ArchiveSum && cur.Files != nil {
			cur.Disabled = app.Disabled
			return cur, nil
		}
		if c == nil {
			return app, wire.Err(wire.CodeInvalid, "application /"+app.MountPoint+" came without its files and no master connection to fetch them")
		}
		files, err := fetchArchive(ctx, c, app)
		if err != nil {
			return app, err
		}
		app.Files = files
	}
	if lim := cat.w.cfg.MaxAppBytes; lim > 0 {
		var n int64
		for _, f := range app.Files {
			n += int64(len(f))
		}
		if n > lim {
			return app, wire.Errorf(wire.CodeInvalid, "application /%s is %d bytes, over this worker's limit of %d bytes (MaxAppBytes)", app.MountPoint, n, lim)
		}
	}
	return app, nil
}

// maxFetch bounds a fetched archive: the master's 64 MiB of files, plus tar
// headers and gzip overhead when they do not compress.
const maxFetch = 96 << 20

// fetchArchive downloads a large app's archive from the master chunk by
// chunk (each well under the RMI frame limit), checks its size and SHA-256
// and unpacks it.
func fetchArchive(ctx context.Context, c *rmi.Conn, app wire.App) (map[string][]byte, error) {
	if app.ArchiveSize > maxFetch {
		return nil, wire.Errorf(wire.CodeInvalid, "archive of /%s is %d bytes, over %d", app.MountPoint, app.ArchiveSize, maxFetch)
	}
	buf := make([]byte, 0, app.ArchiveSize)
	for int64(len(buf)) < app.ArchiveSize {
		chunk, err := contract.BundlesClient{C: c}.BundleChunk(ctx, wire.BundleChunkRequest{Mount: app.MountPoint, Version: app.Version, Offset: int64(len(buf))})
		if err != nil {
			return nil, fmt.Errorf("fetching /%s version %d at byte %d: %w", app.MountPoint, app.Version, len(buf), err)
		}
		if len(chunk) == 0 || int64(len(buf)+len(chunk)) > app.ArchiveSize {
			return nil, fmt.Errorf("fetching /%s version %d: archive does not match its announced size %d", app.MountPoint, app.Version, app.ArchiveSize)
		}
		buf = append(buf, chunk...)
	}
	sum := sha256.Sum256(buf)
	if hex.EncodeToString(sum[:]) != app.ArchiveSum {
		return nil, fmt.Errorf("fetching /%s version %d: archive checksum mismatch", app.MountPoint, app.Version)
	}
	b, err := bundle.Unpack(bytes.NewReader(buf), bundle.Limits{})
	if err != nil {
		return nil, fmt.Errorf("fetched /%s version %d: %w", app.MountPoint, app.Version, err)
	}
	return b.Files, nil
}

// startRegistration begins a registration; its epoch goes to setApps.
func (cat *appCatalog) startRegistration() uint64 {
	cat.mu.Lock()
	defer cat.mu.Unlock()
	cat.epoch++
	return cat.epoch
}

// setApps replaces the app list with the master's (at registration),
// fetching the archives of large apps over c first. Apps the master pushed
// or removed since the registration began (epoch) keep that newer state.
func (cat *appCatalog) setApps(ctx context.Context, c *rmi.Conn, epoch uint64, apps []wire.App) {
	ready := make([]wire.App, 0, len(apps))
	for _, app := range apps {
		full, err := cat.materialize(ctx, c, app)
		if err != nil {
			// Not installed: the master's placements carry the app again.
			cat.log.Error().Str("app", app.MountPoint).Int("version", app.Version).Err(err).Msg("application not installed")
			continue
		}
		ready = append(ready, full)
	}
	cat.mu.Lock()
	defer cat.mu.Unlock()
	apps0, pools0 := cat.apps, cat.pools
	cat.apps = make(map[string]wire.App, len(ready))
	cat.pools = make(map[string]*pool.Config, len(ready))
	for name, e := range cat.touched {
		if e == epoch {
			if app, ok := apps0[name]; ok {
				cat.apps[name], cat.pools[name] = app, pools0[name]
			}
		}
	}
	for _, app := range ready {
		if cat.touched[app.MountPoint] == epoch {
			continue
		}
		cat.apps[app.MountPoint] = app
		pc, err := appPool(app)
		if err != nil {
			cat.log.Error().Str("app", app.MountPoint).Err(err).Msg("bad pool configuration; using the general pool")
		}
		cat.pools[app.MountPoint] = pc
	}
}
