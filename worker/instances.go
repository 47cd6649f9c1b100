package worker

import (
	"context"
	"encoding/json"
	"sort"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/ids"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
	"github.com/cloudbrowser-go/cloudbrowser/worker/failover"
	"github.com/cloudbrowser-go/cloudbrowser/worker/httpserve"
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
	// restoring are the browsers being restored from their snapshots (a
	// re-placed instance).
	restoring failover.Restoring
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

// instanceTable owns the instances hosted here: it creates them (from the
// master's stored state and snapshots when re-placed), closes, fences and
// drops them, and lists and counts them for registrations and load
// reports.
type instanceTable struct {
	w   *Worker
	log zerolog.Logger

	mu sync.RWMutex
	m  map[string]*instance
}

func newInstanceTable(w *Worker, log zerolog.Logger) *instanceTable {
	return &instanceTable{w: w, log: log, m: map[string]*instance{}}
}

// create creates (or restores) an instance; restored, when not nil, is
// closed once its browsers are restored.
func (t *instanceTable) create(ctx context.Context, req wire.CreateInstance) (restored <-chan struct{}, err error) {
	w := t.w
	wid, ok := ids.WorkerOf(req.InstanceID)
	if !ok || wid != w.id && !req.Restore {
		// Only a re-placement brings an id named after another worker.
		return nil, wire.Errorf(wire.CodeInvalid, "instance id %q does not belong to worker %s", req.InstanceID, w.id)
	}
	if req.App.ArchiveSize > 0 && req.App.Files == nil {
		// A large app this worker may not hold in this version yet.
		app, err := w.catalog.materialize(ctx, rmi.ConnFrom(ctx), req.App)
		if err != nil {
			return nil, err
		}
		req.App = app
	}
	if in, dup := t.get(req.InstanceID); dup {
		in.placedAgain(req.Epoch) // a retried call: already done
		return nil, nil
	}
	// An id the master already holds shared state for (a re-placement)
	// starts from that state, before anyone can use it.
	saved, err := w.replica.Load(ctx, req.InstanceID)
	if err != nil {
		return nil, err
	}
	var snaps []wire.BrowserSnapshot
	if req.Restore {
		if snaps, err = w.snaps.Load(ctx, req.InstanceID); err != nil {
			return nil, err
		}
	}
	app := req.App
	if app.Files == nil {
		if cur, ok := w.catalog.app(app.MountPoint); ok {
			app = cur
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if w.closing() {
		return nil, wire.Err(wire.CodeNoWorkers, "worker "+w.id+" is shutting down")
	}
	if in, dup := t.m[req.InstanceID]; dup {
		in.placedAgain(req.Epoch) // a retried call: already done
		return nil, nil
	}
	created := time.Now()
	if req.Restore && !req.Created.IsZero() {
		created = req.Created
	}
	in := &instance{
		info: wire.InstanceInfo{ID: req.InstanceID, App: app.MountPoint, Version: app.Version, Owner: req.Owner, Worker: w.id,
			Created: created, ClientIP: req.ClientIP, Epoch: req.Epoch, Name: req.Name},
		app: app, browsers: map[string]*vbrowser{}, byUser: map[string]string{},
		state: map[string]json.RawMessage{}, seqs: map[string]uint64{}, perms: map[string]httpserve.Role{}, w: w,
		idle: appIdle(app), released: map[string]string{}, noteFor: map[string]bool{},
	}
	in.restore(saved)
	t.m[req.InstanceID] = in
	// The snapshotted browsers are recreated in the background; requests
	// for them (a reconnecting client engine) wait until they are back.
	restored = w.snaps.RestoreAll(w.ctx, &in.restoring, in.info.ID, snaps, func(ctx context.Context, s wire.BrowserSnapshot) error {
		_, err := w.browsers.restoreBrowser(ctx, in, s)
		return err
	})
	t.log.Info().Str("instance", req.InstanceID).Str("app", app.MountPoint).Str("owner", req.Owner).Bool("restore", req.Restore).
		Bool("restored", saved.Found).Int("state_keys", len(saved.Values)).Int("browsers", len(snaps)).Msg("instance created")
	return restored, nil
}

// close closes an instance for good and tells the master; it reports
// whether the instance was here.
func (t *instanceTable) close(ctx context.Context, iid, reason string) bool {
	return t.drop(ctx, iid, func(b *vbrowser) { b.close(ctx, reason) }, true)
}

// fence drops instances the master gave to someone else (this worker was
// declared dead and another instance took their place): their clients are
// told why and where to go, and the master is not told (it knows).
func (t *instanceTable) fence(ctx context.Context, fenced []wire.FencedInstance) {
	for _, f := range fenced {
		reload := f.Location
		t.drop(ctx, f.ID, func(b *vbrowser) {
			if f.Moved {
				b.hub.MoveAway(f.Reason) // its Browser URL works on the new worker
			} else {
				b.hub.Shutdown(f.Reason, reload)
			}
			b.release()
		}, false)
		t.log.Warn().Str("instance", f.ID).Str("reason", f.Reason).Msg("instance fenced by the master: closed")
	}
}

// drop takes an instance out and ends each of its browsers with end; it
// reports whether the instance was here.
func (t *instanceTable) drop(ctx context.Context, iid string, end func(*vbrowser), tellMaster bool) bool {
	t.mu.Lock()
	in, ok := t.m[iid]
	delete(t.m, iid)
	t.mu.Unlock()
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
		t.w.instanceClosed(iid, in.epoch())
	}
	return true
}

func (t *instanceTable) get(iid string) (*instance, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	in, ok := t.m[iid]
	return in, ok
}

// all is a snapshot of the instances here.
func (t *instanceTable) all() []*instance {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]*instance, 0, len(t.m))
	for _, in := range t.m {
		out = append(out, in)
	}
	return out
}

// ofApp is a snapshot of the instances of one app.
func (t *instanceTable) ofApp(name string) []*instance {
	t.mu.RLock()
	defer t.mu.RUnlock()
	var out []*instance
	for _, in := range t.m {
		if in.app.MountPoint == name {
			out = append(out, in)
		}
	}
	return out
}

// list returns the instances for registration and load reports.
func (t *instanceTable) list() []wire.InstanceInfo {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]wire.InstanceInfo, 0, len(t.m))
	for _, in := range t.m {
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

// counts fills the instance, browser, client and frame counts of a load
// report, and the browsers automation sessions hold. Frames of closed
// browsers stay counted.
func (t *instanceTable) counts(l *wire.Load) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	l.Instances = len(t.m)
	for _, in := range t.m {
		in.mu.Lock()
		l.Browsers += len(in.browsers)
		for _, b := range in.browsers {
			l.Clients += b.hub.Count()
			if b.automated() {
				l.Automated = append(l.Automated, in.info.ID+"/"+b.id)
			}
			if b.cdpClients.Load() > 0 {
				l.AutomationClients = append(l.AutomationClients, in.info.ID+"/"+b.id)
			}
		}
		in.mu.Unlock()
	}
	f := t.w.counters.Stats()
	l.FramesProduced, l.FramesSent, l.FramesDropped = f.Produced, f.Sent, f.Dropped
}

// closeAll closes every instance here (worker shutdown). The master is not
// told they closed: they did not close for their users. Those it did not
// migrate away before the stop, it places again elsewhere from their
// stored state when this worker's connection ends.
func (t *instanceTable) closeAll(ctx context.Context) {
	t.mu.RLock()
	idsList := make([]string, 0, len(t.m))
	for id := range t.m {
		idsList = append(idsList, id)
	}
	t.mu.RUnlock()
	for _, id := range idsList {
		t.drop(ctx, id, func(b *vbrowser) { b.close(ctx, "worker shutting down") }, false)
	}
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

// wasReleased reports whether bid was released for being idle.
func (in *instance) wasReleased(bid string) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	_, ok := in.released[bid]
	return ok
}
