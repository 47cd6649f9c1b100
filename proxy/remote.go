package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/hop"
	"github.com/cloudbrowser-go/cloudbrowser/internal/ids"
	"github.com/cloudbrowser-go/cloudbrowser/internal/membership"
	"github.com/cloudbrowser-go/cloudbrowser/internal/secret"
	"github.com/cloudbrowser-go/cloudbrowser/internal/urlkind"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// MasterError maps an error of the master (local, or arriving over RMI) to
// this package's sentinels, which pick the page the user sees. Errors
// without a code are transport failures: the master is unavailable.
func MasterError(err error) error {
	var c interface{ RMICode() string }
	if !errors.As(err, &c) {
		return fmt.Errorf("%w: %w", ErrMasterUnavailable, err)
	}
	for _, s := range sentinels {
		if s.code == c.RMICode() {
			return fmt.Errorf("%w: %w", s.err, err)
		}
	}
	var re *rmi.RemoteError
	if errors.As(err, &re) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrMasterUnavailable, err)
}

// sentinels pair the master's error codes with this package's sentinels;
// the page each gets is pages.ForCode's.
var sentinels = []struct {
	code string
	err  error
}{
	{wire.CodeUnknownApp, ErrUnknownApp},
	{wire.CodeAppDisabled, ErrAppDisabled},
	{wire.CodeUnknownInstance, ErrUnknownInstance},
	{wire.CodeInstanceLost, ErrInstanceLost},
	{wire.CodeInstanceMerged, ErrInstanceMerged},
	{wire.CodeInstanceMoving, ErrInstanceMoving},
	{wire.CodeNoWorkers, ErrNoWorkers},
	{wire.CodeStarting, ErrStarting},
	{wire.CodeUnknownWorker, ErrWorkerGone},
}

// codeOf is the master's error code behind a sentinel in err's chain.
func codeOf(err error) (string, bool) {
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			return s.code, true
		}
	}
	return "", false
}

// RouteRequestFor is the master's question for a classified request.
func RouteRequestFor(t urlkind.Target) wire.RouteRequest {
	req := wire.RouteRequest{Kind: wire.RouteInstance, App: t.App, InstanceID: t.InstanceID}
	if t.Kind == urlkind.KindApp {
		req.Kind = wire.RouteApp
	}
	return req
}

// AppLinksOf turns the master's public apps into home page links.
func AppLinksOf(apps []wire.App) []AppLink {
	out := make([]AppLink, len(apps))
	for i, a := range apps {
		out[i] = AppLink{Name: a.Name, MountPoint: a.MountPoint, Description: a.Description}
	}
	return out
}

// RemoteRouter asks the master over RMI.
type RemoteRouter struct {
	Client *rmi.Client
	// ConnectWait is how long a question waits for a connection to the
	// master when there is none (default DefaultConnectWait): while the
	// master is down, users get the "unavailable" page quickly instead of
	// after the whole route timeout.
	ConnectWait time.Duration
}

// DefaultConnectWait bounds the wait for a master connection per request.
const DefaultConnectWait = 500 * time.Millisecond

// router waits at most ConnectWait for a connection and answers the
// master's Router over it.
func (r *RemoteRouter) router(ctx context.Context) (contract.RouterClient, error) {
	wait := r.ConnectWait
	config.OrDefault(&wait, DefaultConnectWait)
	cctx, cancel := context.WithTimeout(ctx, wait)
	c, err := r.Client.Conn(cctx)
	cancel()
	if err != nil {
		return contract.RouterClient{}, err
	}
	return contract.RouterClient{C: c}, nil
}

// Route implements Router.
func (r *RemoteRouter) Route(ctx context.Context, t urlkind.Target) (Route, error) {
	master, err := r.router(ctx)
	if err != nil {
		return Route{}, MasterError(err)
	}
	rep, err := master.Route(ctx, RouteRequestFor(t))
	if err != nil {
		return Route{}, MasterError(err)
	}
	return RouteOf(rep), nil
}

// Apps implements Router.
func (r *RemoteRouter) Apps(ctx context.Context) ([]AppLink, error) {
	master, err := r.router(ctx)
	if err != nil {
		return nil, MasterError(err)
	}
	apps, err := master.Apps(ctx)
	if err != nil {
		return nil, MasterError(err)
	}
	return AppLinksOf(apps), nil
}

// OpenSession implements SessionOpener: the master opens the session.
func (r *RemoteRouter) OpenSession(ctx context.Context, req wire.SessionOpen) (wire.SessionOpened, error) {
	master, err := r.router(ctx)
	if err != nil {
		return wire.SessionOpened{}, MasterError(err)
	}
	res, err := master.OpenSession(ctx, req)
	if err != nil {
		return wire.SessionOpened{}, fmt.Errorf("opening a session: %w", MasterError(err))
	}
	return res, nil
}

// CloseSession implements SessionOpener.
func (r *RemoteRouter) CloseSession(ctx context.Context, id string) error {
	master, err := r.router(ctx)
	if err != nil {
		return MasterError(err)
	}
	if err := master.CloseSession(ctx, id); err != nil {
		return fmt.Errorf("ending session %s: %w", id, MasterError(err))
	}
	return nil
}

// ProcessConfig configures a standalone proxy process.
type ProcessConfig struct {
	Name   string // unique among proxies, e.g. proxy-1
	Master string // master RMI address
	Listen string // public address (shared with other proxies via SO_REUSEPORT)
	// Secret is the proxy key (the master's <data-dir>/proxy.key) or the
	// cluster secret; the proxy declares the role "proxy" either way.
	Secret string
	// GossipAddr is the memberlist bind address (port 0 = any).
	GossipAddr, GossipAdvertise string
	// RouteTTL is how long instance routes are cached (default 30s); the
	// master also invalidates them as instances and workers go.
	RouteTTL time.Duration
	Logger   zerolog.Logger
	// Ready, if set, is called once serving, with the bound public and
	// admin ("" if none) addresses: port 0 in Listen or AdminAddr becomes
	// the port the kernel chose.
	Ready func(listen, admin string)
	// Admin, if set, is served on AdminAddr (/metrics, /healthz, /readyz);
	// it gets the proxy, its route cache and whether the master is connected.
	AdminAddr string
	Admin     func(p *Proxy, cache *CachingRouter, node *rmi.Node, connected func() bool) http.Handler
	// PublicHTTPS, TrustForwardedProto, TrustedProxies and TLS: see
	// Config. Every proxy sharing a port must serve TLS, or none.
	PublicHTTPS, TrustForwardedProto bool
	TrustedProxies                   []netip.Prefix
	TLS                              *tls.Config
	// Clock runs the route cache's expiry and the proxy's (Config.Clock);
	// nil = clock.Real.
	Clock clock.Clock
}

// DefaultProcessConfig is a proxy process's configuration without any
// settings (the CLI's flag defaults); RunProcess gives zero RouteTTL and
// GossipAddr these values too.
func DefaultProcessConfig() ProcessConfig {
	return ProcessConfig{Master: "127.0.0.1:7070", Listen: ":8080", GossipAddr: "127.0.0.1:0", RouteTTL: 30 * time.Second}
}

// invalidator is the object the master calls back.
type invalidator struct {
	c *CachingRouter
	p *atomic.Pointer[Proxy] // set once the proxy serves
}

var _ contract.Proxy = invalidator{}

// Invalidate drops routes of closed instances.
func (i invalidator) Invalidate(ctx context.Context, iids []string) error {
	i.c.Invalidate(iids...)
	return nil
}

// InvalidateWorker drops routes to a dead worker.
func (i invalidator) InvalidateWorker(ctx context.Context, wid string) error {
	i.c.InvalidateWorker(wid)
	if p := i.p.Load(); p != nil {
		p.CloseWorker(wid)
	}
	return nil
}

// RunProcess runs a proxy connected to a remote master until ctx ends,
// then drains it.
func RunProcess(ctx context.Context, cfg ProcessConfig) error {
	if err := secret.Check(cfg.Secret); err != nil {
		return fmt.Errorf("proxy: cluster secret: %w", err)
	}
	if cfg.Master == "" {
		return fmt.Errorf("proxy: %w", config.Errorf("Master", "(the master's RMI address) is required"))
	}
	def := DefaultProcessConfig()
	config.OrDefault(&cfg.RouteTTL, def.RouteTTL)
	if cfg.Clock == nil {
		cfg.Clock = clock.Real
	}
	if cfg.GossipAddr == "" {
		cfg.GossipAddr = def.GossipAddr
	}
	log := cfg.Logger.With().Str("proxy", cfg.Name).Logger()
	node, err := rmi.New(rmi.Config{Name: cfg.Name, Role: secret.RoleProxy, Secret: []byte(cfg.Secret), Logger: log})
	if err != nil {
		return fmt.Errorf("proxy: rmi: %w", err)
	}
	defer node.Close()
	remote := &RemoteRouter{}
	var hopKey, portKey hop.Key // from the master, over the authenticated session
	cache := NewCachingRouter(remote, cfg.RouteTTL, WithClock(cfg.Clock))
	var served atomic.Pointer[Proxy]
	if err := node.Register(wire.ObjProxy, invalidator{c: cache, p: &served}); err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	var memberMu sync.Mutex
	var member *membership.Member
	defer func() {
		memberMu.Lock()
		defer memberMu.Unlock()
		if member != nil {
			_ = member.Leave(time.Second)
			_ = member.Shutdown()
		}
	}()
	client := node.NewClient(cfg.Master, func(ctx context.Context, c *rmi.Conn) error {
		info, err := contract.ClusterClient{C: c}.Info(ctx)
		if err != nil {
			return err
		}
		memberMu.Lock()
		if member == nil {
			if m, err := startMember(cfg, info.Keys.Gossip, log); err != nil {
				log.Warn().Err(err).Msg("gossip start failed")
			} else {
				member = m
			}
		}
		if member != nil && !member.Alive(info.MasterID) { // e.g. a restarted master
			jctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if err := member.Join(jctx, info.GossipAddr); err != nil {
				log.Warn().Err(err).Msg("gossip join failed")
			}
			cancel()
		}
		memberMu.Unlock()
		// Invalidations may have been missed while disconnected.
		cache.InvalidateAll()
		rep, err := contract.RouterClient{C: c}.Subscribe(ctx, cfg.Name)
		if err != nil {
			return err
		}
		if len(rep.HopKey) == 0 {
			return errors.New("proxy: the master sent no hop key (it is older than this proxy)")
		}
		hopKey.Set(rep.HopKey)
		portKey.Set(rep.PortKey)
		return nil
	})
	remote.Client = client // before serving: handlers only start after this
	// The port key comes from the master: only then can this proxy tell
	// its cluster's proxies on the public port from anybody else's.
	if err := waitMaster(ctx, client, cfg.Master, log); err != nil {
		return err
	}
	if err := sameTLS(ctx, cfg.Listen, portKey.Get(), cfg.TLS != nil); err != nil {
		return fmt.Errorf("proxy: %w", config.Errorf("Listen", "%s: %w", cfg.Listen, err))
	}
	ln, err := ListenShared(ctx, cfg.Listen, portKey.Get())
	if err != nil {
		return fmt.Errorf("proxy: %w", config.Errorf("Listen", "%s: %w", cfg.Listen, err))
	}
	p := New(Config{Router: cache, Sessions: remote, Logger: log, HopKey: hopKey.Get, PortKey: portKey.Get,
		PublicHTTPS: cfg.PublicHTTPS, TrustForwardedProto: cfg.TrustForwardedProto, Clock: cfg.Clock,
		TrustedProxies: cfg.TrustedProxies, TLS: cfg.TLS})
	served.Store(p)
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- p.Serve(srv, ln) }()
	listen := BoundAddr(cfg.Listen, ln)
	if err := VerifyShared(ctx, listen, portKey.Get()); err != nil {
		_ = srv.Close()
		<-errc
		return fmt.Errorf("proxy: %w", config.Errorf("Listen", "%s: %w", cfg.Listen, err))
	}
	var aln net.Listener
	if cfg.AdminAddr != "" && cfg.Admin != nil {
		// Plain listener: each proxy's admin port is its own, never shared.
		var lc net.ListenConfig
		aln, err = lc.Listen(ctx, "tcp", cfg.AdminAddr)
		if err != nil {
			_ = srv.Close()
			<-errc
			return fmt.Errorf("proxy: %w", config.Errorf("AdminAddr", "%s: %w", cfg.AdminAddr, err))
		}
		connected := func() bool {
			cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			_, err := client.Conn(cctx)
			return err == nil
		}
		asrv := &http.Server{Handler: cfg.Admin(p, cache, node, connected), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = asrv.Serve(aln) }()
		defer asrv.Close()
	}
	adminAddr := ""
	if aln != nil {
		adminAddr = aln.Addr().String()
	}
	log.Info().Str("listen", listen).Str("admin", adminAddr).Str("master", cfg.Master).Msg("proxy serving")
	reportDone := make(chan struct{})
	repCtx, stopReports := context.WithCancel(ctx)
	go func() { // counters for the master's dashboard
		defer close(reportDone)
		t := time.NewTicker(reportEvery)
		defer t.Stop()
		silence := masterSilence{client: client, log: log} // masterwatch.go
		for {
			select {
			case <-repCtx.Done():
				return
			case <-t.C:
				st := p.Stats()
				silence.report(repCtx, wire.ProxyReport{Requests: st.Requests,
					WebSocketsOpen: st.WebSocketsOpen, BytesUp: st.BytesUp, BytesDown: st.BytesDown})
			}
		}
	}()
	defer func() { stopReports(); <-reportDone }()
	if cfg.Ready != nil {
		cfg.Ready(listen, adminAddr)
	}
	select {
	case err := <-errc:
		return fmt.Errorf("proxy: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	_ = p.Shutdown(sctx)
	<-errc
	return nil
}

// sameTLS refuses to join a port whose proxies serve TLS when this one
// would not, or the reverse: the kernel spreads connections across them,
// so users would get one protocol or the other at random.
func sameTLS(ctx context.Context, listen string, key []byte, tlsOn bool) error {
	if _, port, err := net.SplitHostPort(listen); err != nil || port == "0" {
		return nil // nobody to share with (a bad address is Listen's to report)
	}
	mode, err := probePort(ctx, listen, key)
	switch {
	case err != nil:
		return nil // ListenShared reports it
	case mode == portTLS && !tlsOn:
		return errors.New("the proxies serving it use TLS (--tls-cert) and this one would not: give every proxy on one port the same --tls-cert")
	case mode == portPlain && tlsOn:
		return errors.New("the proxies serving it use plain HTTP and this one would use TLS: give every proxy on one port the same --tls-cert")
	}
	return nil
}

// waitMaster blocks until the first connection to the master (which hands
// over the keys) or ctx ends, saying every few seconds that it waits.
func waitMaster(ctx context.Context, client *rmi.Client, addr string, log zerolog.Logger) error {
	for {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := client.Conn(wctx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("proxy: waiting for the master at %s: %w", addr, ctx.Err())
		}
		log.Warn().Str("master", addr).Msg("waiting for the master before serving the public port")
	}
}

// startMember joins the gossip layer with the key the master handed over
// (a proxy's role key cannot derive it).
func startMember(cfg ProcessConfig, key []byte, log zerolog.Logger) (*membership.Member, error) {
	if len(key) != 32 { // never gossip unencrypted
		return nil, fmt.Errorf("the master sent no gossip key (%d bytes)", len(key))
	}
	host, port, err := membership.ParseBind(cfg.GossipAddr)
	if err != nil {
		return nil, err
	}
	return membership.Start(membership.Config{
		Name: cfg.Name + "-" + ids.Random(6), BindAddr: host, BindPort: port,
		Advertise: cfg.GossipAdvertise, Key: key, Label: "cloudbrowser",
		Meta: membership.Meta{Role: membership.RoleProxy, ID: cfg.Name}, Logger: log,
	})
}
