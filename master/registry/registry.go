// Package registry owns the instance table and everything about which
// worker owns which instance: the registered workers and their loads,
// placements through the balancer, placement epochs and fencing, failover
// of a dead worker's instances, live migration, the durable journal of the
// table and the checks on what a worker's call may touch. The master wires
// it to the rest (applications, store, proxies, job queue, metrics) through
// the small interfaces below and serves it over RMI and HTTP.
package registry

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/ids"
	"github.com/cloudbrowser-go/cloudbrowser/internal/quota"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/balance"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
	"github.com/rs/zerolog"
)

// Worker states as the master sees them.
const (
	stateConnected    = "connected"    // RMI connection up: placeable
	stateDisconnected = "disconnected" // connection lost; routes kept until declared dead
)

// workerRec is one registered worker.
type workerRec struct {
	info       wire.WorkerInfo
	ref        *rmi.Ref // the worker's Application Manager
	conn       *rmi.Conn
	state      string
	load       wire.Load
	registered time.Time
	// reported is when its last load report (or registration) came: a
	// worker whose reports stopped (stalled, cut off) is not offered for
	// Application URLs while others are fresh (peek).
	reported time.Time
	draining bool
	// leaving: the worker announced it stops (SIGTERM); its disconnection
	// removes it at once.
	leaving bool
	// deadTimer declares a disconnected worker dead if it neither comes
	// back nor is declared dead by the gossip layer first.
	deadTimer clock.Timer
	// pinging: a gossip "failed" verdict is being checked over RMI.
	pinging bool
	// back is closed when a disconnected worker registers again or is
	// declared dead: placements waiting for its instances look again.
	back chan struct{}
}

// wakeLocked ends the waits on a disconnected worker's return.
func (w *workerRec) wakeLocked() {
	if w.back != nil {
		close(w.back)
		w.back = nil
	}
}

type instanceRec struct {
	wire.InstanceInfo
	key string // strategy key ("" for multi-instance apps)
	// qUser and qIP are the quota keys the instance holds ("" = none).
	qUser, qIP string
	// moving is closed when the instance, whose worker died, has a worker
	// again (failover.go); nil when it is not moving.
	moving chan struct{}
	// migrating: a live migration (migrate.go); its old worker serves the
	// routes until the switch.
	migrating bool
	// unconfirmed: loaded from the store at the master's start and not yet
	// reported by its worker (durable.go).
	unconfirmed bool
}

// lostRec is a tombstone of an instance that died with its worker, so its
// URLs answer "lost" rather than "unknown".
type lostRec struct {
	app string
	at  time.Time
	// mergedInto: the instance gave way to this one (a duplicate of a
	// strategy key, fenced when its worker came back).
	mergedInto string
}

// maxTombstones bounds the tombstone table; the oldest go first.
const maxTombstones = 100_000

// Registry keeps the workers, their loads and the instance table. Its
// other sides share its lock and table: Placer places new instances with
// the balancer, Moves places a dead worker's instances again and migrates
// live ones, Gate checks what a worker's call may touch.
type Registry struct {
	log     zerolog.Logger
	clk     clock.Clock
	bal     *balance.Balancer
	apps    Apps
	period  time.Duration
	grace   time.Duration // disconnected -> dead if no re-register
	observe Observer      // nil: no metrics
	jobs    JobSlots      // nil: no job queue

	mu        sync.Mutex
	workers   map[string]*workerRec
	instances map[string]*instanceRec
	byKey     map[string]string // strategy key -> instance id
	// byUser lists, per app and user, the instances the user owns or that
	// are shared with them by name: landing pages must not scan the table
	// under r.mu, which routing waits on.
	byUser map[userKey]map[string]struct{}
	lost   map[string]lostRec

	epochs *epochs
	state  Store // drain flags, epochs, the journal (nil: not kept)
	// drainMu orders admin drains, store write included.
	drainMu sync.Mutex
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	lookups, placements atomic.Uint64

	// started and registeredOnce tell a cluster that is still coming up
	// (no worker has registered since the master started) from one whose
	// workers are gone (noWorkers).
	started        time.Time
	registeredOnce atomic.Bool

	// The other sides, set by New.
	Placer *Placer
	Moves  *Moves
	Gate   *Gate
	// journal writes the instance table to the store (durable.go).
	journal *journal
	quota   *instanceQuotas
	inval   invalidator
}

// startingGrace is how long after its start a master without any worker
// says "starting" rather than "no workers".
const startingGrace = 2 * time.Minute

// noWorkers is the error for "no worker can take this": CodeStarting
// while the cluster is coming up, else CodeNoWorkers with msg.
func (r *Registry) noWorkers(msg string) error {
	if !r.registeredOnce.Load() && clock.Since(r.clk, r.started) < startingGrace {
		return wire.Err(wire.CodeStarting, "the cluster is starting: no worker has registered yet")
	}
	return wire.Err(wire.CodeNoWorkers, msg)
}

// Config configures a Registry.
type Config struct {
	Logger   zerolog.Logger
	Balancer *balance.Balancer
	// Apps resolves an application by mount point.
	Apps Apps
	// ReportPeriod is asked of the workers.
	ReportPeriod time.Duration
	// DeadAfter declares a worker whose connection dropped dead if it does
	// not re-register in time, as a backstop to the gossip layer.
	DeadAfter time.Duration
	// Proxies are told about invalidated routes (nil: nobody).
	Proxies contract.Proxy
	// Quotas: the instance quotas apply here (nil = wire.DefaultQuotas).
	Quotas *wire.Quotas
	// Store keeps the placement epochs, the instance table and the admin's
	// drain flags across master restarts (nil = memory only).
	Store Store
	// Jobs is told which job slots the workers offer (nil = no jobs).
	Jobs JobSlots
	// Observer feeds the metrics (nil = none).
	Observer Observer
	// Clock decides liveness and failover timing: the dead-after timer,
	// stale reports, the retries and waits of moves (nil = clock.Real).
	Clock clock.Clock
}

// drainedBucket holds the workers an admin drained, by worker id. Only
// admin drains are kept: a leaving worker (SIGTERM) is draining too, but
// that ends with its process.
const drainedBucket = "drained"

// drainedRecord is one admin drain.
type drainedRecord struct {
	At time.Time `json:"at"`
}

// New returns an empty registry; its journal runs until Close.
func New(cfg Config) (*Registry, error) {
	config.OrDefault(&cfg.ReportPeriod, time.Second)
	config.OrDefault(&cfg.DeadAfter, 10*time.Second)
	if cfg.Clock == nil {
		cfg.Clock = clock.Real
	}
	q := wire.DefaultQuotas()
	if cfg.Quotas != nil {
		q = *cfg.Quotas
	}
	ep, err := newEpochs(cfg.Store)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	log := cfg.Logger.With().Str("component", "workers").Logger()
	r := &Registry{
		ctx: ctx, cancel: cancel,
		epochs: ep, state: cfg.Store,
		log:       log,
		clk:       cfg.Clock,
		bal:       cfg.Balancer,
		apps:      cfg.Apps,
		period:    cfg.ReportPeriod,
		grace:     cfg.DeadAfter,
		observe:   cfg.Observer,
		jobs:      cfg.Jobs,
		workers:   map[string]*workerRec{},
		instances: map[string]*instanceRec{},
		byKey:     map[string]string{},
		byUser:    map[userKey]map[string]struct{}{},
		lost:      map[string]lostRec{},
		started:   cfg.Clock.Now(),
		inval:     invalidator{proxies: cfg.Proxies, log: log},
	}
	r.quota = &instanceQuotas{limits: q, users: quota.NewCounter(), ips: quota.NewCounter(), observe: cfg.Observer}
	r.Placer = &Placer{r: r}
	r.Moves = &Moves{r: r, orphans: map[string]struct{}{}}
	r.Gate = &Gate{r: r, enrolled: map[string]bool{}, targets: map[string]string{}}
	r.journal = newJournal(r)
	if r.state != nil {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.journal.run()
		}()
	}
	return r, nil
}

// offerLocked is how many job slots worker w offers the queue now.
func offerLocked(w *workerRec) int {
	if w == nil || w.state != stateConnected || w.draining || w.leaving {
		return 0
	}
	if w.load.JobSlots > 0 {
		return w.load.JobSlots
	}
	return w.info.JobSlots
}

// publishSlots tells the job queue what worker id offers (outside r.mu).
func (r *Registry) publishSlots(id string) {
	if r.jobs == nil {
		return
	}
	r.mu.Lock()
	n := offerLocked(r.workers[id])
	r.mu.Unlock()
	r.jobs.Set(id, n)
}

// Register records a worker (new or reconnecting) and the instances it says
// it hosts, which rebuilds the table after a master restart. Instances the
// worker no longer owns (reconcileLocked) come back as fencing orders.
func (r *Registry) Register(info wire.WorkerInfo, insts []wire.InstanceInfo, ref *rmi.Ref) ([]wire.FencedInstance, error) {
	if !ids.ValidWorker(info.ID) {
		return nil, wire.Errorf(wire.CodeInvalid, "register: invalid worker id %q (%s)", info.ID, ids.WorkerRule)
	}
	if info.HTTPAddr == "" {
		return nil, wire.Err(wire.CodeInvalid, "register: worker "+info.ID+" gave no HTTP address")
	}
	if ref == nil {
		return nil, wire.Err(wire.CodeInvalid, "register: worker "+info.ID+" passed no Application Manager")
	}
	r.mu.Lock()
	w, ok := r.workers[info.ID]
	if ok && w.conn != nil && w.conn != ref.Conn() {
		w.conn.Close() // a stale connection of the same worker
	}
	// A new process under the same id has none of the old one's instances.
	restarted := ok && w.info.Incarnation != "" && info.Incarnation != w.info.Incarnation
	if !ok {
		// New to this master (or to this run of it): an admin's drain
		// outlives both.
		w = &workerRec{draining: r.drainedStored(info.ID)}
		r.workers[info.ID] = w
	}
	if w.deadTimer != nil {
		w.deadTimer.Stop()
		w.deadTimer = nil
	}
	w.info, w.ref, w.conn, w.state = info, ref, ref.Conn(), stateConnected
	w.wakeLocked()
	r.registeredOnce.Store(true)
	now := r.clk.Now()
	w.registered = now
	w.reported = now
	adopted := 0
	var fenced []wire.FencedInstance
	for _, in := range insts {
		if in.ID == "" || in.Worker != info.ID {
			continue
		}
		if !r.epochs.issued(in.Epoch) {
			fenced = append(fenced, wire.FencedInstance{ID: in.ID, Reason: unissuedReason, Location: "/" + in.App})
			r.log.Warn().Str("instance", in.ID).Str("worker", info.ID).Uint64("epoch", in.Epoch).
				Msg("instance fenced: its epoch was never issued by this master")
			continue
		}
		if f := r.reconcileLocked(info.ID, in, now); f != nil {
			fenced = append(fenced, *f)
			r.log.Warn().Str("instance", in.ID).Str("worker", info.ID).Uint64("epoch", in.Epoch).Msg("instance fenced: its place was taken while the worker was unreachable")
			continue
		}
		if _, wasLost := r.lost[in.ID]; wasLost {
			r.log.Info().Str("instance", in.ID).Str("worker", info.ID).Msg("instance adopted again: its worker came back")
		}
		if cur, ok := r.instances[in.ID]; ok && cur.moving != nil {
			// Back before the instance found a new home: it stays here.
			r.Moves.settleLocked(cur)
			r.log.Info().Str("instance", in.ID).Str("worker", info.ID).Msg("moving instance kept by its worker, which came back")
		}
		r.addInstanceLocked(in, "", "", false)
		adopted++
	}
	lostHere := r.unreportedLocked(info.ID, insts, restarted)
	draining := w.draining
	r.mu.Unlock()
	if lostHere > 0 {
		r.log.Warn().Str("worker", info.ID).Int("instances", lostHere).Bool("restarted", restarted).
			Msg("the worker registered without instances the table gives it: placing them again")
	}

	r.bal.Add(info.ID)
	if draining {
		_ = r.bal.SetDraining(info.ID, true)
	}
	r.log.Info().Str("worker", info.ID).Str("http", info.HTTPAddr).Str("peer", ref.Conn().RemoteAddr().String()).
		Int("instances", adopted).Int("fenced", len(fenced)).Msg("worker registered")
	r.Moves.kick() // orphans waiting for a live worker
	r.publishSlots(info.ID)
	return fenced, nil
}

// unreportedLocked orphans the instances the table gives worker wid that
// its registration did not report, when that means the worker lost them:
// it is a new process (restarted), or the record came from the store (a
// master restart, when nothing can be in flight to the worker). A
// reconnection of the same process may race a placement in flight, so
// there an unreported instance is left alone. It returns how many.
func (r *Registry) unreportedLocked(wid string, insts []wire.InstanceInfo, restarted bool) int {
	reported := make(map[string]bool, len(insts))
	for _, in := range insts {
		reported[in.ID] = true
	}
	n := 0
	for iid, in := range r.instances {
		if in.Worker != wid || reported[iid] || in.migrating || (!restarted && !in.unconfirmed) {
			continue
		}
		// Still unconfirmed (if loaded from the store) until placed again:
		// a worker reporting it under a newer epoch meanwhile keeps it.
		r.Moves.orphanLocked(in)
		n++
	}
	return n
}

// userKey names one user's instances of one app in byUser.
type userKey struct{ app, user string }

// indexLocked adds (on) or removes iid from user's list.
func (r *Registry) indexLocked(app, user, iid string, on bool) {
	k := userKey{app, user}
	set := r.byUser[k]
	switch {
	case on && set == nil:
		r.byUser[k] = map[string]struct{}{iid: {}}
	case on:
		set[iid] = struct{}{}
	case set != nil:
		delete(set, iid)
		if len(set) == 0 {
			delete(r.byUser, k)
		}
	}
}

// indexRecLocked lists or unlists an instance for its owner and the users
// it is shared with.
func (r *Registry) indexRecLocked(in *instanceRec, on bool) {
	r.indexLocked(in.App, in.Owner, in.ID, on)
	for p := range in.Shared {
		r.indexLocked(in.App, p, in.ID, on)
	}
}

// addInstanceLocked puts an instance in the table and its strategy key.
// A new instance brings the quota keys reserved for it (reserved); an
// adopted one (a worker registering) is counted against its owner and
// address whatever they hold, since it exists.
func (r *Registry) addInstanceLocked(in wire.InstanceInfo, qUser, qIP string, reserved bool) {
	if old, ok := r.instances[in.ID]; ok { // re-registered: its grants may have changed
		r.indexRecLocked(old, false)
		r.quota.release(old.qUser, old.qIP)
	}
	rec := &instanceRec{InstanceInfo: in, qUser: qUser, qIP: qIP}
	app, ok := r.apps.App(in.App)
	if ok {
		rec.key = strategyKey(app, in.Owner)
	}
	if !reserved && countsForQuota(app, ok) {
		if quota.Counted(in.Owner, r.quota.limits.InstancesPerUser) {
			rec.qUser = in.Owner
			r.quota.users.Add(in.Owner)
		}
		if ip := quota.AddrKey(in.ClientIP); quota.Counted(ip, r.quota.limits.InstancesPerIP) {
			rec.qIP = ip
			r.quota.ips.Add(ip)
		}
	}
	r.instances[in.ID] = rec
	r.journal.markLocked(in.ID)
	r.indexRecLocked(rec, true)
	if rec.key != "" {
		if _, taken := r.byKey[rec.key]; !taken {
			r.byKey[rec.key] = in.ID
		}
	}
	delete(r.lost, in.ID)
}

// strategyKey names the one instance an app's strategy allows per app or per
// user; "" means every placement creates a new instance.
func strategyKey(app wire.App, user string) string {
	switch app.Strategy {
	case wire.SingleAppInstance:
		return app.MountPoint
	case wire.SingleInstancePerUser:
		return app.MountPoint + "\x00" + user
	}
	return ""
}

// Disconnected handles the loss of a worker's RMI connection: no new
// placements at once; routes stay until the worker is declared dead by the
// gossip layer or the grace period ends without a re-registration.
func (r *Registry) Disconnected(id string, c *rmi.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok := r.workers[id]
	if !ok || w.conn != c {
		return // already replaced or removed
	}
	w.state = stateDisconnected
	w.conn, w.ref = nil, nil
	if w.back == nil {
		w.back = make(chan struct{})
	}
	r.bal.Remove(id)
	if r.jobs != nil {
		go r.jobs.Set(id, 0)
	}
	if w.leaving {
		// It said it stops: no reason to wait for it.
		go r.Dead(id, "left")
		return
	}
	w.deadTimer = r.clk.AfterFunc(r.grace, func() { r.Dead(id, "no re-registration after disconnect") })
	r.log.Warn().Str("worker", id).Dur("grace", r.grace).Msg("worker connection lost; not placing on it")
}

// DeadMember handles the gossip layer's verdict on member name of worker
// id. A late verdict on an earlier incarnation of a restarted worker (same
// id, new member name) is ignored.
func (r *Registry) DeadMember(id, member, reason string) {
	r.mu.Lock()
	w, ok := r.workers[id]
	stale := ok && w.staleVerdict(member)
	r.mu.Unlock()
	if stale {
		r.log.Info().Str("worker", id).Str("member", member).Msg("ignoring gossip verdict on an earlier incarnation")
		return
	}
	r.Dead(id, reason)
}

// staleVerdict: gossip speaks of an earlier incarnation of the worker
// (member is not the gossip name it registered with).
func (w *workerRec) staleVerdict(member string) bool {
	return w.info.Gossip != "" && w.info.Gossip != member
}

// PingTimeout bounds the RMI check of a worker gossip says failed (a
// variable for tests).
var PingTimeout = 5 * time.Second

// SuspectMember handles gossip's "failed" verdict on a worker. UDP probes
// miss their deadlines on an overloaded machine (seen in CI: two of three
// busy workers "failed" while their RMI connections carried traffic), and
// removing a live worker moves its instances for nothing. So a worker the
// master still has a connection to is asked over that connection first,
// and removed only if it does not answer within PingTimeout. A worker
// that is really gone closes its connection (process dead) or does not
// answer (frozen, partitioned).
func (r *Registry) SuspectMember(id, member, reason string) {
	r.mu.Lock()
	w, ok := r.workers[id]
	if ok && w.pinging {
		r.mu.Unlock()
		return // the check under way decides
	}
	if !ok || w.staleVerdict(member) || w.ref == nil || (w.conn != nil && w.conn.Err() != nil) {
		r.mu.Unlock()
		r.DeadMember(id, member, reason) // unknown, stale or without a live connection: as before
		return
	}
	w.pinging = true
	ref := w.ref
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		ctx, cancel := clock.WithTimeout(r.ctx, r.clk, PingTimeout)
		err := contract.WorkerAppsClient{R: ref}.Ping(ctx)
		cancel()
		r.mu.Lock()
		if cur, ok := r.workers[id]; ok && cur.ref == ref {
			cur.pinging = false
		}
		r.mu.Unlock()
		if err == nil {
			r.log.Warn().Str("worker", id).Str("member", member).Str("reason", reason).
				Msg("gossip says the worker failed, but it answers over RMI: kept")
			return
		}
		if r.ctx.Err() != nil {
			return
		}
		r.log.Info().Str("worker", id).Err(err).Msg("a worker gossip says failed does not answer over RMI either")
		r.DeadMember(id, member, reason)
	}()
}

// Dead removes a worker and everything it hosted. Its instances become
// tombstones; proxies drop their routes.
func (r *Registry) Dead(id, reason string) {
	r.mu.Lock()
	w, ok := r.workers[id]
	if !ok {
		r.mu.Unlock()
		return
	}
	if w.deadTimer != nil {
		w.deadTimer.Stop()
	}
	conn := w.conn
	delete(r.workers, id)
	w.wakeLocked() // its instances are now moving (or lost): waiters look again
	now := r.clk.Now()
	lost, moving := 0, 0
	for iid, in := range r.instances {
		if in.Worker != id {
			continue
		}
		if holder := r.Moves.supersededLocked(in); holder != "" {
			// Its strategy key went to another instance while this worker
			// was unreachable: that one goes on, this one gives way.
			r.Moves.giveWayLocked(in, holder, now)
			continue
		}
		if in.migrating {
			// A live migration is restoring it elsewhere: its outcome
			// decides (MigrateOne orphans it if it fails).
			moving++
			continue
		}
		if _, ok := r.apps.App(in.App); ok {
			r.Moves.orphanLocked(in) // placed again on a live worker (failover.go)
			moving++
			continue
		}
		r.removeInstanceLocked(iid)
		r.lost[iid] = lostRec{app: in.App, at: now}
		lost++
	}
	r.trimLostLocked()
	r.mu.Unlock()
	r.bal.Remove(id)
	if moving > 0 {
		r.Moves.kick()
	}
	if conn != nil {
		conn.Close()
	}
	if r.jobs != nil {
		r.jobs.Remove(r.ctx, id)
	}
	r.log.Warn().Str("worker", id).Str("reason", reason).Int("instances_lost", lost).Int("instances_moving", moving).Msg("worker removed")
	r.inval.worker(id)
}

func (r *Registry) removeInstanceLocked(iid string) *instanceRec {
	in, ok := r.instances[iid]
	if !ok {
		return nil
	}
	delete(r.instances, iid)
	r.journal.markLocked(iid)
	r.Moves.settleLocked(in) // a move in progress ends with it
	r.indexRecLocked(in, false)
	r.quota.release(in.qUser, in.qIP) // closing an instance frees its quota
	if in.key != "" && r.byKey[in.key] == iid {
		delete(r.byKey, in.key)
	}
	return in
}

func (r *Registry) trimLostLocked() {
	if len(r.lost) <= maxTombstones {
		return
	}
	type kv struct {
		id string
		at time.Time
	}
	all := make([]kv, 0, len(r.lost))
	for id, l := range r.lost {
		all = append(all, kv{id, l.at})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].at.Before(all[j].at) })
	for _, e := range all[:len(all)-maxTombstones] {
		delete(r.lost, e.id)
	}
}

// Report records a load report.
func (r *Registry) Report(id string, l wire.Load) error {
	r.mu.Lock()
	w, ok := r.workers[id]
	slotsChanged := false
	if ok {
		slotsChanged = w.load.JobSlots != l.JobSlots
		w.load = l
		w.reported = r.clk.Now()
	}
	r.mu.Unlock()
	if !ok {
		return wire.Err(wire.CodeUnknownWorker, "report from unregistered worker "+id)
	}
	if slotsChanged {
		r.publishSlots(id)
	}
	if err := r.bal.Report(id, l.Total, l.Instances); err != nil && !errors.Is(err, balance.ErrUnknownWorker) {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// InstanceClosed removes an instance the worker closed for good (its user
// or owner closed it, its app was removed). Only the instance's current
// owner, under the current epoch and while the master is not moving it, can
// do so: a worker's belated word on an instance that has moved on must not
// remove it (and its stored state with it).
func (r *Registry) InstanceClosed(workerID string, c wire.ClosedInstance) error {
	r.mu.Lock()
	in, ok := r.instances[c.ID]
	switch {
	case !ok || in.Worker != workerID:
		r.mu.Unlock()
		return wire.Err(wire.CodeUnknownInstance, "instance "+c.ID+" is not on worker "+workerID)
	case !ownedLocked(in, workerID, c.Epoch):
		r.mu.Unlock()
		return wire.Errorf(wire.CodeInstanceLost, "instance %s: epoch %d is not the current placement (%d) or the instance is moving: kept", c.ID, c.Epoch, in.Epoch)
	}
	r.removeInstanceLocked(c.ID)
	r.mu.Unlock()
	r.bal.Release(workerID)
	r.inval.instances(c.ID)
	return nil
}

// Rename records an instance's new name.
func (r *Registry) Rename(workerID, iid, name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	in, ok := r.instances[iid]
	if !ok || in.Worker != workerID {
		return wire.Err(wire.CodeUnknownInstance, "instance "+iid+" is not on worker "+workerID)
	}
	in.Name = name
	return nil
}

// Share records a grant on an instance to a named user (role "" or "none"
// removes it), so the user's landing page lists the instance. The map is
// replaced, never changed in place: copies handed out by userInstances are
// encoded after the lock is released.
func (r *Registry) Share(workerID, iid, principal, role string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	in, ok := r.instances[iid]
	if !ok || in.Worker != workerID {
		return wire.Err(wire.CodeUnknownInstance, "instance "+iid+" is not on worker "+workerID)
	}
	shared := make(map[string]string, len(in.Shared)+1)
	for p, r := range in.Shared {
		shared[p] = r
	}
	if role == "" || role == "none" {
		delete(shared, principal)
	} else {
		shared[principal] = role
	}
	if principal != in.Owner {
		r.indexLocked(in.App, principal, iid, shared[principal] != "")
	}
	if len(shared) == 0 {
		shared = nil
	}
	in.Shared = shared
	return nil
}

// UserInstances lists the instances of app that user owns or that were
// shared with them by name, oldest first.
func (r *Registry) UserInstances(app, user string) []wire.InstanceInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	set := r.byUser[userKey{app, user}]
	out := make([]wire.InstanceInfo, 0, len(set))
	for iid := range set {
		out = append(out, r.instances[iid].InstanceInfo)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out
}

// Route answers a proxy's lookup.
func (r *Registry) Route(req wire.RouteRequest) (wire.RouteReply, error) {
	r.lookups.Add(1)
	if r.observe != nil {
		defer r.observe.Lookup(req.Kind, time.Now())
	}
	switch req.Kind {
	case wire.RouteApp:
		app, ok := r.apps.App(req.App)
		if !ok {
			return wire.RouteReply{}, wire.Err(wire.CodeUnknownApp, "no application is mounted at /"+req.App)
		}
		if app.Disabled {
			return wire.RouteReply{}, wire.Err(wire.CodeAppDisabled, "application /"+req.App+" is disabled")
		}
		return r.peek()
	case wire.RouteInstance:
		r.mu.Lock()
		defer r.mu.Unlock()
		in, ok := r.instances[req.InstanceID]
		if !ok || (req.App != "" && in.App != req.App) {
			if l, lost := r.lost[req.InstanceID]; lost && (req.App == "" || l.app == req.App) {
				if l.mergedInto != "" {
					return wire.RouteReply{}, wire.Err(wire.CodeInstanceMerged, "instance "+req.InstanceID+" gave way to "+l.mergedInto)
				}
				return wire.RouteReply{}, wire.Err(wire.CodeInstanceLost, "instance "+req.InstanceID+" was lost with its worker")
			}
			return wire.RouteReply{}, wire.Err(wire.CodeUnknownInstance, "no instance "+req.InstanceID)
		}
		if in.moving != nil && !in.migrating {
			msg := "instance " + req.InstanceID + " is being placed again: its worker stopped"
			if len(r.workers) == 0 {
				msg = "instance " + req.InstanceID + " waits for a worker: none is live"
			}
			return wire.RouteReply{}, wire.Err(wire.CodeInstanceMoving, msg)
		}
		w := r.workers[in.Worker]
		// A disconnected worker keeps its routes until declared dead: a
		// short RMI outage must not break live users.
		return routeTo(in.Worker, w.info), nil
	}
	return wire.RouteReply{}, wire.Err(wire.CodeInvalid, "unknown route kind "+req.Kind)
}

// staleReports: a worker that has not reported for this many report
// periods is passed over by peek while another is fresh.
const staleReports = 3

// peek chooses the worker that serves an Application URL. The request only
// runs the strategy (the instance itself is placed by place), so it takes the
// least projected load without adding a projection; ties go round-robin.
func (r *Registry) peek() (wire.RouteReply, error) {
	snap := r.bal.Snapshot()
	r.mu.Lock()
	defer r.mu.Unlock()
	var cands, fresh []balance.WorkerLoad
	stale := r.clk.Now().Add(-staleReports * r.period)
	for _, s := range snap {
		if w, ok := r.workers[s.ID]; ok && w.state == stateConnected {
			cands = append(cands, s)
			if w.reported.After(stale) {
				fresh = append(fresh, s)
			}
		}
	}
	if len(fresh) > 0 {
		// A worker whose reports stopped is likely stalled or cut off (the
		// gossip layer and the ping take seconds to say so): its users'
		// requests would hang there.
		cands = fresh
	}
	best, ok := r.bal.Peek(cands)
	if !ok {
		return wire.RouteReply{}, r.noWorkers("no worker is available")
	}
	return routeTo(best.ID, r.workers[best.ID].info), nil
}

// routeTo is the route to a worker: its address, and its handoff socket
// for proxies on its host.
func routeTo(id string, info wire.WorkerInfo) wire.RouteReply {
	return wire.RouteReply{WorkerID: id, Addr: info.HTTPAddr, Handoff: info.Handoff, Host: info.Host}
}

// SetDraining marks a worker (not) eligible for new instances, on an
// admin's order: the flag is stored, so it survives master restarts and
// applies when the worker registers again. Undraining a worker that is not
// registered clears its stored flag (a drained worker that went away).
func (r *Registry) SetDraining(id string, on bool) error {
	// drainMu, not r.mu, over the store write: routing waits on r.mu.
	r.drainMu.Lock()
	defer r.drainMu.Unlock()
	r.mu.Lock()
	_, ok := r.workers[id]
	r.mu.Unlock()
	if !ok && (on || !r.drainedStored(id)) {
		return wire.Err(wire.CodeUnknownWorker, "no worker "+id)
	}
	if r.state != nil {
		var err error
		if on {
			err = r.state.Put(drainedBucket, id, drainedRecord{At: r.clk.Now().UTC()})
		} else {
			err = r.state.Delete(drainedBucket, id)
		}
		if err != nil {
			return fmt.Errorf("drain flag of worker %s: %w", id, err)
		}
	}
	r.mu.Lock()
	if w, ok := r.workers[id]; ok {
		w.draining = on
	}
	r.mu.Unlock()
	_ = r.bal.SetDraining(id, on) // unknown to the balancer while disconnected
	r.publishSlots(id)
	return nil
}

// drainedStored reports whether an admin drain of worker id is stored.
func (r *Registry) drainedStored(id string) bool {
	if r.state == nil {
		return false
	}
	return r.state.Has(drainedBucket, id)
}

// RefOf is worker wid's Application Manager (nil: unknown or disconnected).
func (r *Registry) RefOf(wid string) *rmi.Ref {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w, ok := r.workers[wid]; ok {
		return w.ref
	}
	return nil
}

// Host returns the worker hosting an instance and its Application Manager
// (nil while disconnected); ok is false for an unknown instance.
func (r *Registry) Host(iid string) (ref *rmi.Ref, workerID string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	in, ok := r.instances[iid]
	if !ok {
		return nil, "", false
	}
	if w, ok := r.workers[in.Worker]; ok {
		ref = w.ref
	}
	return ref, in.Worker, true
}

// Refs returns the connected workers' Application Managers.
func (r *Registry) Refs() map[string]*rmi.Ref {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]*rmi.Ref, len(r.workers))
	for id, w := range r.workers {
		if w.ref != nil {
			out[id] = w.ref
		}
	}
	return out
}

// Status fills the worker and instance parts of a ClusterStatus.
func (r *Registry) Status(st *wire.ClusterStatus) {
	proj := map[string]uint64{}
	for _, s := range r.bal.Snapshot() {
		proj[s.ID] = s.Projected
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	stale := r.clk.Now().Add(-staleReports * r.period)
	for _, w := range r.workers {
		st.Workers = append(st.Workers, wire.WorkerStatus{
			WorkerInfo: w.info, State: w.state, Draining: w.draining, Load: w.load,
			Projected: proj[w.info.ID], Registered: w.registered, Pools: w.load.Pools,
			Reported: w.reported, Silent: w.state == stateConnected && !w.reported.After(stale),
		})
	}
	sort.Slice(st.Workers, func(i, j int) bool { return st.Workers[i].ID < st.Workers[j].ID })
	for _, in := range r.instances {
		st.Instances = append(st.Instances, in.InstanceInfo)
	}
	sort.Slice(st.Instances, func(i, j int) bool { return st.Instances[i].ID < st.Instances[j].ID })
	st.RouteLookups = r.lookups.Load()
	st.Placements = r.placements.Load()
}

// Close stops timers.
func (r *Registry) Close() {
	r.cancel()
	r.mu.Lock()
	for _, w := range r.workers {
		if w.deadTimer != nil {
			w.deadTimer.Stop()
		}
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// WorkerView is a connected worker's state for metrics and for the
// probes of its advertised address (master/reach).
type WorkerView struct {
	ID        string
	Load      wire.Load
	Projected uint64
	Draining  bool
	// HTTPAddr and Incarnation are the worker's registration's.
	HTTPAddr, Incarnation string
}

// Views lists the connected workers.
func (r *Registry) Views() []WorkerView {
	proj := map[string]uint64{}
	for _, s := range r.bal.Snapshot() {
		proj[s.ID] = s.Projected
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]WorkerView, 0, len(r.workers))
	for id, w := range r.workers {
		if w.state == stateConnected {
			out = append(out, WorkerView{ID: id, Load: w.load, Projected: proj[id], Draining: w.draining,
				HTTPAddr: w.info.HTTPAddr, Incarnation: w.info.Incarnation})
		}
	}
	return out
}

// InstanceCount is the size of the instance table.
func (r *Registry) InstanceCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.instances)
}

// Known says whether instance iid is in the table.
func (r *Registry) Known(iid string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.instances[iid]
	return ok
}
