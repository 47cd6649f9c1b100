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
	"net"
	"net/http"
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
	"github.com/cloudbrowser-go/cloudbrowser/internal/membership"
	"github.com/cloudbrowser-go/cloudbrowser/internal/quota"
	"github.com/cloudbrowser-go/cloudbrowser/internal/secret"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/auth"
	"github.com/cloudbrowser-go/cloudbrowser/master/balance"
	"github.com/cloudbrowser-go/cloudbrowser/master/jobs"
	"github.com/cloudbrowser-go/cloudbrowser/master/jobsapi"
	"github.com/cloudbrowser-go/cloudbrowser/master/registry"
	"github.com/cloudbrowser-go/cloudbrowser/master/rendercache"
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
	// Clock is the clock of the login limits, session revocations, author
	// tokens and identity buckets (nil = clock.Real; tests pass a fake).
	Clock clock.Clock

	// Jobs configures the job queue (docs/jobs.md); Runner, Policy, hooks
	// and the store are the master's. RenderCache configures the render
	// result cache (its Store is the master's).
	Jobs        jobs.Config
	RenderCache rendercache.Config
	// JobsToken may submit and read jobs, renders and monitors, nothing
	// else ("" = only admin and author tokens may).
	JobsToken string

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
	}
}

// Master is a running master.
type Master struct {
	cfg Config
	id  string
	log zerolog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	node   *rmi.Node
	rmiLn  net.Listener
	member *membership.Member
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

	admin   *http.Server
	adminLn net.Listener
	// front is the public side (SetFront); publicAddr is its address with
	// the port as bound ("" = no proxies): --listen with port 0 becomes
	// real here.
	front      Front
	publicAddr string
	startedAt  time.Time
	metrics    *masterMetrics
	history    *history
	// hopKey signs the proxy-to-worker HTTP hop (internal/hop). Workers and
	// proxies get it over their RMI session, so they need not hold the
	// cluster secret it is derived from; derived, it survives restarts.
	hopKey []byte
	// jobs: queue, render cache and API (master/jobsapi, jobapi.go).
	jobs *jobsapi.Service
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
	})
	if err != nil {
		return nil, fmt.Errorf("master: placement epochs: %w", err)
	}
	m.identities = quota.NewBuckets(cfg.Quotas.IdentityBurst, cfg.Quotas.IdentitiesPerMinute, maxIdentityKeys)
	m.istate = newInstanceStates(st, m.workers.Gate.CheckEpoch)
	m.metrics.reg.MustRegister(m.istate.collectors()...)
	m.history = newHistory()
	m.scheme = httpsec.Scheme{AlwaysHTTPS: publicHTTPS, TrustForwardedProto: cfg.TrustForwardedProto}
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
		Secret: cfg.Secret, Tokens: auth.Tokens{Admin: cfg.AdminToken, Author: cfg.AuthorToken, Jobs: cfg.JobsToken},
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
	m.startedAt = time.Now()
	// The stored instance table first: a worker that registers at once
	// must find its instances (and a user's strategy key its instance).
	n, err := m.workers.RecoverInstances()
	if err != nil {
		return fmt.Errorf("master: %w", err)
	}
	if n > 0 {
		m.log.Info().Int("instances", n).Msg("instance table loaded from the store; waiting for their workers")
	}
	node, err := rmi.New(rmi.Config{Name: m.id, Secret: []byte(m.cfg.Secret), Logger: m.log,
		RoleSecrets: map[string][]byte{
			secret.RoleWorker: []byte(secret.RoleKey(m.cfg.Secret, secret.RoleWorker)),
			secret.RoleProxy:  []byte(secret.RoleKey(m.cfg.Secret, secret.RoleProxy)),
		},
		// A worker's id is proven by its own key (Register).
		NameSecret: func(role, name string) []byte {
			if role != secret.RoleWorker {
				return nil
			}
			return []byte(secret.WorkerKey(m.cfg.Secret, name))
		}})
	if err != nil {
		return fmt.Errorf("master: rmi: %w", err)
	}
	m.node = node
	for name, svc := range serviceRoles(m) {
		if err := node.RegisterFor(name, svc.obj, svc.roles...); err != nil {
			return fmt.Errorf("master: register %s: %w", name, err)
		}
	}
	var lc net.ListenConfig
	if m.rmiLn, err = lc.Listen(ctx, "tcp", m.cfg.RMIAddr); err != nil {
		return fmt.Errorf("master: %w", config.Errorf("RMIAddr", "%s: %w", m.cfg.RMIAddr, err))
	}
	// Gossip first: Cluster.Info, which joining processes call at once,
	// reads its address (a worker calling in before it was set was a data
	// race). Calls wait in the listener's backlog meanwhile.
	if err := m.startGossip(); err != nil {
		return err
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		if err := node.Serve(m.ctx, m.rmiLn); err != nil && m.ctx.Err() == nil {
			m.log.Error().Err(err).Msg("rmi server stopped")
		}
	}()
	if m.cfg.AdminAddr != "" {
		if m.adminLn, err = lc.Listen(ctx, "tcp", m.cfg.AdminAddr); err != nil {
			return fmt.Errorf("master: %w", config.Errorf("AdminAddr", "%s: %w", m.cfg.AdminAddr, err))
		}
		m.admin = &http.Server{Handler: m.adminHandler(false), ReadHeaderTimeout: 10 * time.Second}
		m.serve(func() error { return m.admin.Serve(m.adminLn) }, "admin")
	}
	if m.cfg.PublicAddr != "" {
		if err := m.startFront(ctx); err != nil {
			return err
		}
	}
	m.registerReaders()
	m.wg.Add(1)
	go m.sampleLoop()
	m.log.Info().Str("rmi", m.RMIAddr()).Str("gossip", m.member.Addr()).Str("admin", m.AdminAddr()).
		Str("public", m.publicAddr).Int("proxies", m.cfg.Proxies).Str("balancer", string(m.cfg.Balancer)).
		Msg("master started")
	return nil
}

func (m *Master) serve(serve func() error, name string) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			m.log.Error().Err(err).Str("server", name).Msg("http server stopped")
		}
	}()
}

func (m *Master) startGossip() error {
	host, p, err := membership.ParseBind(m.cfg.GossipAddr)
	if err != nil {
		return fmt.Errorf("master: %w", err)
	}
	m.member, err = membership.Start(membership.Config{
		Name: m.id, BindAddr: host, BindPort: p, Advertise: m.cfg.GossipAdvertise,
		Key: gossipKey(m.cfg.Secret), Label: "cloudbrowser",
		Meta:   membership.Meta{Role: membership.RoleMaster, ID: m.id},
		Logger: m.log, OnEvent: m.onMember,
	})
	if err != nil {
		return fmt.Errorf("master: %w", err)
	}
	return nil
}

// onMember reacts to the gossip layer: a failed or departed worker is removed
// with its instances at once.
func (m *Master) onMember(ev membership.Event) {
	ev2 := m.log.Info().Str("member", ev.Name).Str("addr", ev.Addr).Str("role", ev.Meta.Role).Str("event", ev.Kind.String())
	ev2.Msg("membership event")
	m.metrics.members.WithLabelValues(ev.Meta.Role, ev.Kind.String()).Inc()
	if ev.Meta.Role != membership.RoleWorker {
		return
	}
	switch ev.Kind {
	case membership.Failed:
		m.workers.SuspectMember(ev.Meta.ID, ev.Name, "gossip: failed")
	case membership.Left:
		m.workers.DeadMember(ev.Meta.ID, ev.Name, "gossip: left")
	}
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
func (m *Master) RMIAddr() string {
	if m.rmiLn == nil {
		return ""
	}
	return m.rmiLn.Addr().String()
}

// GossipAddr is the membership layer's bound address ("" before Start).
func (m *Master) GossipAddr() string {
	if m.member == nil {
		return ""
	}
	return m.member.Addr()
}

// AdminAddr is the admin listener's address ("" if none).
func (m *Master) AdminAddr() string {
	if m.adminLn == nil {
		return ""
	}
	return m.adminLn.Addr().String()
}

// PublicAddr is the public address of the proxies, embedded or not, with
// the port as bound ("" if none).
func (m *Master) PublicAddr() string { return m.publicAddr }

// Status is the cluster as the master sees it.
func (m *Master) Status() wire.ClusterStatus {
	st := wire.ClusterStatus{MasterID: m.id, Strategy: string(m.cfg.Balancer), At: time.Now(),
		Workers: []wire.WorkerStatus{}, Apps: []wire.App{}, Instances: []wire.InstanceInfo{}, Members: []wire.MemberStatus{}}
	m.workers.Status(&st)
	for _, a := range m.apps.List() {
		a.Files = nil
		st.Apps = append(st.Apps, a)
	}
	if m.member != nil {
		for _, mi := range m.member.Members() {
			st.Members = append(st.Members, wire.MemberStatus{Name: mi.Name, Addr: mi.Addr, State: mi.State, Role: mi.Meta.Role, ID: mi.Meta.ID})
		}
	}
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
	if m.admin != nil {
		_ = m.admin.Shutdown(ctx)
	}
	if m.member != nil {
		_ = m.member.Leave(time.Second)
		_ = m.member.Shutdown()
	}
	m.workers.Close()
	var err error
	if m.node != nil {
		err = m.node.Close()
	}
	m.wg.Wait()
	if cerr := m.state.Close(); err == nil {
		err = cerr
	}
	return err
}
