// Package master is the cluster's control plane: the Application Manager,
// the Worker Manager (instance table, load reports, balancer), the route
// lookups of the reverse proxies, the Reverse Proxy Manager and the admin
// HTTP endpoints.
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

	"github.com/cloudbrowser-go/cloudbrowser/internal/ids"
	"github.com/cloudbrowser-go/cloudbrowser/internal/membership"
	"github.com/cloudbrowser-go/cloudbrowser/internal/secret"
	"github.com/cloudbrowser-go/cloudbrowser/internal/session"
	"github.com/cloudbrowser-go/cloudbrowser/internal/supervise"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/balance"
	"github.com/cloudbrowser-go/cloudbrowser/master/state"
	"github.com/cloudbrowser-go/cloudbrowser/proxy"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// Config configures a master.
type Config struct {
	// Secret is the cluster secret (RMI authentication, gossip key).
	Secret string
	// AdminToken authorizes the admin API; AuthorToken only deploying and
	// listing applications.
	AdminToken, AuthorToken string
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
	// 0 embeds one proxy in the master.
	Proxies int
	// ProxyCommand is the executable and leading arguments that start a
	// proxy process; the master appends --master, --listen and --secret-file.
	ProxyCommand []string
	// SecretFile is passed to proxy children.
	SecretFile string

	Balancer     balance.Strategy
	NoProjection bool
	ReportPeriod time.Duration
	// DeadAfter: a worker whose connection dropped is removed if it does
	// not re-register within this time, even if gossip still sees it.
	DeadAfter time.Duration
	// Login limits failed logins per user name and client address.
	Login LoginLimits
	// Now is the clock of the login limits and session revocations (nil =
	// time.Now; tests).
	Now func() time.Time

	Apps   []wire.App
	Logger zerolog.Logger
	// ChildOutput receives the proxy children's stdout and stderr (their
	// own structured logs); nil discards them.
	ChildOutput io.Writer
}

// Master is a running master.
type Master struct {
	cfg Config
	id  string
	log zerolog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	node     *rmi.Node
	rmiLn    net.Listener
	member   *membership.Member
	apps     *AppManager
	accounts *Accounts
	authors  *authors
	// state is the durable state store (<data-dir>/state.db).
	state   *state.Store
	logins  *loginGuard
	workers *WorkerManager
	proxies *proxySet
	bal     *balance.Balancer

	admin     *http.Server
	adminLn   net.Listener
	public    *http.Server
	publicLn  net.Listener
	embedded  *proxy.Proxy
	children  []*supervise.Process
	startedAt time.Time
	metrics   *masterMetrics
	history   *history
	// adminCodec signs the dashboard's session cookies.
	adminCodec *session.Codec
	// embeddedRate turns the embedded proxy's request count into a rate.
	embeddedRate rateMeter
}

// rateMeter computes a rate from a counter observed now and then.
type rateMeter struct {
	mu   sync.Mutex
	n    uint64
	at   time.Time
	rate float64
}

func (r *rateMeter) observe(n uint64, now time.Time) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d := now.Sub(r.at); !r.at.IsZero() && d >= time.Second && n >= r.n {
		r.rate = float64(n-r.n) / d.Seconds()
		r.n, r.at = n, now
	} else if r.at.IsZero() {
		r.n, r.at = n, now
	}
	return r.rate
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
	if cfg.ReportPeriod <= 0 {
		cfg.ReportPeriod = time.Second
	}
	if cfg.Balancer == "" {
		cfg.Balancer = balance.LeastLoad
	}
	if cfg.Proxies < 0 {
		return nil, fmt.Errorf("master: --proxies must be >= 0, got %d", cfg.Proxies)
	}
	if cfg.Proxies > 0 && len(cfg.ProxyCommand) == 0 {
		return nil, errors.New("master: proxy processes need a proxy command")
	}
	cfg.Login = cfg.Login.withDefaults()
	if err := cfg.Login.Validate(); err != nil {
		return nil, fmt.Errorf("master: %w", err)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	m := &Master{cfg: cfg, id: "m-" + ids.Random(8)}
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
	defer func() {
		if !ok {
			_ = st.Close() // a failed New must not keep the data directory locked
		}
	}()
	m.log = cfg.Logger.With().Str("master", m.id).Logger()
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.bal = balance.New(balance.Options{Strategy: cfg.Balancer, Project: !cfg.NoProjection})
	m.proxies = &proxySet{log: m.log.With().Str("component", "proxies").Logger(), ctx: m.ctx, wg: &m.wg, conns: map[*rmi.Conn]string{}}
	m.workers = NewWorkerManager(WorkerManagerConfig{
		Logger: m.log, Balancer: m.bal, Strategy: string(cfg.Balancer),
		Apps: func(name string) (wire.App, bool) {
			// As sent to workers (CreateInstance): large bundles as stubs.
			app, ok := m.apps.Get(name)
			if !ok {
				return app, false
			}
			if w, err := m.apps.forWorkers(app, nil); err == nil {
				app = w
			}
			return app, true
		},
		ReportPeriod: cfg.ReportPeriod, DeadAfter: cfg.DeadAfter, Notify: m.proxies.notify,
	})
	m.metrics = newMasterMetrics()
	m.history = newHistory()
	m.adminCodec = session.NewFor(cfg.Secret, "admin-session")
	m.workers.observeLookup = func(kind string, start time.Time) {
		m.metrics.lookups.WithLabelValues(kind).Observe(time.Since(start).Seconds())
	}
	m.workers.observePlace = func(strategy, outcome string) {
		m.metrics.placements.WithLabelValues(strategy, outcome).Inc()
	}
	m.apps = newAppManager(m.log, m.workers.refs)
	m.apps.state = st
	m.authors = &authors{st: st}
	accPath := ""
	if cfg.DataDir != "" {
		accPath = filepath.Join(cfg.DataDir, "users.json")
	}
	acc, err := loadAccounts(accPath, cfg.Now)
	if err != nil {
		return nil, fmt.Errorf("master: %w", err)
	}
	m.accounts = acc
	acc.onRevoke = func(rev wire.Revocation) {
		ctx, cancel := context.WithTimeout(m.ctx, 15*time.Second)
		defer cancel()
		m.apps.push(ctx, wire.WorkerRevokeSessions, rev)
		m.log.Info().Str("user", rev.User).Msg("sessions revoked on every worker")
	}
	m.logins = &loginGuard{verify: acc.Verify, lim: newLoginLimiter(cfg.Login, cfg.Now),
		log:     m.log.With().Str("component", "logins").Logger(),
		observe: func(outcome string) { m.metrics.logins.WithLabelValues(outcome).Inc() },
		lockout: func(by string) { m.metrics.lockouts.WithLabelValues(by).Inc() }}
	if cfg.DataDir != "" {
		m.apps.store = &appStore{dir: filepath.Join(cfg.DataDir, "apps")}
		if err := m.apps.loadStored(); err != nil {
			// A damaged app must not keep the others down.
			m.log.Error().Err(err).Msg("some stored applications could not be loaded")
		}
	}
	for _, a := range cfg.Apps {
		if _, stored := m.apps.Get(a.MountPoint); stored {
			continue // deployed versions win over the start-up set
		}
		if _, _, err := m.apps.Add(m.ctx, a, adminPrincipal); err != nil {
			return nil, fmt.Errorf("master: app %q: %w", a.MountPoint, err)
		}
	}
	for _, a := range cfg.Apps {
		// Start-up apps stored before owners were recorded are the admin's.
		if err := m.apps.claim(a.MountPoint, adminPrincipal.name); err != nil {
			return nil, fmt.Errorf("master: app %q: %w", a.MountPoint, err)
		}
	}
	ok = true
	return m, nil
}

// ID is the master's id.
func (m *Master) ID() string { return m.id }

// Start opens the listeners, joins the gossip layer and starts the proxies.
func (m *Master) Start(ctx context.Context) error {
	m.startedAt = time.Now()
	node, err := rmi.New(rmi.Config{Name: m.id, Secret: []byte(m.cfg.Secret), Logger: m.log})
	if err != nil {
		return fmt.Errorf("master: rmi: %w", err)
	}
	m.node = node
	for name, obj := range map[string]any{
		wire.ObjAppManager: appService{m}, wire.ObjWorkerManager: workerService{m},
		wire.ObjRouter: routerService{m}, wire.ObjCluster: clusterService{m},
		wire.ObjAccounts: accountService{m.logins},
	} {
		if err := node.Register(name, obj); err != nil {
			return fmt.Errorf("master: register %s: %w", name, err)
		}
	}
	var lc net.ListenConfig
	if m.rmiLn, err = lc.Listen(ctx, "tcp", m.cfg.RMIAddr); err != nil {
		return fmt.Errorf("master: rmi listen %s: %w", m.cfg.RMIAddr, err)
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		if err := node.Serve(m.ctx, m.rmiLn); err != nil && m.ctx.Err() == nil {
			m.log.Error().Err(err).Msg("rmi server stopped")
		}
	}()

	if err := m.startGossip(); err != nil {
		return err
	}
	if m.cfg.AdminAddr != "" {
		if m.adminLn, err = lc.Listen(ctx, "tcp", m.cfg.AdminAddr); err != nil {
			return fmt.Errorf("master: admin listen %s: %w", m.cfg.AdminAddr, err)
		}
		m.admin = &http.Server{Handler: m.adminHandler(false), ReadHeaderTimeout: 10 * time.Second}
		m.serve(m.admin, m.adminLn, "admin")
	}
	if m.cfg.PublicAddr != "" {
		if err := m.startProxies(ctx); err != nil {
			return err
		}
	}
	m.registerReaders()
	m.wg.Add(1)
	go m.sampleLoop()
	m.log.Info().Str("rmi", m.RMIAddr()).Str("gossip", m.member.Addr()).Str("admin", m.AdminAddr()).
		Str("public", m.cfg.PublicAddr).Int("proxies", m.cfg.Proxies).Str("balancer", string(m.cfg.Balancer)).
		Msg("master started")
	return nil
}

func (m *Master) serve(srv *http.Server, ln net.Listener, name string) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
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
		Key: secret.Derive(m.cfg.Secret, "gossip", 32), Label: "cloudbrowser",
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
		m.workers.deadMember(ev.Meta.ID, ev.Name, "gossip: failed")
	case membership.Left:
		m.workers.deadMember(ev.Meta.ID, ev.Name, "gossip: left")
	}
}

// startProxies runs the Reverse Proxy Manager: N proxy processes on one
// port, or one proxy embedded in the master.
func (m *Master) startProxies(ctx context.Context) error {
	if m.cfg.Proxies == 0 {
		ln, err := proxy.Listen(ctx, "tcp", m.cfg.PublicAddr)
		if err != nil {
			return fmt.Errorf("master: public listen %s: %w", m.cfg.PublicAddr, err)
		}
		m.publicLn = ln
		m.embedded = proxy.New(proxy.Config{
			Router: localRouter{m}, Fallback: m.adminHandler(true),
			Logger: m.log.With().Str("proxy", "embedded").Logger(),
		})
		m.public = &http.Server{Handler: m.embedded, ReadHeaderTimeout: 10 * time.Second}
		m.serve(m.public, ln, "public")
		return nil
	}
	for i := range m.cfg.Proxies {
		args := append(append([]string{}, m.cfg.ProxyCommand[1:]...),
			"--master", m.RMIAddr(), "--listen", m.cfg.PublicAddr, "--secret-file", m.cfg.SecretFile,
			"--name", fmt.Sprintf("proxy-%d", i+1))
		m.children = append(m.children, supervise.Start(m.ctx, m.log, supervise.Spec{
			Name: fmt.Sprintf("proxy-%d", i+1), Path: m.cfg.ProxyCommand[0], Args: args,
			Stdout: m.cfg.ChildOutput, Stderr: m.cfg.ChildOutput,
		}))
	}
	return nil
}

// ProxyPids returns the pids of the proxy child processes (0 = restarting).
func (m *Master) ProxyPids() []int {
	out := make([]int, len(m.children))
	for i, c := range m.children {
		out[i] = c.Pid()
	}
	return out
}

// RMIAddr is the address workers and proxies dial.
func (m *Master) RMIAddr() string {
	if m.rmiLn == nil {
		return ""
	}
	return m.rmiLn.Addr().String()
}

// AdminAddr is the admin listener's address ("" if none).
func (m *Master) AdminAddr() string {
	if m.adminLn == nil {
		return ""
	}
	return m.adminLn.Addr().String()
}

// PublicAddr is the embedded proxy's address ("" if none).
func (m *Master) PublicAddr() string {
	if m.publicLn == nil {
		return ""
	}
	return m.publicLn.Addr().String()
}

// Status is the cluster as the master sees it.
func (m *Master) Status() wire.ClusterStatus {
	st := wire.ClusterStatus{MasterID: m.id, Strategy: string(m.cfg.Balancer), At: time.Now(),
		Workers: []wire.WorkerStatus{}, Apps: []wire.App{}, Instances: []wire.InstanceInfo{}, Members: []wire.MemberStatus{}}
	m.workers.status(&st)
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
	if m.embedded != nil {
		ps := m.embedded.Stats()
		rate := m.embeddedRate.observe(ps.Requests, time.Now())
		st.Proxies = append(st.Proxies, wire.ProxyStatus{Name: "embedded", Addr: m.PublicAddr(), Embedded: true,
			Requests: ps.Requests, RequestsPerSec: rate, WebSocketsOpen: ps.WebSocketsOpen})
	}
	return st
}

// Close stops the master: proxies first (so users get answers until the
// end), then the gossip layer (leaving gracefully) and RMI.
func (m *Master) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if m.public != nil {
		_ = m.embedded.Shutdown(ctx)
		_ = m.public.Shutdown(ctx)
	}
	m.cancel()
	for _, c := range m.children {
		<-c.Done()
	}
	if m.admin != nil {
		_ = m.admin.Shutdown(ctx)
	}
	if m.member != nil {
		_ = m.member.Leave(time.Second)
		_ = m.member.Shutdown()
	}
	m.workers.close()
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
