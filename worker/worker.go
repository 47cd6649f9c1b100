// Package worker hosts app instances and their virtual browsers: it
// registers with the master, creates the instances the master places here,
// serves the three URL kinds and the client engine's WebSocket, and reports
// its load.
package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/egress"
	"github.com/cloudbrowser-go/cloudbrowser/internal/handoff"
	"github.com/cloudbrowser-go/cloudbrowser/internal/ids"
	"github.com/cloudbrowser-go/cloudbrowser/internal/membership"
	cbmetrics "github.com/cloudbrowser-go/cloudbrowser/internal/metrics"
	"github.com/cloudbrowser-go/cloudbrowser/internal/procfs"
	"github.com/cloudbrowser-go/cloudbrowser/internal/quota"
	"github.com/cloudbrowser-go/cloudbrowser/internal/secret"
	"github.com/cloudbrowser-go/cloudbrowser/internal/sequence"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/engine"
	"github.com/cloudbrowser-go/cloudbrowser/worker/failover"
	"github.com/cloudbrowser-go/cloudbrowser/worker/grade"
	"github.com/cloudbrowser-go/cloudbrowser/worker/httpserve"
	"github.com/cloudbrowser-go/cloudbrowser/worker/jobs"
	"github.com/cloudbrowser-go/cloudbrowser/worker/pool"
	"github.com/cloudbrowser-go/cloudbrowser/worker/seqrun"
)

// Config configures a worker.
type Config struct {
	// ID is the worker's id ("w-" + 8 lowercase letters/digits); empty =
	// generated.
	ID string
	// Secret is the key of this worker's id (the master's
	// <data-dir>/workers/<id>.key), the shared worker key (the master's
	// <data-dir>/worker.key: enough for an id the cluster has never seen,
	// after which the master hands over the id's own key), or the cluster
	// secret; the worker declares the role "worker" either way and gets the
	// session and gossip keys from the master.
	Secret string
	// Master is the master's RMI address.
	Master string
	// Listen is the HTTP address; Advertise the address proxies use
	// (default: the listener's address).
	Listen, Advertise string
	// GossipAddr is the memberlist bind address (port 0 = any);
	// GossipAdvertise the address others use.
	GossipAddr, GossipAdvertise string
	// Runtime renders the virtual browsers (default browser.Null).
	Runtime browser.Runtime
	// MaxBrowsers is the worker's global browser limit (general pool and
	// specific pools together; default 64). GeneralMin blank browsers are
	// kept ready in the general pool for the next first visits (0: none;
	// GeneralMinAuto, DefaultConfig's: sized from memory, AutoGeneralMin).
	MaxBrowsers, GeneralMin int
	// JobSlots is how many render and check jobs run at once (0 =
	// jobs.SlotsFor(MaxBrowsers)).
	JobSlots int
	// NoJobReuse closes a general-pool browser after each job instead of
	// resetting it for the next (docs/jobs.md "Browser reuse": what a
	// reset cannot clear).
	NoJobReuse bool
	// Secrets resolves ${secret:NAME} in pool sequences (default: the
	// environment variable CB_SECRET_<NAME>).
	Secrets sequence.Secrets
	// EgressAllow are the cluster's egress opt-ins for every app's browsers
	// (internal/egress rules); EgressLookup replaces the resolver (tests).
	EgressAllow  []string
	EgressLookup func(ctx context.Context, host string) ([]netip.Addr, error)
	// MaxAppBytes refuses apps whose files total more (0 = no limit).
	MaxAppBytes int64
	// LeaveTimeout bounds the hand-over of the instances when the worker
	// stops (default 60 s).
	LeaveTimeout time.Duration
	// SnapshotInterval is how often, at most, a browser something happened
	// in is snapshotted for failover (besides right after each top-level
	// navigation); 0 = DefaultSnapshotInterval.
	SnapshotInterval time.Duration
	// RestAfter is how long a browser goes without a client before its
	// page rests (hidden, scripts running; engine/rest.go); 0 = never.
	RestAfter time.Duration
	// Grade sizes screencast frames to the worker's CPU: smaller while
	// input→frame latency is high, sharp again when a page rests
	// (worker/grade); Grade.MinScale 1 turns it off.
	Grade grade.Config
	// FrameTiles sends engines tile updates instead of whole frames
	// (engine.Config.Tiles).
	FrameTiles bool
	// HandoffDir holds the socket proxies on this host hand WebSockets
	// over on ("" = <tmp>/cloudbrowser-<uid>); NoHandoff: none, proxies
	// relay every connection.
	HandoffDir string
	NoHandoff  bool
	// SocketURL is where client engines open their WebSockets instead of
	// the origin of their page ("" = there): the public http(s) address of
	// a cluster proxy on this worker's host, which hands each socket to
	// the worker, so a worker on another host than the proxy that served
	// the page is reached without a relay. Tickets carry the user there
	// (engine/ticket.go).
	SocketURL string
	Logger    zerolog.Logger
	Version   string
}

// Worker is a running worker.
type Worker struct {
	cfg     Config
	handoff *handoff.Listener // nil: proxies relay
	id      string
	// incarnation names this start of the process (wire.WorkerInfo).
	incarnation string
	log         zerolog.Logger
	runtime     browser.Runtime
	pools       *pool.Manager
	jobs        *jobs.Executor
	// front is the HTTP side: pages, sockets, logins, sessions.
	front *httpserve.Server
	// files holds the browsers' uploads and downloads (filesroot.go).
	files filesRoot

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	node   *rmi.Node
	client *rmi.Client
	// replica stores instances' shared state off this worker: its store is
	// the master (set by Start); unit tests may put another in.
	replica failover.Replica
	// snaps keeps browser snapshots off this worker, at the master (set
	// by Start; nil: no snapshots); unit tests may put another in.
	snaps *failover.Snapshots
	// apps takes the master's orders; the work is done by catalog (the
	// apps installed), instances (those hosted here), browsers (making and
	// ending their browsers) and api (their pages' app API).
	apps      *AppManager
	catalog   *appCatalog
	instances *instanceTable
	browsers  *browserMaker
	api       *appAPI
	srv       *http.Server
	ln        net.Listener

	egress        *egress.Guard
	egressBlocked *prometheus.CounterVec
	// blockedByApp feeds the load reports (the dashboard's per-app count).
	blockedMu    sync.Mutex
	blockedByApp map[string]uint64

	memberMu sync.Mutex
	member   *membership.Member
	// seed is where the master's gossip member is (from Cluster.Info);
	// rejoining is set while stayInGossip joins again (gossipjoin.go).
	seed      atomic.Pointer[gossipSeed]
	rejoining atomic.Bool

	// counters are the hubs' totals (frames, input, resting browsers).
	counters     engine.Counters
	grade        *grade.Governor
	reg          *prometheus.Registry
	leaseSeconds *prometheus.HistogramVec

	// quota counts what this worker's users and client addresses hold,
	// under the cluster's quotas.
	quota *quotas

	// clock runs the idle-release and rest countdowns (tests replace it);
	// idleReleased counts browsers released for being idle.
	clock        clock.Clock
	idleReleased atomic.Uint64

	registered atomic.Bool
	stopping   atomic.Bool
	period     atomic.Int64
}

// DefaultConfig is the worker's configuration without any settings (the
// CLI's flag defaults); zero fields of a Config passed to New take these
// values too.
func DefaultConfig() Config {
	return Config{Master: "127.0.0.1:7070", Listen: "127.0.0.1:0", GossipAddr: "127.0.0.1:0",
		MaxBrowsers: 64, GeneralMin: GeneralMinAuto, LeaveTimeout: 60 * time.Second, SnapshotInterval: DefaultSnapshotInterval,
		RestAfter: DefaultRestAfter, Grade: grade.DefaultConfig()}
}

// DefaultSnapshotInterval is the default Config.SnapshotInterval.
const DefaultSnapshotInterval = failover.DefaultSnapshotInterval

// GeneralMinAuto sizes the general pool's ready browsers from memory.
const GeneralMinAuto = -1

// readyBrowserBudget is the memory available per ready browser that
// AutoGeneralMin asks for: a blank browser costs about 64 MiB of PSS
// (docs/benchmarks.md, density), so it takes at most ~1/16 of what is
// available, and a small machine keeps none.
const readyBrowserBudget = 1 << 30

// AutoGeneralMin is how many blank browsers a worker keeps ready when
// GeneralMin is GeneralMinAuto: one per GiB available, at most 2 (a first
// visit then skips the cold browser, ~0.3-0.4 s), within the browser limit.
func AutoGeneralMin(available uint64, maxBrowsers int) int {
	return min(int(available/readyBrowserBudget), 2, maxBrowsers)
}

// New prepares a worker; Start runs it.
func New(cfg Config) (*Worker, error) {
	if err := secret.Check(cfg.Secret); err != nil {
		return nil, fmt.Errorf("worker: cluster secret: %w", err)
	}
	if cfg.Master == "" {
		return nil, fmt.Errorf("worker: %w", config.Errorf("Master", "(the master's RMI address) is required"))
	}
	if cfg.ID == "" {
		cfg.ID = ids.NewWorkerID()
	} else if !ids.ValidWorker(cfg.ID) {
		return nil, fmt.Errorf("worker: %w", config.Errorf("ID", "%q is not a worker id (%s)", cfg.ID, ids.WorkerRule))
	}
	if cfg.RestAfter < 0 {
		return nil, fmt.Errorf("worker: %w", config.Errorf("RestAfter", "must not be negative (0 = never rest), got %s", cfg.RestAfter))
	}
	gov, err := grade.New(cfg.Grade)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", config.Within("Grade", err))
	}
	if cfg.SocketURL, err = socketOrigin(cfg.SocketURL); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.GossipAddr == "" {
		cfg.GossipAddr = "127.0.0.1:0"
	}
	if cfg.Runtime == nil {
		cfg.Runtime = &browser.Null{}
	}
	w := &Worker{cfg: cfg, id: cfg.ID, incarnation: ids.Random(12), runtime: cfg.Runtime, clock: clock.Real, grade: gov}
	w.log = cfg.Logger.With().Str("worker", w.id).Logger()
	w.replica.Log = w.log
	w.ctx, w.cancel = context.WithCancel(context.Background())
	appsLog := w.log.With().Str("component", "apps").Logger()
	w.apps = &AppManager{w: w, log: appsLog}
	w.catalog = newAppCatalog(w, appsLog)
	w.instances = newInstanceTable(w, appsLog)
	w.browsers = &browserMaker{w: w, log: appsLog}
	w.api = &appAPI{w: w, log: appsLog}
	w.period.Store(int64(time.Second))
	def := DefaultConfig()
	config.OrDefault(&cfg.SnapshotInterval, def.SnapshotInterval)
	config.OrDefault(&cfg.MaxBrowsers, def.MaxBrowsers)
	config.OrDefault(&cfg.LeaveTimeout, def.LeaveTimeout)
	if cfg.GeneralMin == GeneralMinAuto {
		avail, err := procfs.MemAvailable()
		if err != nil {
			avail = 0 // unknown: keep none ready
		}
		cfg.GeneralMin = AutoGeneralMin(avail, cfg.MaxBrowsers)
	}
	switch {
	case cfg.GeneralMin < 0 || cfg.GeneralMin > cfg.MaxBrowsers:
		return nil, fmt.Errorf("worker: %w", config.Errorf("GeneralMin", "must be -1 (sized from memory) or between 0 and the browser limit (%d), got %d", cfg.MaxBrowsers, cfg.GeneralMin))
	case cfg.JobSlots < 0 || cfg.JobSlots > cfg.MaxBrowsers:
		return nil, fmt.Errorf("worker: %w", config.Errorf("JobSlots", "must be between 0 and the browser limit (%d), got %d", cfg.MaxBrowsers, cfg.JobSlots))
	}
	if cfg.Secrets == nil {
		cfg.Secrets = sequence.EnvSecrets("CB_SECRET_")
	}
	w.cfg = cfg
	if err := w.startEgress(); err != nil {
		return nil, fmt.Errorf("worker: egress guard: %w", err)
	}
	pm, err := pool.NewManager(pool.ManagerConfig{
		Types:  map[string]pool.BrowserType{pool.TypeChromium: {Factory: cfg.Runtime, Max: cfg.MaxBrowsers, GeneralMin: cfg.GeneralMin}},
		Runner: &seqrun.Runner{Secrets: cfg.Secrets, Log: w.log.With().Str("component", "sequence").Logger()},
		Logger: w.log,
		// The general pool's browsers get the app's policy at lease.
		Options: w.browserOptions,
	})
	if err != nil {
		_ = w.egress.Close()
		return nil, fmt.Errorf("worker: pools: %w", err)
	}
	w.pools = pm
	w.leaseSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "cloudbrowser_pool_lease_seconds",
		Help:    "Time to lease a browser, by pool kind (specific, general) and outcome.",
		Buckets: []float64{.0001, .001, .01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
	}, []string{"kind", "outcome"})
	refusals := cbmetrics.QuotaRefusals()
	for _, l := range []string{wire.QuotaBrowsersPerUser, wire.QuotaBrowsersPerIP, wire.QuotaSocketsPerBrowser, wire.QuotaSocketsPerIP} {
		refusals.WithLabelValues(l)
	}
	w.quota = &quotas{browserUsers: quota.NewCounter(), browserIPs: quota.NewCounter(), socketIPs: quota.NewCounter(),
		refused: func(limit string) { refusals.WithLabelValues(limit).Inc() }}
	defQuotas := wire.DefaultQuotas()
	w.quota.limits.Store(&defQuotas)
	w.reg = w.newMetrics()
	w.reg.MustRegister(refusals, w.egressBlocked)
	var jobMetrics []prometheus.Collector
	w.jobs, jobMetrics = w.newJobs(cfg.JobSlots)
	w.reg.MustRegister(jobMetrics...)
	w.front = w.newFront()
	return w, nil
}

// ID is the worker's id.
func (w *Worker) ID() string { return w.id }

// HTTPAddr is the address the worker serves HTTP on.
func (w *Worker) HTTPAddr() string {
	if w.cfg.Advertise != "" {
		return w.cfg.Advertise
	}
	if w.ln == nil {
		return ""
	}
	return w.ln.Addr().String()
}

func (w *Worker) closing() bool { return w.stopping.Load() }

// Start listens for HTTP and connects to the master in the background,
// retrying until it is up.
func (w *Worker) Start(ctx context.Context) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", w.cfg.Listen)
	if err != nil {
		return fmt.Errorf("worker: listen %s: %w", w.cfg.Listen, err)
	}
	w.ln = ln
	// A local address stands for every local address (AddCluster).
	if err := w.egress.AddCluster(ln.Addr().String()); err != nil {
		ln.Close()
		return fmt.Errorf("worker: egress guard: %w", err)
	}
	w.srv = &http.Server{Handler: w.front, ReadHeaderTimeout: 10 * time.Second}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		if err := w.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			w.log.Error().Err(err).Msg("http server stopped")
		}
	}()
	w.startHandoff()

	node, err := rmi.New(rmi.Config{Name: w.id, Role: secret.RoleWorker, Secret: []byte(w.cfg.Secret), Logger: w.log})
	if err != nil {
		return fmt.Errorf("worker: rmi: %w", err)
	}
	w.node = node
	w.reg.MustRegister(cbmetrics.RMI(node)...)
	w.client = node.NewClient(w.cfg.Master, w.onConnect)
	if w.replica.Store == nil {
		w.replica.Store = contract.InstanceStateClient{C: w.client}
	}
	if w.snaps == nil {
		w.snaps = failover.NewSnapshots(w.ctx, failover.SnapshotConfig{Store: contract.InstanceStateClient{C: w.client}, Clock: w.clock, Log: w.log})
	}
	w.wg.Add(2)
	go func() { defer w.wg.Done(); w.reportLoop() }()
	go func() { defer w.wg.Done(); w.snaps.Run(w.ctx, w.cfg.SnapshotInterval, w.instances.subjects) }()
	w.log.Info().Str("http", w.HTTPAddr()).Str("master", w.cfg.Master).Str("runtime", w.runtime.Name()).Msg("worker started")
	return nil
}

// onConnect runs on every (re)connection to the master: join the gossip
// layer if needed, then register, passing our Application Manager.
func (w *Worker) onConnect(ctx context.Context, c *rmi.Conn) error {
	info, err := contract.ClusterClient{C: c}.Info(ctx)
	if err != nil {
		return fmt.Errorf("cluster info: %w", err)
	}
	if w.egress != nil && info.GossipAddr != "" {
		_ = w.egress.AddCluster(info.GossipAddr)
	}
	w.front.Users().SetKeys(info.Keys)
	if err := w.joinGossip(ctx, info.MasterID, info.GossipAddr, info.Keys.Gossip); err != nil {
		// Not fatal: the master's connection watch still notices our death,
		// only more slowly. Retried on the next reconnection.
		w.log.Warn().Err(err).Str("gossip", info.GossipAddr).Msg("could not join the gossip layer")
	}
	w.seed.Store(&gossipSeed{masterID: info.MasterID, addr: info.GossipAddr})
	winfo := wire.WorkerInfo{ID: w.id, HTTPAddr: w.HTTPAddr(), Version: w.cfg.Version, JobSlots: w.jobs.Stats().Slots, Incarnation: w.incarnation}
	if w.handoff != nil {
		winfo.Handoff, winfo.Host = w.handoff.Path(), handoff.HostID()
	}
	if rs, ok := w.runtime.(interface{ RenderScale() float64 }); ok {
		winfo.RenderScale = rs.RenderScale()
	}
	if m := w.gossip(); m != nil {
		winfo.Gossip = m.Name()
	}
	epoch := w.catalog.startRegistration()
	// Only the contract's methods are exported: the master gets no other
	// handle on the Application Manager.
	rep, err := contract.WorkerManagerClient{C: c}.Register(ctx, winfo, w.instances.list(), rmi.Export(workerApps{w.apps}))
	if err != nil {
		return fmt.Errorf("register: %w", err)
	}
	if len(rep.HopKey) == 0 {
		return errors.New("register: the master sent no hop key (it is older than this worker)")
	}
	if rep.WorkerKey != "" {
		// Enrolled: from the next connection on this worker proves its id
		// with the id's own key (the shared key registers new ids only).
		if err := w.node.SetDialSecret([]byte(rep.WorkerKey)); err != nil {
			return fmt.Errorf("register: the master's key for this worker id: %w", err)
		}
		w.log.Info().Msg("worker id enrolled: reconnecting with its own key from now on")
	}
	w.front.SetHopKey(rep.HopKey)
	if rep.MetricsToken != "" {
		w.front.SetMetricsToken(rep.MetricsToken)
	}
	if len(rep.Fenced) > 0 {
		w.instances.fence(ctx, rep.Fenced)
	}
	w.catalog.setApps(ctx, c, epoch, rep.Apps)
	w.front.Users().SetRevoked(rep.Revoked)
	if rep.Quotas != nil {
		q := *rep.Quotas
		w.quota.limits.Store(&q)
	}
	w.front.Users().SetCluster(rep)
	if rep.ReportPeriod > 0 {
		w.period.Store(rep.ReportPeriod)
	}
	w.registered.Store(true)
	w.log.Info().Str("master", info.MasterID).Int("apps", len(rep.Apps)).Msg("registered with master")
	go func() { // notice the loss for /readyz
		select {
		case <-c.Done():
			w.registered.Store(false)
		case <-w.ctx.Done():
		}
	}()
	return nil
}

func (w *Worker) gossip() *membership.Member {
	w.memberMu.Lock()
	defer w.memberMu.Unlock()
	return w.member
}

func (w *Worker) joinGossip(ctx context.Context, masterID, seed string, key []byte) error {
	w.memberMu.Lock()
	defer w.memberMu.Unlock()
	if w.member == nil {
		if len(key) != 32 { // never join unencrypted
			return fmt.Errorf("the master sent no gossip key (%d bytes)", len(key))
		}
		host, p, err := membership.ParseBind(w.cfg.GossipAddr)
		if err != nil {
			return err
		}
		m, err := membership.Start(membership.Config{
			// A restarted worker keeps its id but is a new gossip member:
			// memberlist refuses a known name at a new address.
			Name: w.id + "." + ids.Random(6), BindAddr: host, BindPort: p, Advertise: w.cfg.GossipAdvertise,
			Key: key, Label: "cloudbrowser", // from the master: a role key cannot derive it
			Meta: membership.Meta{Role: membership.RoleWorker, ID: w.id}, Logger: w.log,
		})
		if err != nil {
			return err
		}
		w.member = m
		if w.egress != nil {
			_ = w.egress.AddCluster(m.Addr())
		}
	}
	if w.member.Alive(masterID) {
		return nil // already in the cluster; gossip keeps us there
	}
	jctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return w.member.Join(jctx, seed)
}

// reportLoop sends a load report every period while registered.
func (w *Worker) reportLoop() {
	for {
		d := time.Duration(w.period.Load())
		select {
		case <-w.ctx.Done():
			return
		case <-time.After(d):
		}
		if !w.registered.Load() {
			continue
		}
		l := w.load(w.ctx)
		l.Pools, _ = json.Marshal(w.pools.Stats())
		ctx, cancel := context.WithTimeout(w.ctx, max(d, time.Second))
		err := contract.WorkerManagerClient{C: w.client}.Report(ctx, l)
		cancel()
		if err != nil && w.ctx.Err() == nil {
			w.log.Debug().Err(err).Msg("load report failed")
		}
		if err == nil {
			w.stayInGossip()
		}
	}
}

var heapSample = []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}

// load measures the worker: Go heap in use plus the runtime's PSS.
func (w *Worker) load(ctx context.Context) wire.Load {
	l, _ := w.measure(ctx)
	return l
}

// measure is load plus the runtime's own statistics (one /proc walk).
func (w *Worker) measure(ctx context.Context) (wire.Load, browser.Stats) {
	s := make([]metrics.Sample, len(heapSample))
	copy(s, heapSample)
	metrics.Read(s)
	var heap uint64
	if s[0].Value.Kind() == metrics.KindUint64 {
		heap = s[0].Value.Uint64()
	}
	st, err := w.runtime.Stats(ctx)
	if err != nil {
		w.log.Debug().Err(err).Msg("runtime stats")
	}
	l := wire.Load{Total: heap + st.PSS, GoHeap: heap, BrowserPSS: st.PSS, At: time.Now()}
	w.instances.counts(&l)
	js := w.jobs.Stats()
	l.JobSlots, l.JobsRunning = js.Slots, js.Used
	if w.grade != nil {
		l.FrameScale = w.grade.Scale()
	}
	w.blockedMu.Lock()
	if len(w.blockedByApp) > 0 {
		l.EgressBlocked = maps.Clone(w.blockedByApp)
	}
	w.blockedMu.Unlock()
	return l, st
}

// instanceClosed tells the master an instance was closed for good, best
// effort (the master also learns it from the next registration). The epoch
// lets the master ignore it if the instance has moved on meanwhile.
func (w *Worker) instanceClosed(iid string, epoch uint64) {
	if w.client == nil {
		return
	}
	ctx, cancel := context.WithTimeout(w.ctx, 5*time.Second)
	defer cancel()
	if err := (contract.WorkerManagerClient{C: w.client}).InstanceClosed(ctx, wire.ClosedInstance{ID: iid, Epoch: epoch}); err != nil && w.ctx.Err() == nil {
		w.log.Warn().Str("instance", iid).Err(err).Msg("could not tell the master an instance closed")
	}
}

// Ready reports whether the worker is registered with the master.
func (w *Worker) Ready() bool { return w.registered.Load() && !w.stopping.Load() }

// leave tells the master this worker stops, so it migrates the instances
// elsewhere first (their clients follow) and removes the worker as soon as
// it disconnects.
func (w *Worker) leave() {
	if w.client == nil || !w.registered.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.LeaveTimeout)
	defer cancel()
	t0 := time.Now()
	res, err := contract.WorkerManagerClient{C: w.client}.Leave(ctx)
	if err != nil {
		w.log.Warn().Err(err).Msg("could not hand the instances over before stopping")
		return
	}
	w.log.Info().Int("migrated", res.Migrated).Int("failed", len(res.Failed)).Dur("took", time.Since(t0)).Msg("instances handed over before stopping")
}

// Close stops the worker: leaves the gossip layer (the master then removes
// it at once), stops serving, closes browsers and the runtime.
func (w *Worker) Close() error {
	w.leave()
	w.stopping.Store(true)
	if m := w.gossip(); m != nil {
		_ = m.Leave(2 * time.Second)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if w.srv != nil {
		_ = w.srv.Shutdown(ctx)
	}
	// Running job attempts end first (their Done tells the master to
	// queue them again) while the master connection is still up.
	_ = w.jobs.Close(ctx)
	w.registered.Store(false)
	w.cancel()
	w.instances.closeAll(ctx)
	w.files.close()
	if w.node != nil {
		_ = w.node.Close()
	}
	if m := w.gossip(); m != nil {
		_ = m.Shutdown()
	}
	w.wg.Wait()
	_ = w.pools.Close(ctx)
	err := w.runtime.Close()
	if w.egress != nil {
		_ = w.egress.Close() // what the browsers did not close already
	}
	return err
}
