package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/internal/urlkind"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master"
	"github.com/cloudbrowser-go/cloudbrowser/proxy"
)

// The master's public side is put together here rather than in package
// master, so that the control plane does not depend on the proxy package:
// the master says how its proxies are to be configured
// (master.ProxySettings) and the command builds them.

// newFront assembles m's public side: --proxies N proxy processes, or
// one proxy embedded in the master's process.
func newFront(m *master.Master) master.Front { return newFrontTLS(m, frontTLS{}) }

// newFrontTLS is newFront with the HTTPS flags (tlsflags.go).
func newFrontTLS(m *master.Master, ft frontTLS) master.Front {
	set := m.ProxySettings()
	var f master.Front
	if set.Proxies > 0 {
		pp := newProxyProcs(m, set)
		pp.tls = ft
		f = pp
	} else {
		f = &embeddedProxy{m: m, set: set, tls: ft}
	}
	if ft.redirect != "" {
		f = &redirectFront{Front: f, m: m, ft: ft}
	}
	return f
}

// embeddedProxy is the public side with --proxies 0: the master answers
// its route lookups in process and its admin endpoints are its fallback,
// so everything is on one address.
type embeddedProxy struct {
	m   *master.Master
	set master.ProxySettings
	tls frontTLS
	// stopWatch ends the certificate watch; watched is closed after.
	stopWatch context.CancelFunc
	watched   <-chan struct{}

	p      *proxy.Proxy
	srv    *http.Server
	addr   string        // as bound
	served chan struct{} // closed when Serve returned
	// rate turns the request count into a rate for the status.
	rate rateMeter
}

var (
	_ master.Front      = (*embeddedProxy)(nil)
	_ master.LocalProxy = (*embeddedProxy)(nil)
)

// Start listens on the public address and serves it.
func (e *embeddedProxy) Start(ctx context.Context) (string, error) {
	addr := e.set.PublicAddr
	// A plain listener, not SO_REUSEPORT: only proxy children of one
	// master may share the public port, so a second process on it must
	// fail instead of silently taking part of the traffic.
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return "", fmt.Errorf("master: %w", config.Errorf("PublicAddr", "%s is already in use (another master or proxy?): %w", addr, err))
	}
	if err != nil {
		return "", fmt.Errorf("master: %w", config.Errorf("PublicAddr", "%s: %w", addr, err))
	}
	e.addr = proxy.BoundAddr(addr, ln)
	hopKey, portKey := e.set.HopKey, e.set.PortKey
	cfg := proxy.Config{
		Router: localRouter{e.m.LocalRoutes()}, Sessions: e.m.LocalRoutes(), Fallback: e.m.PublicHandler(),
		PublicHTTPS: e.set.PublicHTTPS, TrustForwardedProto: e.set.TrustForwardedProto, TrustedProxies: e.tls.trusted,
		Logger: e.set.Logger.With().Str("proxy", "embedded").Logger(),
		HopKey: func() []byte { return hopKey }, PortKey: func() []byte { return portKey },
	}
	var wctx context.Context
	wctx, e.stopWatch = context.WithCancel(context.Background())
	e.watched = e.tls.watch(wctx)
	if e.tls.on() {
		cfg.TLS = e.tls.store.ServerConfig()
	}
	e.p = proxy.New(cfg)
	e.m.SetLocalProxy(e)
	e.srv = &http.Server{Handler: e.p, ReadHeaderTimeout: 10 * time.Second}
	e.served = make(chan struct{})
	go func() {
		defer close(e.served)
		if err := e.p.Serve(e.srv, ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.set.Logger.Error().Err(err).Str("server", "public").Msg("http server stopped")
		}
	}()
	return e.addr, nil
}

// Stop closes the relayed WebSockets and drains the HTTP requests.
func (e *embeddedProxy) Stop(ctx context.Context) {
	if e.srv == nil {
		return // never started
	}
	_ = e.p.Shutdown(ctx)
	_ = e.srv.Shutdown(ctx)
	e.stopWatch()
	<-e.watched
	select {
	case <-e.served:
	case <-ctx.Done():
	}
}

// CloseWorker ends the WebSockets relayed to a worker the master declared
// dead.
func (e *embeddedProxy) CloseWorker(workerID string) int { return e.p.CloseWorker(workerID) }

// Status is the embedded proxy's line in the cluster status.
func (e *embeddedProxy) Status() wire.ProxyStatus {
	ps := e.p.Stats()
	return wire.ProxyStatus{Name: "embedded", Addr: e.addr, Embedded: true, Requests: ps.Requests,
		RequestsPerSec: e.rate.observe(ps.Requests, time.Now()), WebSocketsOpen: ps.WebSocketsOpen}
}

// Collectors are the proxy's metrics, served on the master's /metrics.
func (e *embeddedProxy) Collectors() []prometheus.Collector { return proxy.Collectors(e.p, nil) }

// localRouter is the embedded proxy's Router: the master answers in
// process.
type localRouter struct{ routes master.LocalRoutes }

var _ proxy.InstantRouter = localRouter{}

func (r localRouter) Route(ctx context.Context, t urlkind.Target) (proxy.Route, error) {
	rt, _, err := r.RouteNow(t)
	return rt, err
}

// RouteNow implements proxy.InstantRouter: the in-process master answers
// every target without waiting on anything but its own locks.
func (r localRouter) RouteNow(t urlkind.Target) (proxy.Route, bool, error) {
	rep, err := r.routes.Route(proxy.RouteRequestFor(t))
	if err != nil {
		return proxy.Route{}, true, proxy.MasterError(err)
	}
	return proxy.RouteOf(rep), true, nil
}

func (r localRouter) Apps(ctx context.Context) ([]proxy.AppLink, error) {
	apps, _ := r.routes.Apps(ctx)
	return proxy.AppLinksOf(apps), nil
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
