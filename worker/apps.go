package worker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/bundle"
	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/ids"
	"github.com/cloudbrowser-go/cloudbrowser/internal/session"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/engine"
	"github.com/cloudbrowser-go/cloudbrowser/worker/httpserve"
	"github.com/cloudbrowser-go/cloudbrowser/worker/pool"
)

// instance is an app instance hosted here.
type instance struct {
	info wire.InstanceInfo
	app  wire.App

	mu       sync.Mutex
	browsers map[string]*vbrowser
	byUser   map[string]string // user -> their browser in this instance
	state    map[string]json.RawMessage
	// seqs is each state key's write sequence number, from the master.
	seqs   map[string]uint64
	perms  map[string]httpserve.Role // grants on the instance (perms.go)
	closed bool
	// idle is the app's idleTimeout: a browser nobody watched this long is
	// released (0: never).
	idle time.Duration
	// released remembers browsers given back for being idle (id -> owner),
	// so their URLs lead to a new browser; noteFor marks users whose next
	// browser here tells them the previous one was released.
	released map[string]string
	noteFor  map[string]bool
	// pending are the browsers being restored from their snapshots (a
	// re-placed instance), closed when done; pendingOwner their owners.
	pending      map[string]chan struct{}
	pendingOwner map[string]string
	// making is the user's browser being made (browserForFrom): the
	// concurrent first requests of one user wait for it instead of each
	// starting a browser, taking a place in the user's quota and losing
	// the race (20 at once went over a quota of 10).
	making map[string]*making

	// w stores writes of the shared state off this worker (replica.go);
	// writeMu orders grants and renames.
	w       *Worker
	writeMu sync.Mutex
}

// vbrowser is a virtual browser of an instance.
type vbrowser struct {
	id      string
	inst    *instance
	owner   string
	created time.Time
	b       browser.Browser
	hub     *engine.Hub

	subMu sync.Mutex
	subs  map[string]bool           // state keys its pages subscribed to
	perms map[string]httpserve.Role // grants on this browser (under subMu)
	// apiToken authenticates app API calls from this browser's own pages.
	apiToken string
	name     string // given by its owner (under subMu)
	// notice is shown once on the owner's engine page (under subMu): the
	// previous browser was released.
	notice string
	// lease is the pool lease the browser came from; closing returns it.
	lease *pool.Lease
	// unquota gives back the browser's places in the quotas (idempotent).
	unquota  func()
	released chan struct{}
	once     sync.Once
	// snap is its snapshot bookkeeping (snapshots.go).
	snap snapState
	// made is how the browser was made (lease, app API, policies, entry
	// page), a Server-Timing value sent with its Browser URL.
	made string
}

func newVBrowser(in *instance, id, owner string) *vbrowser {
	return &vbrowser{id: id, inst: in, owner: owner, created: time.Now(), subs: map[string]bool{}, perms: map[string]httpserve.Role{},
		apiToken: ids.Random(24)}
}

// AppManager is the worker's Application Manager. The master holds it as a
// remote reference (passed at registration) and calls the exported methods.
type AppManager struct {
	w   *Worker
	log zerolog.Logger

	mu   sync.RWMutex
	apps map[string]wire.App
	// epoch counts registrations; touched holds the epoch in which the
	// master last pushed or removed an app, so a registration's list
	// (possibly older: large apps are fetched after the reply) does not
	// undo a push that arrived meanwhile.
	epoch     uint64
	touched   map[string]uint64
	pools     map[string]*pool.Config // apps' specific pools (nil: general pool)
	instances map[string]*instance
}

func newAppManager(w *Worker) *AppManager {
	return &AppManager{w: w, log: w.log.With().Str("component", "apps").Logger(),
		apps: map[string]wire.App{}, pools: map[string]*pool.Config{}, instances: map[string]*instance{},
		touched: map[string]uint64{}}
}

// AddApplication installs or replaces an app; running instances keep the
// version they started with.
func (a *AppManager) AddApplication(ctx context.Context, app wire.App) error {
	if app.MountPoint == "" {
		return wire.Err(wire.CodeInvalid, "AddApplication: app without mount point")
	}
	app, err := a.materialize(ctx, rmi.ConnFrom(ctx), app)
	if err != nil {
		return err
	}
	pc, err := appPool(app)
	if err != nil {
		return wire.Err(wire.CodeInvalid, "AddApplication "+app.MountPoint+": "+err.Error())
	}
	a.mu.Lock()
	old := a.pools[app.MountPoint]
	a.apps[app.MountPoint] = app
	a.touched[app.MountPoint] = a.epoch
	a.pools[app.MountPoint] = pc
	a.mu.Unlock()
	if old != nil && (pc == nil || !reflect.DeepEqual(*old, *pc)) {
		a.w.pools.Remove(app.MountPoint) // a new version's pool starts afresh
	}
	a.log.Info().Str("app", app.MountPoint).Int("version", app.Version).Bool("pool", pc != nil).Msg("application installed")
	return nil
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

func (a *AppManager) poolConfig(name string) *pool.Config {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.pools[name]
}

// RemoveApplication uninstalls an app and closes its instances.
func (a *AppManager) RemoveApplication(ctx context.Context, name string) error {
	a.mu.Lock()
	_, ok := a.apps[name]
	delete(a.apps, name)
	a.touched[name] = a.epoch
	delete(a.pools, name)
	var doomed []*instance
	for _, in := range a.instances {
		if in.app.MountPoint == name {
			doomed = append(doomed, in)
		}
	}
	a.mu.Unlock()
	if !ok {
		return wire.Err(wire.CodeUnknownApp, "no application "+name)
	}
	for _, in := range doomed {
		a.closeInstance(ctx, in.info.ID, "application removed")
	}
	a.w.pools.Remove(name)
	a.log.Info().Str("app", name).Int("instances_closed", len(doomed)).Msg("application removed")
	return nil
}

// materialize returns app with its files: a large app comes as a stub
// (wire.App.ArchiveSize) whose archive is fetched from the master over c by
// chunks, unless this worker already holds that version. It also applies
// the worker's own size limit.
func (a *AppManager) materialize(ctx context.Context, c *rmi.Conn, app wire.App) (wire.App, error) {
	if app.ArchiveSize > 0 && app.Files == nil {
		a.mu.RLock()
		cur, ok := a.apps[app.MountPoint]
		a.mu.RUnlock()
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
	if lim := a.w.cfg.MaxAppBytes; lim > 0 {
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
func (a *AppManager) startRegistration() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.epoch++
	return a.epoch
}

// setApps replaces the app list with the master's (at registration),
// fetching the archives of large apps over c first. Apps the master pushed
// or removed since the registration began (epoch) keep that newer state.
func (a *AppManager) setApps(ctx context.Context, c *rmi.Conn, epoch uint64, apps []wire.App) {
	ready := make([]wire.App, 0, len(apps))
	for _, app := range apps {
		full, err := a.materialize(ctx, c, app)
		if err != nil {
			// Not installed: the master's placements carry the app again.
			a.log.Error().Str("app", app.MountPoint).Int("version", app.Version).Err(err).Msg("application not installed")
			continue
		}
		ready = append(ready, full)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	apps0, pools0 := a.apps, a.pools
	a.apps = make(map[string]wire.App, len(ready))
	a.pools = make(map[string]*pool.Config, len(ready))
	for name, e := range a.touched {
		if e == epoch {
			if app, ok := apps0[name]; ok {
				a.apps[name], a.pools[name] = app, pools0[name]
			}
		}
	}
	for _, app := range ready {
		if a.touched[app.MountPoint] == epoch {
			continue
		}
		a.apps[app.MountPoint] = app
		pc, err := appPool(app)
		if err != nil {
			a.log.Error().Str("app", app.MountPoint).Err(err).Msg("bad pool configuration; using the general pool")
		}
		a.pools[app.MountPoint] = pc
	}
}

// CreateInstance creates an instance the master placed here.
func (a *AppManager) CreateInstance(ctx context.Context, req wire.CreateInstance) error {
	restored, err := a.createInstance(ctx, req)
	if err != nil || !req.WaitBrowsers || restored == nil {
		return err
	}
	// A live migration: the old copy serves until the browsers are back
	// here, so the users move to ready browsers.
	select {
	case <-restored:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("restoring the browsers of %s: %w", req.InstanceID, ctx.Err())
	}
}

// createInstance creates (or restores) an instance; restored, when not
// nil, is closed once its browsers are restored.
func (a *AppManager) createInstance(ctx context.Context, req wire.CreateInstance) (restored <-chan struct{}, err error) {
	wid, ok := ids.WorkerOf(req.InstanceID)
	if !ok || wid != a.w.id && !req.Restore {
		// Only a re-placement brings an id named after another worker.
		return nil, wire.Errorf(wire.CodeInvalid, "instance id %q does not belong to worker %s", req.InstanceID, a.w.id)
	}
	if req.App.ArchiveSize > 0 && req.App.Files == nil {
		// A large app this worker may not hold in this version yet.
		app, err := a.materialize(ctx, rmi.ConnFrom(ctx), req.App)
		if err != nil {
			return nil, err
		}
		req.App = app
	}
	if in, dup := a.instance(req.InstanceID); dup {
		in.placedAgain(req.Epoch) // a retried call: already done
		return nil, nil
	}
	// An id the master already holds shared state for (a re-placement)
	// starts from that state, before anyone can use it.
	saved, err := a.w.loadState(ctx, req.InstanceID)
	if err != nil {
		return nil, err
	}
	var snaps []wire.BrowserSnapshot
	if req.Restore {
		if snaps, err = a.w.snaps.loadSnapshots(ctx, req.InstanceID); err != nil {
			return nil, err
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.w.closing() {
		return nil, wire.Err(wire.CodeNoWorkers, "worker "+a.w.id+" is shutting down")
	}
	if in, dup := a.instances[req.InstanceID]; dup {
		in.placedAgain(req.Epoch) // a retried call: already done
		return nil, nil
	}
	app := req.App
	if cur, ok := a.apps[app.MountPoint]; ok && app.Files == nil {
		app = cur
	}
	created := time.Now()
	if req.Restore && !req.Created.IsZero() {
		created = req.Created
	}
	in := &instance{
		info: wire.InstanceInfo{ID: req.InstanceID, App: app.MountPoint, Version: app.Version, Owner: req.Owner, Worker: a.w.id,
			Created: created, ClientIP: req.ClientIP, Epoch: req.Epoch, Name: req.Name},
		app: app, browsers: map[string]*vbrowser{}, byUser: map[string]string{},
		state: map[string]json.RawMessage{}, seqs: map[string]uint64{}, perms: map[string]httpserve.Role{}, w: a.w,
		idle: appIdle(app), released: map[string]string{}, noteFor: map[string]bool{},
		pending: map[string]chan struct{}{}, pendingOwner: map[string]string{},
	}
	in.restore(saved)
	// The snapshotted browsers are pending from now on: requests for them
	// (a reconnecting client engine) wait until they are back.
	for _, s := range snaps {
		if _, dup := in.pending[s.ID]; dup {
			continue
		}
		in.pending[s.ID], in.pendingOwner[s.ID] = make(chan struct{}), s.Owner
	}
	a.instances[req.InstanceID] = in
	var done chan struct{}
	if len(snaps) > 0 {
		done = make(chan struct{})
		go func() {
			defer close(done)
			a.restoreBrowsers(in, snaps)
		}()
	}
	a.log.Info().Str("instance", req.InstanceID).Str("app", app.MountPoint).Str("owner", req.Owner).Bool("restore", req.Restore).
		Bool("restored", saved.Found).Int("state_keys", len(saved.Values)).Int("browsers", len(snaps)).Msg("instance created")
	if done == nil {
		return nil, nil
	}
	return done, nil
}

// errEgressBypassed: a browser's traffic did not go through its egress
// guard: its entry page failed with a name resolved by Chromium itself.
// Browsers always get an endpoint (the guard starts before the pools); this
// is the second line, should Chromium ever ignore a context's proxy. Such a
// browser is never handed to a user.
var errEgressBypassed = errors.New("browser bypassed its egress guard")

// leaseBrowser leases vb's browser from the app's pool (or the general
// pool) and prepares it: app API, and for a blank general-pool browser the
// app's egress, navigation policy, viewport and entry page.
func (a *AppManager) leaseBrowser(ctx context.Context, in *instance, vb *vbrowser, snap *wire.BrowserSnapshot) (*pool.Lease, browser.Browser, *serverTiming, error) {
	// Leasing can take a second with Chromium (a cold browser): not under
	// the lock.
	pc := a.poolConfig(in.app.MountPoint)
	t0 := time.Now()
	st := &serverTiming{last: t0}
	lease, err := a.w.pools.Lease(ctx, in.app.MountPoint, pc)
	st.step("lease")
	kind, outcome := "general", "ok"
	if pc != nil {
		kind = "specific"
	}
	if err != nil {
		outcome = "failed"
	}
	a.w.leaseSeconds.WithLabelValues(kind, outcome).Observe(time.Since(t0).Seconds())
	if err != nil {
		return nil, nil, nil, fmt.Errorf("lease a browser: %w", err)
	}
	b := lease.Browser()
	// Set before the app API is installed: its calls (another goroutine)
	// deliver their replies to vb.b.
	vb.lease, vb.released, vb.b = lease, make(chan struct{}), b
	// The app API is per browser and per user: installed at lease time.
	if err := b.Install(ctx, a.w.apiScript(vb), map[string]func(string){apiBinding: func(p string) { a.onAPICall(vb, p) }}); err != nil {
		lease.Return()
		return nil, nil, nil, fmt.Errorf("install the app API: %w", err)
	}
	st.step("api")
	if !lease.Specific() {
		// A general-pool browser is blank: give it the app's egress and
		// navigation policies, then open the instance's entry page.
		a.w.assignEgress(b, in.app.MountPoint)
		if err := b.SetPolicy(ctx, a.w.navigationPolicy(in.app)); err != nil {
			lease.Return()
			return nil, nil, nil, fmt.Errorf("navigation policy: %w", err)
		}
		if in.app.ViewportWidth > 0 && in.app.ViewportHeight > 0 && snap == nil {
			if err := b.Input(ctx, browser.InputEvent{Type: browser.InputResize, Width: in.app.ViewportWidth, Height: in.app.ViewportHeight}); err != nil {
				lease.Return()
				return nil, nil, nil, fmt.Errorf("viewport: %w", err)
			}
			vb.snap.width.Store(int32(in.app.ViewportWidth))
			vb.snap.height.Store(int32(in.app.ViewportHeight))
		}
		st.step("policy")
		if snap == nil {
			if err := b.Navigate(ctx, a.w.entryURL(in)); err != nil {
				lease.Return() // a general-pool browser is never reused
				if b.Egress() != nil && strings.Contains(err.Error(), "ERR_NAME_NOT_RESOLVED") {
					// Behind its guard a browser never resolves a name
					// itself (the guard does, and answers with a page).
					return nil, nil, nil, fmt.Errorf("%w: open %s: %w", errEgressBypassed, in.app.Entry, err)
				}
				return nil, nil, nil, fmt.Errorf("open %s: %w", in.app.Entry, err)
			}
			st.step("nav")
		}
	}
	return lease, b, st, nil
}

// OpenBrowser returns the user's browser in a local instance, creating it
// if needed. It is not in contract.WorkerApps: without the client's address
// it would skip the per-address browser quota, so the master, which opens
// browsers when placing users, gets OpenBrowserFor only.
func (a *AppManager) OpenBrowser(ctx context.Context, iid, user string) (string, error) {
	return a.openBrowser(ctx, iid, user, "")
}

// OpenBrowserFor is OpenBrowser with the client's address, for the
// per-address browser quota.
func (a *AppManager) OpenBrowserFor(ctx context.Context, req wire.OpenBrowser) (string, error) {
	return a.openBrowser(ctx, req.InstanceID, req.User, req.ClientIP)
}

func (a *AppManager) openBrowser(ctx context.Context, iid, user, ip string) (string, error) {
	in, ok := a.instance(iid)
	if !ok {
		return "", wire.Err(wire.CodeUnknownInstance, "no instance "+iid+" on worker "+a.w.id)
	}
	b, err := a.browserForFrom(ctx, in, user, ip)
	if err != nil {
		err = quotaCode(err)
	}
	var le *pool.LimitError
	if errors.As(err, &le) {
		return "", wire.Err(wire.CodePoolLimit, "The "+le.Error())
	}
	if errors.Is(err, httpserve.ErrBrowserLimit) {
		return "", wire.Errorf(wire.CodePoolLimit, "%w", err)
	}
	if err != nil {
		return "", err
	}
	return b.id, nil
}

// Grant sets a role on an instance (bid "") or one of its browsers, on an
// administrator's behalf (the master checked the admin token).
func (a *AppManager) Grant(ctx context.Context, iid, bid, principal, role string) error {
	in, ok := a.instance(iid)
	if !ok {
		return wire.Err(wire.CodeUnknownInstance, "no instance "+iid+" on worker "+a.w.id)
	}
	r, err := httpserve.ParseRole(role)
	if err == nil && !httpserve.ValidPrincipal(principal) {
		err = fmt.Errorf("%q is not a user name or *", principal)
	}
	if err != nil {
		return wire.Err(wire.CodeInvalid, "grant: "+err.Error())
	}
	var b *vbrowser
	if bid == "" {
		if err := in.saveGrant(principal, r); err != nil {
			return fmt.Errorf("grant: %w", err)
		}
	} else {
		if b, ok = in.browser(bid); !ok {
			return wire.Err(wire.CodeUnknownInstance, "no browser "+bid+" in "+iid)
		}
		b.setGrant(principal, r)
	}
	a.granted(ctx, in, b, principal, r)
	return nil
}

// RevokeSessions ends a user's login sessions (the master changed their
// password or removed them): their session cookies are refused from now
// on, and their open client-engine sockets are closed.
func (a *AppManager) RevokeSessions(ctx context.Context, rev wire.Revocation) error {
	if rev.User == "" {
		return wire.Err(wire.CodeInvalid, "RevokeSessions: no user")
	}
	a.w.front.Users().Revoke(rev.User, rev.Before)
	a.mu.RLock()
	insts := make([]*instance, 0, len(a.instances))
	for _, in := range a.instances {
		if in.app.Authentication { // elsewhere the name is an anonymous id, not an account
			insts = append(insts, in)
		}
	}
	a.mu.RUnlock()
	n := 0
	for _, in := range insts {
		for _, b := range in.browserList() {
			n += b.hub.Disconnect(rev.User, "You were signed out: your account changed.", "/"+in.app.MountPoint+"/login")
		}
	}
	a.log.Info().Str("user", rev.User).Int("sockets_closed", n).Msg("sessions revoked")
	return nil
}

// EndSession ends one session (a logout, seen by this worker or told by
// the master): its cookie values are refused from now on and the sockets
// opened with it are closed.
func (a *AppManager) EndSession(ctx context.Context, rev wire.SessionRevocation) error {
	if !session.ValidID(rev.ID) {
		return wire.Err(wire.CodeInvalid, "EndSession: invalid session id")
	}
	a.w.front.Users().End(rev)
	a.mu.RLock()
	insts := make([]*instance, 0, len(a.instances))
	for _, in := range a.instances {
		insts = append(insts, in)
	}
	a.mu.RUnlock()
	n := 0
	for _, in := range insts {
		reload := "/" + in.app.MountPoint + "/login"
		if rev.User == "" { // a dashboard session
			reload = "/admin"
		}
		for _, b := range in.browserList() {
			n += b.hub.DisconnectSession(rev.ID, "You were signed out.", reload)
		}
	}
	a.log.Info().Str("user", rev.User).Int("sockets_closed", n).Msg("session ended")
	return nil
}

// Browsers lists an instance's browsers (admin dashboard).
func (a *AppManager) Browsers(ctx context.Context, iid string) ([]wire.BrowserInfo, error) {
	in, ok := a.instance(iid)
	if !ok {
		return nil, wire.Err(wire.CodeUnknownInstance, "no instance "+iid+" on worker "+a.w.id)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	out := []wire.BrowserInfo{}
	for _, b := range in.browsers {
		out = append(out, wire.BrowserInfo{ID: b.id, URL: b.url(), Owner: b.owner, Created: b.created, Clients: b.hub.Count()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, nil
}

// CloseInstance closes an instance and its browsers for good, if this
// worker holds it under c.Epoch (0: whatever the epoch, an admin's order).
func (a *AppManager) CloseInstance(ctx context.Context, c wire.ClosedInstance) error {
	in, ok := a.instance(c.ID)
	if !ok {
		return wire.Err(wire.CodeUnknownInstance, "no instance "+c.ID+" on worker "+a.w.id)
	}
	if e := in.epoch(); c.Epoch != 0 && e != c.Epoch {
		return wire.Errorf(wire.CodeInstanceLost, "instance %s is held here under epoch %d, not %d: kept", c.ID, e, c.Epoch)
	}
	if !a.closeInstance(ctx, c.ID, "instance closed") {
		return wire.Err(wire.CodeUnknownInstance, "no instance "+c.ID+" on worker "+a.w.id)
	}
	return nil
}

func (a *AppManager) closeInstance(ctx context.Context, iid, reason string) bool {
	return a.dropInstance(ctx, iid, func(b *vbrowser) { b.close(ctx, reason) }, true)
}

// ReleaseInstance drops an instance the master migrated to another worker:
// its clients are sent on to the same URLs.
func (a *AppManager) ReleaseInstance(ctx context.Context, f wire.FencedInstance) error {
	a.fence(ctx, []wire.FencedInstance{f})
	return nil
}

// fence drops instances the master gave to someone else (this worker was
// declared dead and another instance took their place): their clients are
// told why and where to go, and the master is not told (it knows).
func (a *AppManager) fence(ctx context.Context, fenced []wire.FencedInstance) {
	for _, f := range fenced {
		reload := f.Location
		a.dropInstance(ctx, f.ID, func(b *vbrowser) {
			if f.Moved {
				b.hub.MoveAway(f.Reason) // its Browser URL works on the new worker
			} else {
				b.hub.Shutdown(f.Reason, reload)
			}
			b.release()
		}, false)
		a.log.Warn().Str("instance", f.ID).Str("reason", f.Reason).Msg("instance fenced by the master: closed")
	}
}

// dropInstance takes an instance out and ends each of its browsers with
// end; it reports whether the instance was here.
func (a *AppManager) dropInstance(ctx context.Context, iid string, end func(*vbrowser), tellMaster bool) bool {
	a.mu.Lock()
	in, ok := a.instances[iid]
	delete(a.instances, iid)
	a.mu.Unlock()
	if !ok {
		return false
	}
	in.mu.Lock()
	in.closed = true
	bs := make([]*vbrowser, 0, len(in.browsers))
	for _, b := range in.browsers {
		bs = append(bs, b)
	}
	in.browsers, in.byUser = map[string]*vbrowser{}, map[string]string{}
	in.mu.Unlock()
	for _, b := range bs {
		end(b)
	}
	if tellMaster {
		a.w.instanceClosed(iid, in.epoch())
	}
	return true
}

func (a *AppManager) app(name string) (wire.App, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	app, ok := a.apps[name]
	return app, ok
}

func (a *AppManager) instance(iid string) (*instance, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	in, ok := a.instances[iid]
	return in, ok
}

// list returns the instances for registration and load reports.
func (a *AppManager) list() []wire.InstanceInfo {
	a.mu.RLock()
	defer a.mu.RUnlock()
	out := make([]wire.InstanceInfo, 0, len(a.instances))
	for _, in := range a.instances {
		in.mu.Lock()
		info := in.info
		info.Browsers = len(in.browsers)
		info.Shared = in.sharedLocked()
		in.mu.Unlock()
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// perUserLimit is how many browsers one user may own in an instance: the
// manifest's browserLimit.perUser, else what the strategy says (one for
// singleBrowserPerUser and the single-instance strategies, no cap for
// multiInstance).
func perUserLimit(app wire.App) int {
	if app.BrowsersPerUser > 0 || app.Strategy == wire.MultiInstance {
		return app.BrowsersPerUser
	}
	return 1
}

// checkLimitsLocked enforces the manifest's browserLimit: perInstance caps
// the browsers of an instance, perUser (or the strategy's one browser per
// user) the browsers one user owns in it.
func (in *instance) checkLimitsLocked(user string) error {
	if n := in.app.BrowsersPerInstance; n > 0 && len(in.browsers) >= n {
		return fmt.Errorf("%w: this instance already has %d browsers", httpserve.ErrBrowserLimit, n)
	}
	if n := perUserLimit(in.app); n > 0 {
		mine := 0
		for _, b := range in.browsers {
			if b.owner == user {
				mine++
			}
		}
		switch {
		case mine < n:
		case n == 1 && in.app.BrowsersPerUser == 0:
			return fmt.Errorf("%w: the %s strategy gives each user one browser in an instance, and you have it "+
				"(the app's browserLimit.perUser allows more)", httpserve.ErrBrowserLimit, in.app.Strategy)
		default:
			return fmt.Errorf("%w: you already have %d browsers in this instance", httpserve.ErrBrowserLimit, n)
		}
	}
	return nil
}

// browserFor returns the user's browser in the instance, creating it if
// needed.
func (a *AppManager) browserFor(ctx context.Context, in *instance, user string) (*vbrowser, error) {
	return a.browserForFrom(ctx, in, user, "")
}

// browserForFrom is browserFor for a client at address ip ("" = unknown),
// for the per-address browser quota.
func (a *AppManager) browserForFrom(ctx context.Context, in *instance, user, ip string) (*vbrowser, error) {
	in.awaitUserRestore(ctx, user)
	for {
		in.mu.Lock()
		if bid, ok := in.byUser[user]; ok {
			if b, ok := in.browsers[bid]; ok {
				in.mu.Unlock()
				return b, nil
			}
		}
		m, busy := in.making[user]
		if !busy {
			m = &making{done: make(chan struct{})}
			if in.making == nil {
				in.making = map[string]*making{}
			}
			in.making[user] = m
			in.mu.Unlock()
			b, err := a.newBrowserFrom(ctx, in, user, ip, true)
			in.mu.Lock()
			delete(in.making, user)
			in.mu.Unlock()
			m.b, m.err = b, err
			close(m.done)
			return b, err
		}
		m.waiters++
		in.mu.Unlock()
		select {
		case <-m.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		// The maker's request gave up (its client went away): not a
		// reason to fail this one, which tries again.
		if m.err == nil || !(errors.Is(m.err, context.Canceled) || errors.Is(m.err, context.DeadlineExceeded)) {
			return m.b, m.err
		}
	}
}

// making is one user's browser being made in an instance; b and err are
// set before done is closed.
type making struct {
	done    chan struct{}
	b       *vbrowser
	err     error
	waiters int // requests that waited for it (under instance.mu)
}

// newBrowser creates a browser of user in the instance. With asTheirs it
// becomes the user's browser there (unless a concurrent request of the same
// user won, whose browser is returned instead).
func (a *AppManager) newBrowser(ctx context.Context, in *instance, user string, asTheirs bool) (*vbrowser, error) {
	return a.newBrowserFrom(ctx, in, user, "", asTheirs)
}

// newBrowserFrom is newBrowser for a client at address ip ("" = unknown).
// The browser holds a place in the user's and the address's browser quotas
// until it is released.
func (a *AppManager) newBrowserFrom(ctx context.Context, in *instance, user, ip string, asTheirs bool) (*vbrowser, error) {
	return a.startBrowser(ctx, in, newVBrowser(in, ids.NewBrowser(), user), ip, asTheirs, nil)
}

// startBrowser leases and prepares vb's browser and adds it to the
// instance. With a snapshot it is brought back to the snapshot's page
// instead of the entry page (and the browser limits, which it met when
// it was first made, are not checked again).
func (a *AppManager) startBrowser(ctx context.Context, in *instance, vb *vbrowser, ip string, asTheirs bool, snap *wire.BrowserSnapshot) (_ *vbrowser, err error) {
	user := vb.owner
	if snap == nil {
		in.mu.Lock()
		err = in.checkLimitsLocked(user)
		in.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	if vb.unquota, err = a.w.quota.reserveBrowser(user, ip); err != nil {
		a.log.Info().Str("instance", in.info.ID).Str("user", user).Str("client_ip", ip).Err(err).Msg("browser refused: quota")
		return nil, err
	}
	// Every failure below gives the places back; a browser made releases
	// them when it is (vb.release).
	unquota := vb.unquota
	defer func() {
		if err != nil {
			unquota()
		}
	}()
	// A browser caught going round its egress guard is destroyed, and the
	// user gets another one.
	lease, b, st, err := a.leaseBrowser(ctx, in, vb, snap)
	if errors.Is(err, errEgressBypassed) {
		a.log.Error().Str("instance", in.info.ID).Err(err).Msg("browser bypassed its egress guard: destroyed, leasing another")
		lease, b, st, err = a.leaseBrowser(ctx, in, vb, snap)
	}
	if err != nil {
		return nil, err
	}
	vb.made = st.String()
	if snap != nil {
		// A pool's browser too: its cookies keep the user signed in.
		if err := a.w.snaps.restorePage(ctx, vb, *snap); err != nil {
			lease.Return()
			return nil, err
		}
	}
	vb.hub = a.newHub(in, vb)
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		vb.release()
		return nil, httpserve.ErrInstanceClosed
	}
	if asTheirs {
		if bid, ok := in.byUser[user]; ok { // lost a race with the same user
			if other, ok := in.browsers[bid]; ok {
				in.mu.Unlock()
				vb.release()
				return other, nil
			}
		}
	}
	if snap == nil {
		if err := in.checkLimitsLocked(user); err != nil { // a concurrent creation took the last place
			in.mu.Unlock()
			vb.release()
			return nil, err
		}
	} else if other, ok := in.browsers[vb.id]; ok {
		in.mu.Unlock()
		vb.release()
		return other, nil
	}
	if asTheirs {
		in.byUser[user] = vb.id
	}
	if in.noteFor[user] {
		delete(in.noteFor, user)
		vb.notice = releasedNotice(in.idle)
	}
	in.browsers[vb.id] = vb
	in.mu.Unlock()
	vb.snap.url = b.Page().URL
	vb.hub.Watch(func(err error) { a.browserEnded(in, vb, err) })
	a.w.snaps.kickSnapshot(vb)
	vb.hub.StartIdle(in.idle, a.w.clock, releasedReason(in.idle), reloadURL(in.app, in.info.ID), func() { a.browserIdle(in, vb) })
	vb.hub.StartRest(a.w.cfg.RestAfter, a.w.clock)
	vb.hub.SetPrecast(engine.PrecastWindow, a.w.clock)
	a.log.Info().Str("instance", in.info.ID).Str("browser", vb.id).Str("user", user).Msg("browser created")
	return vb, nil
}

// closeBrowser closes one browser of an instance.
func (a *AppManager) closeBrowser(in *instance, vb *vbrowser, reason string) {
	in.forget(vb)
	a.w.snaps.forgetSnapshot(vb)
	vb.close(context.Background(), reason)
}

// forget takes a browser out of the instance's books.
func (in *instance) forget(vb *vbrowser) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.browsers[vb.id] == vb {
		delete(in.browsers, vb.id)
		if in.byUser[vb.owner] == vb.id {
			delete(in.byUser, vb.owner)
		}
	}
}

// browserList is a snapshot of the instance's browsers.
func (in *instance) browserList() []*vbrowser {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make([]*vbrowser, 0, len(in.browsers))
	for _, b := range in.browsers {
		out = append(out, b)
	}
	return out
}

func (in *instance) browser(bid string) (*vbrowser, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	b, ok := in.browsers[bid]
	return b, ok
}

// browserEnded removes a browser that closed or crashed. After a crash its
// users are offered a new one: the instance URL creates it.
func (a *AppManager) browserEnded(in *instance, vb *vbrowser, err error) {
	in.forget(vb)
	in.mu.Lock()
	closing := in.closed // the instance's end says it all (or it moved)
	in.mu.Unlock()
	if !closing {
		a.w.snaps.forgetSnapshot(vb)
	}
	if errors.Is(err, browser.ErrCrashed) {
		a.log.Warn().Str("instance", in.info.ID).Str("browser", vb.id).Err(err).Msg("virtual browser crashed")
		vb.hub.Shutdown("The virtual browser crashed.", reloadURL(in.app, in.info.ID))
		vb.release()
		return
	}
	vb.hub.Shutdown("This browser was closed.", "")
	vb.release()
}

// maxReleased bounds an instance's memory of released browsers.
const maxReleased = 4096

// browserIdle gives back a browser nobody watched for the app's
// idleTimeout (its hub already refuses new clients): its lease returns to
// the pool (back sequence, or destroyed), its quota places are freed, and
// its URL and its owner's next visit lead to a new browser with a note.
func (a *AppManager) browserIdle(in *instance, vb *vbrowser) {
	in.mu.Lock()
	if in.browsers[vb.id] == vb {
		delete(in.browsers, vb.id)
		if in.byUser[vb.owner] == vb.id {
			delete(in.byUser, vb.owner)
		}
		if len(in.released) >= maxReleased {
			clear(in.released) // old URLs then answer 404, as a closed browser's do
		}
		in.released[vb.id] = vb.owner
		if len(in.noteFor) < maxReleased {
			in.noteFor[vb.owner] = true
		}
	}
	in.mu.Unlock()
	vb.release()
	a.w.snaps.forgetSnapshot(vb)
	a.w.idleReleased.Add(1)
	a.log.Info().Str("instance", in.info.ID).Str("browser", vb.id).Str("user", vb.owner).
		Dur("idle", in.idle).Msg("browser released: no client connected for the idle timeout")
}

// wasReleased reports whether bid was released for being idle.
func (in *instance) wasReleased(bid string) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	_, ok := in.released[bid]
	return ok
}

// releasedReason is what a client of a released browser is told.
func releasedReason(idle time.Duration) string {
	return "This browser was released after " + idle.String() + " without a connected client. Open the app again for a new one."
}

// releasedNotice is shown on the user's next browser.
func releasedNotice(idle time.Duration) string {
	return "Your previous browser was released after " + idle.String() + " without a connection; this is a new one."
}

// reloadURL gives the user a new browser after a crash: the Application URL
// for the single-instance strategies, the instance's URL otherwise.
func reloadURL(app wire.App, iid string) string {
	if app.Strategy == wire.SingleAppInstance || app.Strategy == wire.SingleInstancePerUser {
		return "/" + app.MountPoint
	}
	return "/" + app.MountPoint + "/a/" + iid
}

// close disposes the browser and tells its clients why.
func (b *vbrowser) close(ctx context.Context, reason string) {
	b.hub.Shutdown("This browser was closed: "+reason+".", "/"+b.inst.app.MountPoint)
	b.release()
}

// release gives the browser back to its pool (which runs the back sequence
// or destroys it), once.
func (b *vbrowser) release() {
	b.once.Do(func() {
		close(b.released)
		if b.hub != nil {
			// Back to its pool awake: a pool's next user or job expects
			// a page that paints.
			ctx, cancel := context.WithTimeout(context.Background(), engine.RestTimeout)
			b.hub.Wake(ctx)
			cancel()
		}
		b.lease.Return()
		if b.unquota != nil {
			b.unquota() // closing a browser frees its quota
		}
	})
}

// counts fills the instance, browser, client and frame counts of a load
// report. Frames of closed browsers stay counted.
func (a *AppManager) counts(l *wire.Load) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	l.Instances = len(a.instances)
	for _, in := range a.instances {
		in.mu.Lock()
		l.Browsers += len(in.browsers)
		for _, b := range in.browsers {
			l.Clients += b.hub.Count()
		}
		in.mu.Unlock()
	}
	f := a.w.counters.Stats()
	l.FramesProduced, l.FramesSent, l.FramesDropped = f.Produced, f.Sent, f.Dropped
}

// closeAll closes every instance here (worker shutdown). The master is not
// told they closed: they did not close for their users. Those it did not
// migrate away before the stop, it places again elsewhere from their
// stored state when this worker's connection ends.
func (a *AppManager) closeAll(ctx context.Context) {
	a.mu.RLock()
	idsList := make([]string, 0, len(a.instances))
	for id := range a.instances {
		idsList = append(idsList, id)
	}
	a.mu.RUnlock()
	for _, id := range idsList {
		a.dropInstance(ctx, id, func(b *vbrowser) { b.close(ctx, "worker shutting down") }, false)
	}
}
