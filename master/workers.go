package master

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/singleflight"

	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/ids"
	"github.com/cloudbrowser-go/cloudbrowser/internal/quota"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/balance"
	"github.com/cloudbrowser-go/cloudbrowser/master/state"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
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
	deadTimer *time.Timer
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

// WorkerManager keeps the workers, their loads and the instance table, and
// places new instances with the balancer.
type WorkerManager struct {
	log     zerolog.Logger
	bal     *balance.Balancer
	apps    func(name string) (wire.App, bool)
	period  time.Duration
	grace   time.Duration  // disconnected -> dead if no re-register
	proxies contract.Proxy // nil: no one to tell

	// observeLookup and observePlace feed the metrics (nil in tests).
	observeLookup func(kind string, start time.Time)
	observePlace  func(strategy, outcome string)
	// observeRefusal counts a quota refusal by limit (nil in tests).
	observeRefusal func(limit string)

	// quotas bound the instances per user and per client address,
	// cluster-wide (every placement goes through this manager). The
	// counters hold reservations of creations in progress too, so
	// concurrent placements cannot overshoot.
	quotas               wire.Quotas
	quotaUsers, quotaIPs *quota.Counter

	mu        sync.Mutex
	workers   map[string]*workerRec
	instances map[string]*instanceRec
	byKey     map[string]string // strategy key -> instance id
	// byUser lists, per app and user, the instances the user owns or that
	// are shared with them by name: landing pages must not scan the table
	// under m.mu, which routing waits on.
	byUser map[userKey]map[string]struct{}
	lost   map[string]lostRec

	sf     singleflight.Group
	epochs *epochs
	state  *state.Store // drain flags (nil: not kept)
	// drainMu orders admin drains, store write included.
	drainMu sync.Mutex
	// enrolMu orders enrolments (identity.go); enrolled caches the ids
	// known to have registered.
	enrolMu  sync.Mutex
	enrolled map[string]bool
	// targets are placements in flight: instance id -> the worker asked to
	// create it (mayRead).
	targets map[string]string
	// journal writes the instance table to the store (durable.go).
	journal *journal
	// orphans are instances of dead workers waiting to be placed again;
	// moving is set while a round of re-placements runs (failover.go).
	orphans map[string]struct{}
	moving  bool
	// stopping: the cluster is shutting down; leaving workers keep their
	// instances (there is nowhere to move them).
	stopping atomic.Bool
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup

	lookups, placements atomic.Uint64

	jobSlots func(id string, slots int)
	jobsGone func(id string)

	// started and registeredOnce tell a cluster that is still coming up
	// (no worker has registered since the master started) from one whose
	// workers are gone (noWorkers).
	started        time.Time
	registeredOnce atomic.Bool
}

// startingGrace is how long after its start a master without any worker
// says "starting" rather than "no workers".
const startingGrace = 2 * time.Minute

// noWorkers is the error for "no worker can take this": CodeStarting
// while the cluster is coming up, else CodeNoWorkers with msg.
func (m *WorkerManager) noWorkers(msg string) error {
	if !m.registeredOnce.Load() && time.Since(m.started) < startingGrace {
		return wire.Err(wire.CodeStarting, "the cluster is starting: no worker has registered yet")
	}
	return wire.Err(wire.CodeNoWorkers, msg)
}

// WorkerManagerConfig configures a WorkerManager.
type WorkerManagerConfig struct {
	Logger   zerolog.Logger
	Balancer *balance.Balancer
	// Apps resolves an application by mount point.
	Apps func(name string) (wire.App, bool)
	// ReportPeriod is asked of the workers.
	ReportPeriod time.Duration
	// DeadAfter declares a worker whose connection dropped dead if it does
	// not re-register in time, as a backstop to the gossip layer.
	DeadAfter time.Duration
	// Proxies are told about invalidated routes (nil: nobody).
	Proxies contract.Proxy
	// Quotas: the instance quotas apply here (nil = wire.DefaultQuotas).
	Quotas *wire.Quotas
	// Epochs hands out placement epochs (nil = in memory only).
	Epochs *epochs
	// State keeps the admin's drain flags across master restarts (nil =
	// not kept).
	State *state.Store
	// JobSlots is told how many job slots a worker offers now (0: none,
	// while it is disconnected, draining or leaving) and Gone when it is
	// removed (its running jobs are queued again). nil = no jobs.
	JobSlots func(id string, slots int)
	JobsGone func(id string)
}

// drainedBucket holds the workers an admin drained, by worker id. Only
// admin drains are kept: a leaving worker (SIGTERM) is draining too, but
// that ends with its process.
const drainedBucket = "drained"

// drainedRecord is one admin drain.
type drainedRecord struct {
	At time.Time `json:"at"`
}

// NewWorkerManager returns an empty manager.
func NewWorkerManager(cfg WorkerManagerConfig) *WorkerManager {
	config.OrDefault(&cfg.ReportPeriod, time.Second)
	config.OrDefault(&cfg.DeadAfter, 10*time.Second)
	q := wire.DefaultQuotas()
	if cfg.Quotas != nil {
		q = *cfg.Quotas
	}
	ep := cfg.Epochs
	if ep == nil {
		ep = &epochs{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &WorkerManager{
		ctx: ctx, cancel: cancel, orphans: map[string]struct{}{},
		epochs: ep, state: cfg.State,
		quotas: q, quotaUsers: quota.NewCounter(), quotaIPs: quota.NewCounter(),
		log:       cfg.Logger.With().Str("component", "workers").Logger(),
		bal:       cfg.Balancer,
		apps:      cfg.Apps,
		period:    cfg.ReportPeriod,
		grace:     cfg.DeadAfter,
		proxies:   cfg.Proxies,
		workers:   map[string]*workerRec{},
		instances: map[string]*instanceRec{},
		byKey:     map[string]string{},
		byUser:    map[userKey]map[string]struct{}{},
		lost:      map[string]lostRec{},
		enrolled:  map[string]bool{},
		targets:   map[string]string{},
		journal:   newJournal(),
		jobSlots:  cfg.JobSlots,
		jobsGone:  cfg.JobsGone,
		started:   time.Now(),
	}
	if m.state != nil {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.runJournal()
		}()
	}
	return m
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

// publishSlots tells the job queue what worker id offers (outside m.mu).
func (m *WorkerManager) publishSlots(id string) {
	if m.jobSlots == nil {
		return
	}
	m.mu.Lock()
	n := offerLocked(m.workers[id])
	m.mu.Unlock()
	m.jobSlots(id, n)
}

// register records a worker (new or reconnecting) and the instances it says
// it hosts, which rebuilds the table after a master restart. Instances the
// worker no longer owns (reconcileLocked) come back as fencing orders.
func (m *WorkerManager) register(info wire.WorkerInfo, insts []wire.InstanceInfo, ref *rmi.Ref) ([]wire.FencedInstance, error) {
	if !ids.ValidWorker(info.ID) {
		return nil, wire.Errorf(wire.CodeInvalid, "register: invalid worker id %q (%s)", info.ID, ids.WorkerRule)
	}
	if info.HTTPAddr == "" {
		return nil, wire.Err(wire.CodeInvalid, "register: worker "+info.ID+" gave no HTTP address")
	}
	if ref == nil {
		return nil, wire.Err(wire.CodeInvalid, "register: worker "+info.ID+" passed no Application Manager")
	}
	m.mu.Lock()
	w, ok := m.workers[info.ID]
	if ok && w.conn != nil && w.conn != ref.Conn() {
		w.conn.Close() // a stale connection of the same worker
	}
	// A new process under the same id has none of the old one's instances.
	restarted := ok && w.info.Incarnation != "" && info.Incarnation != w.info.Incarnation
	if !ok {
		// New to this master (or to this run of it): an admin's drain
		// outlives both.
		w = &workerRec{draining: m.drainedStored(info.ID)}
		m.workers[info.ID] = w
	}
	if w.deadTimer != nil {
		w.deadTimer.Stop()
		w.deadTimer = nil
	}
	w.info, w.ref, w.conn, w.state = info, ref, ref.Conn(), stateConnected
	w.wakeLocked()
	m.registeredOnce.Store(true)
	w.registered = time.Now()
	w.reported = w.registered
	adopted := 0
	var fenced []wire.FencedInstance
	now := time.Now()
	for _, in := range insts {
		if in.ID == "" || in.Worker != info.ID {
			continue
		}
		if !m.epochs.issued(in.Epoch) {
			fenced = append(fenced, wire.FencedInstance{ID: in.ID, Reason: unissuedReason, Location: "/" + in.App})
			m.log.Warn().Str("instance", in.ID).Str("worker", info.ID).Uint64("epoch", in.Epoch).
				Msg("instance fenced: its epoch was never issued by this master")
			continue
		}
		if f := m.reconcileLocked(info.ID, in, now); f != nil {
			fenced = append(fenced, *f)
			m.log.Warn().Str("instance", in.ID).Str("worker", info.ID).Uint64("epoch", in.Epoch).Msg("instance fenced: its place was taken while the worker was unreachable")
			continue
		}
		if _, wasLost := m.lost[in.ID]; wasLost {
			m.log.Info().Str("instance", in.ID).Str("worker", info.ID).Msg("instance adopted again: its worker came back")
		}
		if cur, ok := m.instances[in.ID]; ok && cur.moving != nil {
			// Back before the instance found a new home: it stays here.
			m.settleLocked(cur)
			m.log.Info().Str("instance", in.ID).Str("worker", info.ID).Msg("moving instance kept by its worker, which came back")
		}
		m.addInstanceLocked(in, "", "", false)
		adopted++
	}
	lostHere := m.unreportedLocked(info.ID, insts, restarted)
	draining := w.draining
	m.mu.Unlock()
	if lostHere > 0 {
		m.log.Warn().Str("worker", info.ID).Int("instances", lostHere).Bool("restarted", restarted).
			Msg("the worker registered without instances the table gives it: placing them again")
	}

	m.bal.Add(info.ID)
	if draining {
		_ = m.bal.SetDraining(info.ID, true)
	}
	m.log.Info().Str("worker", info.ID).Str("http", info.HTTPAddr).Str("peer", ref.Conn().RemoteAddr().String()).
		Int("instances", adopted).Int("fenced", len(fenced)).Msg("worker registered")
	m.kickMoves() // orphans waiting for a live worker
	m.publishSlots(info.ID)
	return fenced, nil
}

// unreportedLocked orphans the instances the table gives worker wid that
// its registration did not report, when that means the worker lost them:
// it is a new process (restarted), or the record came from the store (a
// master restart, when nothing can be in flight to the worker). A
// reconnection of the same process may race a placement in flight, so
// there an unreported instance is left alone. It returns how many.
func (m *WorkerManager) unreportedLocked(wid string, insts []wire.InstanceInfo, restarted bool) int {
	reported := make(map[string]bool, len(insts))
	for _, in := range insts {
		reported[in.ID] = true
	}
	n := 0
	for iid, in := range m.instances {
		if in.Worker != wid || reported[iid] || in.migrating || (!restarted && !in.unconfirmed) {
			continue
		}
		// Still unconfirmed (if loaded from the store) until placed again:
		// a worker reporting it under a newer epoch meanwhile keeps it.
		m.orphanLocked(in)
		n++
	}
	return n
}

// userKey names one user's instances of one app in byUser.
type userKey struct{ app, user string }

// indexLocked adds (on) or removes iid from user's list.
func (m *WorkerManager) indexLocked(app, user, iid string, on bool) {
	k := userKey{app, user}
	set := m.byUser[k]
	switch {
	case on && set == nil:
		m.byUser[k] = map[string]struct{}{iid: {}}
	case on:
		set[iid] = struct{}{}
	case set != nil:
		delete(set, iid)
		if len(set) == 0 {
			delete(m.byUser, k)
		}
	}
}

// indexRecLocked lists or unlists an instance for its owner and the users
// it is shared with.
func (m *WorkerManager) indexRecLocked(in *instanceRec, on bool) {
	m.indexLocked(in.App, in.Owner, in.ID, on)
	for p := range in.Shared {
		m.indexLocked(in.App, p, in.ID, on)
	}
}

// addInstanceLocked puts an instance in the table and its strategy key.
// A new instance brings the quota keys reserved for it (reserved); an
// adopted one (a worker registering) is counted against its owner and
// address whatever they hold, since it exists.
func (m *WorkerManager) addInstanceLocked(in wire.InstanceInfo, qUser, qIP string, reserved bool) {
	if old, ok := m.instances[in.ID]; ok { // re-registered: its grants may have changed
		m.indexRecLocked(old, false)
		m.releaseInstance(old.qUser, old.qIP)
	}
	rec := &instanceRec{InstanceInfo: in, qUser: qUser, qIP: qIP}
	app, ok := m.apps(in.App)
	if ok {
		rec.key = strategyKey(app, in.Owner)
	}
	if !reserved && countsForQuota(app, ok) {
		if quota.Counted(in.Owner, m.quotas.InstancesPerUser) {
			rec.qUser = in.Owner
			m.quotaUsers.Add(in.Owner)
		}
		if ip := quota.AddrKey(in.ClientIP); quota.Counted(ip, m.quotas.InstancesPerIP) {
			rec.qIP = ip
			m.quotaIPs.Add(ip)
		}
	}
	m.instances[in.ID] = rec
	m.markLocked(in.ID)
	m.indexRecLocked(rec, true)
	if rec.key != "" {
		if _, taken := m.byKey[rec.key]; !taken {
			m.byKey[rec.key] = in.ID
		}
	}
	delete(m.lost, in.ID)
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

// disconnected handles the loss of a worker's RMI connection: no new
// placements at once; routes stay until the worker is declared dead by the
// gossip layer or the grace period ends without a re-registration.
func (m *WorkerManager) disconnected(id string, c *rmi.Conn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w, ok := m.workers[id]
	if !ok || w.conn != c {
		return // already replaced or removed
	}
	w.state = stateDisconnected
	w.conn, w.ref = nil, nil
	if w.back == nil {
		w.back = make(chan struct{})
	}
	m.bal.Remove(id)
	if m.jobSlots != nil {
		go m.jobSlots(id, 0)
	}
	if w.leaving {
		// It said it stops: no reason to wait for it.
		go m.dead(id, "left")
		return
	}
	w.deadTimer = time.AfterFunc(m.grace, func() { m.dead(id, "no re-registration after disconnect") })
	m.log.Warn().Str("worker", id).Dur("grace", m.grace).Msg("worker connection lost; not placing on it")
}

// deadMember handles the gossip layer's verdict on member name of worker
// id. A late verdict on an earlier incarnation of a restarted worker (same
// id, new member name) is ignored.
func (m *WorkerManager) deadMember(id, member, reason string) {
	m.mu.Lock()
	w, ok := m.workers[id]
	stale := ok && w.staleVerdict(member)
	m.mu.Unlock()
	if stale {
		m.log.Info().Str("worker", id).Str("member", member).Msg("ignoring gossip verdict on an earlier incarnation")
		return
	}
	m.dead(id, reason)
}

// staleVerdict: gossip speaks of an earlier incarnation of the worker
// (member is not the gossip name it registered with).
func (w *workerRec) staleVerdict(member string) bool {
	return w.info.Gossip != "" && w.info.Gossip != member
}

// pingTimeout bounds the RMI check of a worker gossip says failed (a
// variable for tests).
var pingTimeout = 5 * time.Second

// suspectMember handles gossip's "failed" verdict on a worker. UDP probes
// miss their deadlines on an overloaded machine (seen in CI: two of three
// busy workers "failed" while their RMI connections carried traffic), and
// removing a live worker moves its instances for nothing. So a worker the
// master still has a connection to is asked over that connection first,
// and removed only if it does not answer within pingTimeout. A worker
// that is really gone closes its connection (process dead) or does not
// answer (frozen, partitioned).
func (m *WorkerManager) suspectMember(id, member, reason string) {
	m.mu.Lock()
	w, ok := m.workers[id]
	if ok && w.pinging {
		m.mu.Unlock()
		return // the check under way decides
	}
	if !ok || w.staleVerdict(member) || w.ref == nil || (w.conn != nil && w.conn.Err() != nil) {
		m.mu.Unlock()
		m.deadMember(id, member, reason) // unknown, stale or without a live connection: as before
		return
	}
	w.pinging = true
	ref := w.ref
	m.mu.Unlock()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		ctx, cancel := context.WithTimeout(m.ctx, pingTimeout)
		err := contract.WorkerAppsClient{R: ref}.Ping(ctx)
		cancel()
		m.mu.Lock()
		if cur, ok := m.workers[id]; ok && cur.ref == ref {
			cur.pinging = false
		}
		m.mu.Unlock()
		if err == nil {
			m.log.Warn().Str("worker", id).Str("member", member).Str("reason", reason).
				Msg("gossip says the worker failed, but it answers over RMI: kept")
			return
		}
		if m.ctx.Err() != nil {
			return
		}
		m.log.Info().Str("worker", id).Err(err).Msg("a worker gossip says failed does not answer over RMI either")
		m.deadMember(id, member, reason)
	}()
}

// dead removes a worker and everything it hosted. Its instances become
// tombstones; proxies drop their routes.
func (m *WorkerManager) dead(id, reason string) {
	m.mu.Lock()
	w, ok := m.workers[id]
	if !ok {
		m.mu.Unlock()
		return
	}
	if w.deadTimer != nil {
		w.deadTimer.Stop()
	}
	conn := w.conn
	delete(m.workers, id)
	w.wakeLocked() // its instances are now moving (or lost): waiters look again
	now := time.Now()
	lost, moving := 0, 0
	for iid, in := range m.instances {
		if in.Worker != id {
			continue
		}
		if holder := m.supersededLocked(in); holder != "" {
			// Its strategy key went to another instance while this worker
			// was unreachable: that one goes on, this one gives way.
			m.giveWayLocked(in, holder, now)
			continue
		}
		if in.migrating {
			// A live migration is restoring it elsewhere: its outcome
			// decides (migrateOne orphans it if it fails).
			moving++
			continue
		}
		if _, ok := m.apps(in.App); ok {
			m.orphanLocked(in) // placed again on a live worker (failover.go)
			moving++
			continue
		}
		m.removeInstanceLocked(iid)
		m.lost[iid] = lostRec{app: in.App, at: now}
		lost++
	}
	m.trimLostLocked()
	m.mu.Unlock()
	m.bal.Remove(id)
	if moving > 0 {
		m.kickMoves()
	}
	if conn != nil {
		conn.Close()
	}
	if m.jobsGone != nil {
		m.jobsGone(id)
	}
	m.log.Warn().Str("worker", id).Str("reason", reason).Int("instances_lost", lost).Int("instances_moving", moving).Msg("worker removed")
	if m.proxies != nil {
		_ = m.proxies.InvalidateWorker(context.Background(), id)
	}
}

func (m *WorkerManager) removeInstanceLocked(iid string) *instanceRec {
	in, ok := m.instances[iid]
	if !ok {
		return nil
	}
	delete(m.instances, iid)
	m.markLocked(iid)
	m.settleLocked(in) // a move in progress ends with it
	m.indexRecLocked(in, false)
	m.releaseInstance(in.qUser, in.qIP) // closing an instance frees its quota
	if in.key != "" && m.byKey[in.key] == iid {
		delete(m.byKey, in.key)
	}
	return in
}

func (m *WorkerManager) trimLostLocked() {
	if len(m.lost) <= maxTombstones {
		return
	}
	type kv struct {
		id string
		at time.Time
	}
	all := make([]kv, 0, len(m.lost))
	for id, l := range m.lost {
		all = append(all, kv{id, l.at})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].at.Before(all[j].at) })
	for _, e := range all[:len(all)-maxTombstones] {
		delete(m.lost, e.id)
	}
}

// report records a load report.
func (m *WorkerManager) report(id string, l wire.Load) error {
	m.mu.Lock()
	w, ok := m.workers[id]
	slotsChanged := false
	if ok {
		slotsChanged = w.load.JobSlots != l.JobSlots
		w.load = l
		w.reported = time.Now()
	}
	m.mu.Unlock()
	if !ok {
		return wire.Err(wire.CodeUnknownWorker, "report from unregistered worker "+id)
	}
	if slotsChanged {
		m.publishSlots(id)
	}
	if err := m.bal.Report(id, l.Total, l.Instances); err != nil && !errors.Is(err, balance.ErrUnknownWorker) {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// instanceClosed removes an instance the worker closed for good (its user
// or owner closed it, its app was removed). Only the instance's current
// owner, under the current epoch and while the master is not moving it, can
// do so: a worker's belated word on an instance that has moved on must not
// remove it (and its stored state with it).
func (m *WorkerManager) instanceClosed(workerID string, c wire.ClosedInstance) error {
	m.mu.Lock()
	in, ok := m.instances[c.ID]
	switch {
	case !ok || in.Worker != workerID:
		m.mu.Unlock()
		return wire.Err(wire.CodeUnknownInstance, "instance "+c.ID+" is not on worker "+workerID)
	case !ownedLocked(in, workerID, c.Epoch):
		m.mu.Unlock()
		return wire.Errorf(wire.CodeInstanceLost, "instance %s: epoch %d is not the current placement (%d) or the instance is moving: kept", c.ID, c.Epoch, in.Epoch)
	}
	m.removeInstanceLocked(c.ID)
	m.mu.Unlock()
	m.bal.Release(workerID)
	m.invalidate(c.ID)
	return nil
}

// invalidateAcked tells the proxies that iids' routes changed and waits (a
// bounded time) until they applied it.
func (m *WorkerManager) invalidateAcked(ctx context.Context, iids ...string) {
	inv, ok := m.proxies.(interface {
		InvalidateAcked(context.Context, []string) error
	})
	if !ok {
		m.invalidate(iids...)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := inv.InvalidateAcked(ctx, iids); err != nil {
		m.log.Warn().Err(err).Strs("instances", iids).Msg("route invalidation not acknowledged in time")
	}
}

// invalidate tells the proxies that iids' routes changed.
func (m *WorkerManager) invalidate(iids ...string) {
	if m.proxies != nil {
		_ = m.proxies.Invalidate(context.Background(), iids)
	}
}

// place finds or creates the instance the app's strategy gives this user
// and, unless req.NoBrowser, opens the user's browser in it on the hosting
// worker, so the user can be redirected straight to a Browser URL (the
// paper's flow).
func (m *WorkerManager) place(ctx context.Context, req wire.PlaceRequest) (p wire.Placement, err error) {
	if m.observePlace != nil {
		defer func() {
			strategy := "unknown"
			if app, ok := m.apps(req.App); ok {
				strategy = app.Strategy
			}
			outcome := "existing"
			switch {
			case err != nil:
				outcome = "failed"
			case p.Created:
				outcome = "created"
			}
			m.observePlace(strategy, outcome)
		}()
	}
	for {
		p, err = m.placeInstance(ctx, req)
		if err != nil || req.NoBrowser {
			return p, err
		}
		p.BrowserID, err = m.openBrowser(ctx, p, req)
		if err == nil || ctx.Err() != nil || !m.movedSince(p.InstanceID, p.WorkerID) {
			return p, err
		}
		// Its worker was declared dead while we asked it (a stall, a cut):
		// the instance is being placed again; wait for it and ask there,
		// rather than failing the user's request.
		m.log.Info().Str("instance", p.InstanceID).Str("worker", p.WorkerID).Msg("placement: the instance's worker went away; waiting for its new home")
	}
}

// openBrowser opens req's user's browser in placement p on its worker.
func (m *WorkerManager) openBrowser(ctx context.Context, p wire.Placement, req wire.PlaceRequest) (string, error) {
	ref := m.refOf(p.WorkerID)
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
func (m *WorkerManager) movedSince(iid, wid string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	in, ok := m.instances[iid]
	return ok && (in.Worker != wid || in.moving != nil)
}

// placeInstance finds or creates the instance. Concurrent requests for the
// same strategy key share one creation.
func (m *WorkerManager) placeInstance(ctx context.Context, req wire.PlaceRequest) (wire.Placement, error) {
	app, ok := m.apps(req.App)
	if !ok {
		return wire.Placement{}, wire.Err(wire.CodeUnknownApp, "no application is mounted at /"+req.App)
	}
	if app.Disabled {
		return wire.Placement{}, wire.Err(wire.CodeAppDisabled, "application /"+req.App+" is disabled")
	}
	key := strategyKey(app, req.User)
	if key == "" || req.New {
		return m.create(ctx, app, req.User, req.ClientIP, req.RequestID)
	}
	if p, ok, err := m.existing(ctx, key); ok || err != nil {
		return p, err
	}
	ch := m.sf.DoChan(key, func() (any, error) {
		// Detached: the creation serves every waiter, not just the first.
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if p, ok, err := m.existing(cctx, key); ok || err != nil {
			return p, err
		}
		return m.create(cctx, app, req.User, req.ClientIP, req.RequestID)
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

// holderWait bounds how long a placement waits for the instance holding
// its strategy key to be reachable again (a variable for tests).
var holderWait = 30 * time.Second

// existing returns the instance that holds key (ok false: none does). An
// instance whose worker is unreachable, or which is moving, is waited for
// and never replaced: a second instance for the key would split its users,
// and when the first came back one of the two would have to give way with
// the writes its users saw acknowledged. If it does not become reachable
// within holderWait (or ctx), the answer is "instance moving" (503, retry).
func (m *WorkerManager) existing(ctx context.Context, key string) (wire.Placement, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, holderWait)
	defer cancel()
	for {
		m.mu.Lock()
		iid, ok := m.byKey[key]
		if !ok {
			m.mu.Unlock()
			return wire.Placement{}, false, nil
		}
		in := m.instances[iid]
		w, wok := m.workers[in.Worker]
		var wait <-chan struct{}
		switch {
		case in.moving != nil:
			wait = in.moving // its worker died: it is being placed again
		case wok && w.state == stateConnected:
			m.mu.Unlock()
			return wire.Placement{InstanceID: iid, WorkerID: in.Worker}, true, nil
		case wok && w.back != nil:
			wait = w.back // disconnected: back, or declared dead (then moving)
		}
		m.mu.Unlock()
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
func (m *WorkerManager) create(ctx context.Context, app wire.App, owner, clientIP, requestID string) (p wire.Placement, err error) {
	var qUser, qIP string
	if countsForQuota(app, true) {
		if qUser, qIP, err = m.reserveInstance(owner, clientIP); err != nil {
			m.log.Info().Str("request_id", requestID).Str("app", app.MountPoint).Str("owner", owner).Str("client_ip", clientIP).
				Err(err).Msg("instance refused: quota")
			return wire.Placement{}, err
		}
		defer func() {
			if err != nil {
				m.releaseInstance(qUser, qIP)
			}
		}()
	}
	err = m.firstTaker(func(c candidate) (bool, error) {
		iid := ids.NewInstance(c.wid)
		defer m.aim(iid, c.wid)()
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err := c.apps.CreateInstance(cctx, wire.CreateInstance{App: app, InstanceID: iid, Owner: owner, ClientIP: clientIP, Epoch: c.epoch})
		cancel()
		if err != nil {
			m.log.Warn().Str("worker", c.wid).Str("app", app.MountPoint).Err(err).Msg("instance creation failed")
			return ctx.Err() == nil, fmt.Errorf("create instance of %s on %s: %w", app.MountPoint, c.wid, err)
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if _, still := m.workers[c.wid]; !still {
			return true, wire.Err(wire.CodeNoWorkers, "worker "+c.wid+" died while creating the instance")
		}
		m.addInstanceLocked(wire.InstanceInfo{ID: iid, App: app.MountPoint, Version: app.Version, Owner: owner, Worker: c.wid,
			Created: time.Now(), ClientIP: clientIP, Epoch: c.epoch}, qUser, qIP, true)
		p = wire.Placement{InstanceID: iid, WorkerID: c.wid, Created: true}
		return false, nil
	})
	if errors.Is(err, errNoPick) {
		return wire.Placement{}, m.noWorkers("no worker is available to host " + app.MountPoint)
	}
	if err != nil {
		return wire.Placement{}, err
	}
	if err := m.syncInstances(ctx); err != nil {
		// The instance exists and its worker reports it at a master
		// restart; only a double fault before the write would lose it.
		m.log.Error().Err(err).Str("instance", p.InstanceID).Msg("new instance not yet in the stored table")
	}
	m.placements.Add(1)
	m.log.Info().Str("request_id", requestID).Str("instance", p.InstanceID).Str("app", app.MountPoint).Str("worker", p.WorkerID).Str("owner", owner).Msg("instance placed")
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
func (m *WorkerManager) firstTaker(try func(c candidate) (retry bool, err error)) error {
	tried := map[string]bool{}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		wid, err := m.bal.Pick()
		if err != nil || tried[wid] {
			if err == nil {
				m.bal.Release(wid)
			}
			break
		}
		tried[wid] = true
		ref := m.refOf(wid)
		if ref == nil {
			m.bal.Release(wid)
			continue
		}
		epoch, err := m.epochs.next()
		if err != nil {
			m.bal.Release(wid)
			return fmt.Errorf("placement epoch: %w", err)
		}
		retry, err := try(candidate{wid: wid, apps: contract.WorkerAppsClient{R: ref}, epoch: epoch})
		if err == nil {
			return nil
		}
		m.bal.Release(wid)
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

// rename records an instance's new name.
func (m *WorkerManager) rename(workerID, iid, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	in, ok := m.instances[iid]
	if !ok || in.Worker != workerID {
		return wire.Err(wire.CodeUnknownInstance, "instance "+iid+" is not on worker "+workerID)
	}
	in.Name = name
	return nil
}

// share records a grant on an instance to a named user (role "" or "none"
// removes it), so the user's landing page lists the instance. The map is
// replaced, never changed in place: copies handed out by userInstances are
// encoded after the lock is released.
func (m *WorkerManager) share(workerID, iid, principal, role string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	in, ok := m.instances[iid]
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
		m.indexLocked(in.App, principal, iid, shared[principal] != "")
	}
	if len(shared) == 0 {
		shared = nil
	}
	in.Shared = shared
	return nil
}

// userInstances lists the instances of app that user owns or that were
// shared with them by name, oldest first.
func (m *WorkerManager) userInstances(app, user string) []wire.InstanceInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	set := m.byUser[userKey{app, user}]
	out := make([]wire.InstanceInfo, 0, len(set))
	for iid := range set {
		out = append(out, m.instances[iid].InstanceInfo)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out
}

// route answers a proxy's lookup.
func (m *WorkerManager) route(req wire.RouteRequest) (wire.RouteReply, error) {
	m.lookups.Add(1)
	if m.observeLookup != nil {
		defer m.observeLookup(req.Kind, time.Now())
	}
	switch req.Kind {
	case wire.RouteApp:
		app, ok := m.apps(req.App)
		if !ok {
			return wire.RouteReply{}, wire.Err(wire.CodeUnknownApp, "no application is mounted at /"+req.App)
		}
		if app.Disabled {
			return wire.RouteReply{}, wire.Err(wire.CodeAppDisabled, "application /"+req.App+" is disabled")
		}
		return m.peek()
	case wire.RouteInstance:
		m.mu.Lock()
		defer m.mu.Unlock()
		in, ok := m.instances[req.InstanceID]
		if !ok || (req.App != "" && in.App != req.App) {
			if l, lost := m.lost[req.InstanceID]; lost && (req.App == "" || l.app == req.App) {
				if l.mergedInto != "" {
					return wire.RouteReply{}, wire.Err(wire.CodeInstanceMerged, "instance "+req.InstanceID+" gave way to "+l.mergedInto)
				}
				return wire.RouteReply{}, wire.Err(wire.CodeInstanceLost, "instance "+req.InstanceID+" was lost with its worker")
			}
			return wire.RouteReply{}, wire.Err(wire.CodeUnknownInstance, "no instance "+req.InstanceID)
		}
		if in.moving != nil && !in.migrating {
			msg := "instance " + req.InstanceID + " is being placed again: its worker stopped"
			if len(m.workers) == 0 {
				msg = "instance " + req.InstanceID + " waits for a worker: none is live"
			}
			return wire.RouteReply{}, wire.Err(wire.CodeInstanceMoving, msg)
		}
		w := m.workers[in.Worker]
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
func (m *WorkerManager) peek() (wire.RouteReply, error) {
	snap := m.bal.Snapshot()
	m.mu.Lock()
	defer m.mu.Unlock()
	var cands, fresh []balance.WorkerLoad
	stale := time.Now().Add(-staleReports * m.period)
	for _, s := range snap {
		if w, ok := m.workers[s.ID]; ok && w.state == stateConnected {
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
	best, ok := m.bal.Peek(cands)
	if !ok {
		return wire.RouteReply{}, m.noWorkers("no worker is available")
	}
	return routeTo(best.ID, m.workers[best.ID].info), nil
}

// routeTo is the route to a worker: its address, and its handoff socket
// for proxies on its host.
func routeTo(id string, info wire.WorkerInfo) wire.RouteReply {
	return wire.RouteReply{WorkerID: id, Addr: info.HTTPAddr, Handoff: info.Handoff, Host: info.Host}
}

// setDraining marks a worker (not) eligible for new instances, on an
// admin's order: the flag is stored, so it survives master restarts and
// applies when the worker registers again. Undraining a worker that is not
// registered clears its stored flag (a drained worker that went away).
func (m *WorkerManager) setDraining(id string, on bool) error {
	// drainMu, not m.mu, over the store write: routing waits on m.mu.
	m.drainMu.Lock()
	defer m.drainMu.Unlock()
	m.mu.Lock()
	_, ok := m.workers[id]
	m.mu.Unlock()
	if !ok && (on || !m.drainedStored(id)) {
		return wire.Err(wire.CodeUnknownWorker, "no worker "+id)
	}
	if m.state != nil {
		var err error
		if on {
			err = m.state.Put(drainedBucket, id, drainedRecord{At: time.Now().UTC()})
		} else {
			err = m.state.Delete(drainedBucket, id)
		}
		if err != nil {
			return fmt.Errorf("drain flag of worker %s: %w", id, err)
		}
	}
	m.mu.Lock()
	if w, ok := m.workers[id]; ok {
		w.draining = on
	}
	m.mu.Unlock()
	_ = m.bal.SetDraining(id, on) // unknown to the balancer while disconnected
	m.publishSlots(id)
	return nil
}

// drainedStored reports whether an admin drain of worker id is stored.
func (m *WorkerManager) drainedStored(id string) bool {
	if m.state == nil {
		return false
	}
	return m.state.Has(drainedBucket, id)
}

// refOf is worker wid's Application Manager (nil: unknown or disconnected).
func (m *WorkerManager) refOf(wid string) *rmi.Ref {
	m.mu.Lock()
	defer m.mu.Unlock()
	if w, ok := m.workers[wid]; ok {
		return w.ref
	}
	return nil
}

// connIsLocked reports whether c is worker id's current connection.
func (m *WorkerManager) connIsLocked(id string, c *rmi.Conn) bool {
	w, ok := m.workers[id]
	return ok && c != nil && w.conn == c
}

// host returns the worker hosting an instance and its Application Manager
// (nil while disconnected); ok is false for an unknown instance.
func (m *WorkerManager) host(iid string) (ref *rmi.Ref, workerID string, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	in, ok := m.instances[iid]
	if !ok {
		return nil, "", false
	}
	if w, ok := m.workers[in.Worker]; ok {
		ref = w.ref
	}
	return ref, in.Worker, true
}

// refs returns the connected workers' Application Managers.
func (m *WorkerManager) refs() map[string]*rmi.Ref {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]*rmi.Ref, len(m.workers))
	for id, w := range m.workers {
		if w.ref != nil {
			out[id] = w.ref
		}
	}
	return out
}

// status fills the worker and instance parts of a ClusterStatus.
func (m *WorkerManager) status(st *wire.ClusterStatus) {
	proj := map[string]uint64{}
	for _, s := range m.bal.Snapshot() {
		proj[s.ID] = s.Projected
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	stale := time.Now().Add(-staleReports * m.period)
	for _, w := range m.workers {
		st.Workers = append(st.Workers, wire.WorkerStatus{
			WorkerInfo: w.info, State: w.state, Draining: w.draining, Load: w.load,
			Projected: proj[w.info.ID], Registered: w.registered, Pools: w.load.Pools,
			Reported: w.reported, Silent: w.state == stateConnected && !w.reported.After(stale),
		})
	}
	sort.Slice(st.Workers, func(i, j int) bool { return st.Workers[i].ID < st.Workers[j].ID })
	for _, in := range m.instances {
		st.Instances = append(st.Instances, in.InstanceInfo)
	}
	sort.Slice(st.Instances, func(i, j int) bool { return st.Instances[i].ID < st.Instances[j].ID })
	st.RouteLookups = m.lookups.Load()
	st.Placements = m.placements.Load()
}

// close stops timers.
func (m *WorkerManager) close() {
	m.cancel()
	m.mu.Lock()
	for _, w := range m.workers {
		if w.deadTimer != nil {
			w.deadTimer.Stop()
		}
	}
	m.mu.Unlock()
	m.wg.Wait()
}

// workerView is a worker's state for metrics.
type workerView struct {
	id        string
	load      wire.Load
	projected uint64
	draining  bool
}

func (m *WorkerManager) views() []workerView {
	proj := map[string]uint64{}
	for _, s := range m.bal.Snapshot() {
		proj[s.ID] = s.Projected
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]workerView, 0, len(m.workers))
	for id, w := range m.workers {
		if w.state == stateConnected {
			out = append(out, workerView{id: id, load: w.load, projected: proj[id], draining: w.draining})
		}
	}
	return out
}

func (m *WorkerManager) instanceCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.instances)
}

// caller is the worker registered on connection c: who a worker's call
// speaks for, whatever its arguments say.
func (m *WorkerManager) caller(c *rmi.Conn) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if id := m.callerLocked(c); id != "" {
		return id, nil
	}
	return "", wire.Errorf(wire.CodeForbidden, "no worker is registered on this connection (peer %q): register first", peerName(c))
}

// known says whether instance iid is in the table.
func (m *WorkerManager) known(iid string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.instances[iid]
	return ok
}

// callerLocked is the worker registered on c ("" = none).
func (m *WorkerManager) callerLocked(c *rmi.Conn) string {
	if c == nil {
		return ""
	}
	for id, w := range m.workers {
		if w.conn == c {
			return id
		}
	}
	return ""
}
