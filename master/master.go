// Package master is the cluster's control plane: the Application Manager,
// the RMI services of the Worker Manager (over master/registry, which owns
// the instance table, load reports and placements), the route lookups of
// the reverse proxies, the proxies' configuration and records and the
// admin HTTP endpoints. The proxies themselves, embedded or
// processes, are assembled in front of it by the program that runs it
// (front.go).
package master

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/hop"
	"github.com/cloudbrowser-go/cloudbrowser/internal/httpsec"
	"github.com/cloudbrowser-go/cloudbrowser/internal/ids"
	"github.com/cloudbrowser-go/cloudbrowser/internal/quota"
	"github.com/cloudbrowser-go/cloudbrowser/internal/secret"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/auth"
	"github.com/cloudbrowser-go/cloudbrowser/master/balance"
	"github.com/cloudbrowser-go/cloudbrowser/master/jobs"
	"github.com/cloudbrowser-go/cloudbrowser/master/jobsapi"
	"github.com/cloudbrowser-go/cloudbrowser/master/reach"
	"github.com/cloudbrowser-go/cloudbrowser/master/registry"
	"github.com/cloudbrowser-go/cloudbrowser/master/rendercache"
	"github.com/cloudbrowser-go/cloudbrowser/master/sessions"
	"github.com/cloudbrowser-go/cloudbrowser/master/state"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// Config configures a master.
type Config struct {
	// Secret is the cluster secret (RMI authentication, gossip key).
	Secret string
	// AdminToken authorizes the admin API; AuthorToken only deploying and
	// listing applications.
	AdminToken, AuthorToken string
	// MetricsToken is the bearer token workers require on /metrics; ""
	// generates one for this run.
	MetricsToken string
	// DataDir keeps deployed applications ("" = keep nothing).
	DataDir string

	// RMIAddr is where workers and proxies connect (host:port).
	RMIAddr string
	// GossipAddr is the memberlist bind address (host:port, port 0 = any).
	GossipAddr string
	// GossipAdvertise is the address others use to reach the gossip port.
	GossipAdvertise string
	// AdminAddr serves /healthz, /readyz and /api ("" = no admin listener).
	AdminAddr string

	// PublicAddr is where the reverse proxies listen ("" = no proxy).
	PublicAddr string
	// Proxies is the number of proxy child processes sharing PublicAddr;
	// 0 embeds one proxy in the master. Either is started by the Front
	// given with SetFront.
	Proxies int
	// ProxyCommand is the executable and leading arguments that start a
	// proxy process; --master, --listen, --secret-file (<data-dir>/proxy.key)
	// and --name are appended (ProxySettings).
	ProxyCommand []string
	// SecretFile is passed to proxy children when there is no DataDir to
	// keep proxy.key in.
	SecretFile string
	// PublicURL is how users reach the cluster (e.g. https://cb.example.com;
	// "" = unknown). An https URL makes every cookie Secure and every page
	// send Strict-Transport-Security, whatever the request looked like.
	PublicURL string
	// TrustForwardedProto: a TLS-terminating load balancer in front of the
	// proxies sets X-Forwarded-Proto; the proxies pass it on and the
	// workers and the master believe it. Only enable behind such a balancer.
	TrustForwardedProto bool
	// PublicTLS: the proxies serve TLS themselves (--tls-cert), which
	// makes the public side HTTPS as an https PublicURL does.
	PublicTLS bool

	Balancer     balance.Strategy
	NoProjection bool
	ReportPeriod time.Duration
	// DeadAfter: a worker whose connection dropped is removed if it does
	// not re-register within this time, even if gossip still sees it.
	DeadAfter time.Duration
	// Login limits failed logins per user name and client address.
	Login auth.LoginLimits
	// Quotas bound instances, browsers, sockets and new anonymous
	// identities per user and per client address (nil = wire.DefaultQuotas).
	// The workers receive them when they register.
	Quotas *wire.Quotas
	// Clock is the clock of the registry's liveness and failover timing
	// (dead-after, grace, holder waits, pings), the login limits, session
	// revocations, author tokens and identity buckets (nil = clock.Real;
	// tests pass a fake).
	Clock clock.Clock

	// Jobs configures the job queue (docs/jobs.md); Runner, Policy, hooks
	// and the store are the master's. RenderCache configures the render
	// result cache (its Store is the master's).
	Jobs        jobs.Config
	RenderCache rendercache.Config
	// JobsToken may submit and read jobs, renders and monitors, nothing
	// else ("" = only admin and author tokens may).
	JobsToken string
	// AutomationToken may open, read and close automation sessions,
	// nothing else ("" = only admin and author tokens may);
	// AutomationMaxSessions bounds one principal's open sessions (0 =
	// sessions.DefaultMaxPerPrincipal). docs/automation.md.
	AutomationToken       string
	AutomationMaxSessions int
	// AutomationQueueWait is how long a session request waits for a
	// browser when none is free (0 = sessions.DefaultQueueWait, negative:
	// answer at once); AutomationQueueMax bounds the waiting requests.
	AutomationQueueWait time.Duration
	AutomationQueueMax  int

	Apps   []wire.App
	Logger zerolog.Logger
	// ChildOutput receives the proxy children's stdout and stderr (their
	// own structured logs); nil discards them.
	ChildOutput io.Writer
}

// DefaultConfig is the master's configuration without any settings (the
// CLI's flag defaults): zero fields of a Config passed to New take these
// values too, except the addresses, where "" means "none" or "any port".
func DefaultConfig() Config {
	q := wire.DefaultQuotas()
	return Config{
		RMIAddr: "127.0.0.1:7070", GossipAddr: "127.0.0.1:7946", AdminAddr: "127.0.0.1:9090", PublicAddr: ":8080",
		Balancer: balance.LeastLoad, ReportPeriod: time.Second, DeadAfter: 10 * time.Second,
		Login: auth.DefaultLoginLimits(), Quotas: &q, Jobs: jobs.DefaultConfig(), RenderCache: rendercache.DefaultConfig(),
		AutomationMaxSessions: sessions.DefaultMaxPerPrincipal,
	}
}

// Master is a running master: its lifecycle (New, Start, Close) and what
// the program running it and the tests ask of it. Its parts own the rest:
// the RMI side (rmiServer, with the services of services.go), the gossip
// membership (gossip), the HTTP side (adminAPI), apps (AppManager), the
// worker and instance tables (registry.Registry), the proxies' records
// and subscriptions (ProxyTable, proxySet), the instances' stored state
// (instanceStates), jobs (jobsapi.Service) and automation sessions
// (sessions.Service).
type Master struct {
	cfg Config
	id  string
	log zerolog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// rmi and gossip are nil before Start.
	rmi    *rmiServer
	gossip *gossip
	admin  *adminAPI
	apps   *AppManager
	access *auth.Auth
	// state is the durable state store (<data-dir>/state.db).
	state *state.Store
	// identities limits new anonymous identities per client address,
	// cluster-wide (every worker asks before minting one).
	identities *quota.Buckets
	workers    *registry.Registry
	// istate is the instances' shared state (instancestate.go).
	istate  *instanceStates
	proxies *proxySet
	bal     *balance.Balancer

	// front is the public side (SetFront); publicAddr is its address with
	// the port as bound ("" = no proxies): --listen with port 0 becomes
	// real here.
	front      Front
	publicAddr string
	metrics    *masterMetrics
	history    *history
	// reach probes the workers' advertised addresses (from Start on).
	reach *reach.Prober
	// hopKey signs the proxy-to-worker HTTP hop (internal/hop). Workers and
	// proxies get it over their RMI session, so they need not hold the
	// cluster secret it is derived from; derived, it survives restarts.
	hopKey []byte
	// jobs: queue, render cache and API (master/jobsapi, jobapi.go).
	jobs *jobsapi.Service
	// sessions: automation sessions (master/sessions, sessionapi.go).
	sessions *sessions.Service
	// portKey proves to processes about to share the public port that its
	// proxies are of this cluster (proxy.ListenShared).
	portKey []byte
	// scheme tells whether a request came over HTTPS.
	scheme httpsec.Scheme
}

// New validates cfg and prepares a master; Start runs it.
func New(cfg Config) (*Master, error) {
	if err := secret.Check(cfg.Secret); err != nil {
		return nil, fmt.Errorf("master: cluster secret: %w", err)
	}
	if cfg.AdminToken == "" {
		return nil, errors.New("master: admin token is required")
	}
	if cfg.RMIAddr == "" {
		cfg.RMIAddr = "127.0.0.1:0"
	}
	if cfg.GossipAddr == "" {
		cfg.GossipAddr = "127.0.0.1:0"
	}
	def := DefaultConfig()
	config.OrDefault(&cfg.ReportPeriod, def.ReportPeriod)
	if cfg.Balancer == "" {
		cfg.Balancer = def.Balancer
	}
	if cfg.Proxies < 0 {
		return nil, fmt.Errorf("master: %w", config.Errorf("Proxies", "must be >= 0, got %d", cfg.Proxies))
	}
	if cfg.AutomationMaxSessions < 0 {
		return nil, fmt.Errorf("master: %w", config.Errorf("AutomationMaxSessions", "must be >= 0, got %d", cfg.AutomationMaxSessions))
	}
	if cfg.Proxies > 0 && len(cfg.ProxyCommand) == 0 {
		return nil, fmt.Errorf("master: %w", config.Errorf("ProxyCommand", "is needed to start proxy processes"))
	}
	if cfg.Quotas == nil {
		cfg.Quotas = def.Quotas
	}
	if err := ValidateQuotas(*cfg.Quotas); err != nil {
		return nil, fmt.Errorf("master: %w", err)
	}
	cfg.Login = cfg.Login.WithDefaults()
	if err := cfg.Login.Validate(); err != nil {
		return nil, fmt.Errorf("master: %w", err)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real
	}
	publicHTTPS, err := httpsec.PublicHTTPS(cfg.PublicURL)
	if err != nil {
		return nil, fmt.Errorf("master: %w", config.Errorf("PublicURL", "%w", err))
	}
	if cfg.MetricsToken == "" {
		cfg.MetricsToken = ids.Random(32)
	}
	m := &Master{cfg: cfg, id: "m-" + ids.Random(8), hopKey: secret.Derive(cfg.Secret, "http-hop", hop.KeyLen),
		portKey: portKey(cfg.Secret)}
	statePath := ""
	if cfg.DataDir != "" {
		statePath = filepath.Join(cfg.DataDir, state.FileName)
	}
	st, err := state.Open(statePath)
	if err != nil {
		return nil, fmt.Errorf("master: %w", err)
	}
	m.state = st
	ok := false
	if cfg.DataDir != "" {
		// The role keys are derived, not state: rewritten if the cluster
		// secret changed, so they always match what the master accepts.
		for _, role := range []string{secret.RoleWorker, secret.RoleProxy} {
			if err := secret.Write(m.RoleKeyFile(role), secret.RoleKey(cfg.Secret, role)); err != nil {
				_ = st.Close()
				return nil, fmt.Errorf("master: %s key: %w", role, err)
			}
		}
	}
	defer func() {
		if !ok {
			_ = st.Close() // a failed New must not keep the data directory locked
		}
	}()
	m.log = cfg.Logger.With().Str("master", m.id).Logger()
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.bal = balance.New(balance.Options{Strategy: cfg.Balancer, Project: !cfg.NoProjection})
	m.proxies = &proxySet{log: m.log.With().Str("component", "proxies").Logger(), ctx: m.ctx, wg: &m.wg, conns: map[*rmi.Conn]string{}}
	m.metrics = newMasterMetrics()
	m.workers, err = registry.New(registry.Config{
		Logger: m.log, Balancer: m.bal, Store: st,
		Apps: registry.AppsFunc(func(name string) (wire.App, bool) {
			// As sent to workers (CreateInstance): large bundles as stubs.
			app, ok := m.apps.Get(name)
			if !ok {
				return app, false
			}
			if w, err := m.apps.forWorkers(app, nil); err == nil {
				app = w
			}
			return app, true
		}),
		ReportPeriod: cfg.ReportPeriod, DeadAfter: cfg.DeadAfter, Proxies: m.proxies, Quotas: cfg.Quotas,
		Jobs: jobSlots{m}, Observer: m.metrics,
		Clock: cfg.Clock,
	})
	if err != nil {
		return nil, fmt.Errorf("master: placement epochs: %w", err)
	}
	m.identities = quota.NewBuckets(cfg.Quotas.IdentityBurst, cfg.Quotas.IdentitiesPerMinute, maxIdentityKeys)
	m.istate = newInstanceStates(st, m.workers.Gate.CheckEpoch)
	m.metrics.reg.MustRegister(m.istate.collectors()...)
	m.history = newHistory()
	// Real time, not cfg.Clock: the probes are network I/O (reach.Config).
	m.reach = reach.New(reach.Config{Workers: m.workers.Views, Clock: clock.Real, Logger: m.log})
	m.scheme = httpsec.Scheme{AlwaysHTTPS: publicHTTPS || cfg.PublicTLS, TrustForwardedProto: cfg.TrustForwardedProto}
	if err := m.startJobs(); err != nil {
		return nil, err
	}
	m.apps = newAppManager(m.log, m.workers.Refs)
	m.apps.state = st
	accPath := ""
	if cfg.DataDir != "" {
		accPath = filepath.Join(cfg.DataDir, "users.json")
	}
	m.access, err = auth.New(auth.Config{State: st, AccountsFile: accPath, Now: cfg.Clock.Now, Login: cfg.Login,
		Secret: cfg.Secret, Tokens: auth.Tokens{Admin: cfg.AdminToken, Author: cfg.AuthorToken, Jobs: cfg.JobsToken, Automation: cfg.AutomationToken},
		Log: m.log,
		OnRevoke: func(rev wire.Revocation) {
			ctx, cancel := context.WithTimeout(m.ctx, 15*time.Second)
			defer cancel()
			m.apps.push(ctx, "RevokeSessions", func(ctx context.Context, w contract.WorkerApps) error {
				return w.RevokeSessions(ctx, rev)
			})
			m.log.Info().Str("user", rev.User).Msg("sessions revoked on every worker")
		},
		PushEnded: func(ctx context.Context, rev wire.SessionRevocation) {
			ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			defer cancel()
			m.apps.push(ctx, "EndSession", func(ctx context.Context, w contract.WorkerApps) error {
				return w.EndSession(ctx, rev)
			})
		},
		// An author created later under the same name must not inherit the
		// right to use other authors' pools.
		OnAuthorRemoved: func(name string) error { return dropJobUser(st, name) },
		ObserveLogin:    func(outcome string) { m.metrics.logins.WithLabelValues(outcome).Inc() },
		ObserveLockout:  func(by string) { m.metrics.lockouts.WithLabelValues(by).Inc() },
	})
	if err != nil {
		return nil, fmt.Errorf("master: %w", err)
	}
	if cfg.DataDir != "" {
		m.apps.store = &appStore{dir: filepath.Join(cfg.DataDir, "apps")}
		if err := m.apps.loadStored(); err != nil {
			// A damaged app must not keep the others down.
			m.log.Error().Err(err).Msg("some stored applications could not be loaded")
		}
	}
	var startup []wire.App
	for _, a := range cfg.Apps {
		if m.apps.deleted(a.MountPoint) {
			// Deleted through the API: it stays deleted until deployed again.
			m.log.Info().Str("app", a.MountPoint).Msg("start-up app left out: it was deleted")
			continue
		}
		startup = append(startup, a)
		if _, stored := m.apps.Get(a.MountPoint); stored {
			continue // deployed versions win over the start-up set
		}
		if _, _, err := m.apps.Add(m.ctx, a, auth.AdminPrincipal); err != nil {
			return nil, fmt.Errorf("master: app %q: %w", a.MountPoint, err)
		}
	}
	for _, a := range startup {
		// Start-up apps stored before owners were recorded are the admin's.
		if err := m.apps.claim(a.MountPoint, auth.AdminPrincipal.Name); err != nil {
			return nil, fmt.Errorf("master: app %q: %w", a.MountPoint, err)
		}
	}
	if err := m.startSessions(); err != nil {
		return nil, err
	}
	m.admin = &adminAPI{id: m.id, log: m.log, clock: cfg.Clock, scheme: m.scheme, metrics: m.metrics.reg,
		stopping: m.ctx, status: m.Status, apps: m.apps, access: m.access, workers: m.workers, istate: m.istate,
		jobs: m.jobs, sessions: m.sessions, history: m.history}
	ok = true
	return m, nil
}

// ID is the master's id.
func (m *Master) ID() string { return m.id }

// RoleKeyFile is where the master keeps the key of role (secret.RoleWorker,
// secret.RoleProxy) for the processes of that role: <data-dir>/<role>.key,
// or "" without a data directory.
func (m *Master) RoleKeyFile(role string) string {
	if m.cfg.DataDir == "" {
		return ""
	}
	return filepath.Join(m.cfg.DataDir, role+".key")
}

// WorkerKeyFile is where WriteWorkerKey puts the key of worker id ("" with
// no data directory).
func (m *Master) WorkerKeyFile(id string) string {
	if m.cfg.DataDir == "" {
		return ""
	}
	return WorkerKeyPath(m.cfg.DataDir, id)
}

// WorkerKeyPath is the key file of worker id in a master's data directory.
func WorkerKeyPath(dataDir, id string) string {
	return filepath.Join(dataDir, "workers", id+".key")
}

// WriteWorkerKey writes the key of worker id (mode 0600) for a worker this
// master starts itself, and returns its path.
func (m *Master) WriteWorkerKey(id string) (string, error) {
	if !ids.ValidWorker(id) {
		return "", fmt.Errorf("worker id %q: %s", id, ids.WorkerRule)
	}
	path := m.WorkerKeyFile(id)
	if path == "" {
		return "", errors.New("the master has no data directory to write a worker key to")
	}
	if err := secret.Write(path, secret.WorkerKey(m.cfg.Secret, id)); err != nil {
		return "", fmt.Errorf("worker %s key: %w", id, err)
	}
	return path, nil
}

// Start opens the listeners, joins the gossip layer and starts the proxies.
func (m *Master) Start(ctx context.Context) error {
	// The stored instance table first: a worker that registers at once
	// must find its instances (and a user's strategy key its instance).
	n, err := m.workers.RecoverInstances()
	if err != nil {
		return fmt.Errorf("master: %w", err)
	}
	if n > 0 {
		m.log.Info().Int("instances", n).Msg("instance table loaded from the store; waiting for their workers")
	}
	// After the table: a session whose instance is not in it is ended.
	m.wg.Go(func() { m.sessions.Run(m.ctx) })
	if m.rmi, err = listenRMI(ctx, m.cfg, m.id, m.log, m.workers.Gate.Identify, serviceRoles(m)); err != nil {
		return err
	}
	// Gossip first: Cluster.Info, which joining processes call at once,
	// reads its address (a worker calling in before it was set was a data
	// race). Calls wait in the listener's backlog meanwhile.
	if m.gossip, err = startGossip(m.cfg, m.id, m.log, m.workers, m.metrics.members); err != nil {
		return err
	}
	m.rmi.serve(m.ctx, &m.wg, m.log)
	if m.cfg.AdminAddr != "" {
		if err := m.admin.start(ctx, m.cfg.AdminAddr, &m.wg); err != nil {
			return err
		}
	}
	if m.cfg.PublicAddr != "" {
		if err := m.startFront(ctx); err != nil {
			return err
		}
	}
	m.metrics.readFrom(m.workers, m.apps, m.rmi.node)
	m.wg.Go(func() { m.history.run(m.ctx, m.workers.Views) })
	m.wg.Go(func() { m.reach.Run(m.ctx) })
	m.log.Info().Str("rmi", m.RMIAddr()).Str("gossip", m.GossipAddr()).Str("admin", m.AdminAddr()).
		Str("public", m.publicAddr).Int("proxies", m.cfg.Proxies).Str("balancer", string(m.cfg.Balancer)).
		Msg("master started")
	return nil
}

// startFront starts the public side: N proxy processes on one port, or
// one proxy embedded in the master.
func (m *Master) startFront(ctx context.Context) error {
	if m.front == nil {
		return fmt.Errorf("master: %w", config.Errorf("PublicAddr", "%s: no proxies were assembled to serve it (Master.SetFront)", m.cfg.PublicAddr))
	}
	addr, err := m.front.Start(ctx)
	if err != nil {
		return err
	}
	m.publicAddr = addr
	return nil
}

// RMIAddr is the address workers and proxies dial.
func (m *Master) RMIAddr() string { return m.rmi.addr() }

// GossipAddr is the membership layer's bound address ("" before Start).
func (m *Master) GossipAddr() string { return m.gossip.addr() }

// AdminAddr is the admin listener's address ("" if none).
func (m *Master) AdminAddr() string { return m.admin.addr() }

// PublicAddr is the public address of the proxies, embedded or not, with
// the port as bound ("" if none).
func (m *Master) PublicAddr() string { return m.publicAddr }

// Status is the cluster as the master sees it.
func (m *Master) Status() wire.ClusterStatus {
	st := wire.ClusterStatus{MasterID: m.id, Strategy: string(m.cfg.Balancer), At: time.Now(),
		Workers: []wire.WorkerStatus{}, Apps: []wire.App{}, Instances: []wire.InstanceInfo{}}
	m.workers.Status(&st)
	m.reach.Annotate(st.Workers)
	for _, a := range m.apps.List() {
		a.Files = nil
		st.Apps = append(st.Apps, a)
	}
	st.Members = m.gossip.members()
	st.Proxies = m.proxies.status()
	if m.jobs != nil {
		st.Jobs = m.jobs.Status()
	}
	return st
}

// BeginShutdown tells the master the whole cluster is stopping (cloudbrowser
// up on Ctrl-C): workers that leave now keep their instances instead of
// migrating them to workers that are about to stop too.
func (m *Master) BeginShutdown() { m.workers.Moves.BeginShutdown() }

// Close stops the master: proxies first (so users get answers until the
// end), then the gossip layer (leaving gracefully) and RMI.
func (m *Master) Close() error {
	m.BeginShutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if m.front != nil {
		m.front.Stop(ctx)
	}
	m.cancel()
	m.admin.shutdown(ctx)
	m.gossip.leave()
	m.workers.Close()
	err := m.rmi.close()
	m.wg.Wait()
	if cerr := m.state.Close(); err == nil {
		err = cerr
	}
	return err
}
