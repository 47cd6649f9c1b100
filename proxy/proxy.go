// Package proxy is CloudBrowser's reverse proxy: it classifies each request
// URL, asks the master (through a Router) which worker serves it, and forwards
// the request there. WebSocket connections are routed once and then relayed
// as raw bytes, so the master is off the data path of live browsers.
package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/internal/handoff"
	"github.com/cloudbrowser-go/cloudbrowser/internal/httpsec"
	"github.com/cloudbrowser-go/cloudbrowser/internal/ids"
	"github.com/cloudbrowser-go/cloudbrowser/internal/pages"
	"github.com/cloudbrowser-go/cloudbrowser/internal/urlkind"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/proxy/edge"
)

// Config configures a Proxy. Only Router is required.
type Config struct {
	Router Router
	// Fallback serves KindReserved paths (the master's /admin, /api in
	// embedded mode). nil => 404 page.
	Fallback http.Handler
	Logger   zerolog.Logger

	// DialTimeout bounds connecting to a worker (default 5s).
	DialTimeout time.Duration
	// RouteTimeout bounds one Router.Route call (default 5s).
	RouteTimeout time.Duration
	// HandshakeTimeout bounds the worker's answer to a WebSocket upgrade
	// (default 10s).
	HandshakeTimeout time.Duration
	// HalfCloseTimeout is how long a relay keeps the second direction open
	// after the first one ended cleanly (default 30s); it stops a peer that
	// never closes from pinning the relay forever.
	HalfCloseTimeout time.Duration
	// ResponseHeaderTimeout for plain HTTP (default 0: none, long polls and
	// event streams are legitimate).
	ResponseHeaderTimeout time.Duration
	// MaxIdleConnsPerWorker keeps this many pooled connections per worker
	// (default 256).
	MaxIdleConnsPerWorker int
	// TrustForwardedFor appends to an inbound X-Forwarded-For instead of
	// replacing it. Only enable behind a trusted load balancer.
	TrustForwardedFor bool
	// HopKey returns the key that signs every relayed request's X-CB-Hop
	// header (internal/hop), which workers require; nil until the master
	// handed one over, and requests then get 503. A nil HopKey func signs
	// nothing (benchmarks, tests with plain backends).
	HopKey func() []byte
	// PortKey returns the cluster's port key, with which the proxy proves
	// to a process about to share its public port that both belong to one
	// cluster (ListenShared). nil or empty: no proof is given.
	PortKey func() []byte
	// PublicHTTPS: users reach the cluster over HTTPS (--public-url
	// https://…); TrustForwardedProto: keep the X-Forwarded-Proto of a
	// TLS-terminating load balancer in front. Workers are told the result
	// in X-Forwarded-Proto; every answer to an HTTPS request carries HSTS.
	PublicHTTPS, TrustForwardedProto bool
	// TrustedProxies are the peers whose X-Forwarded-For and
	// X-Forwarded-Proto count (--trusted-proxies; httpsec.Scheme): the
	// user's address and scheme passed on to workers come from them.
	TrustedProxies []netip.Prefix
	// TLS, if set, is served on the public listener (--tls-cert): the
	// event-loop edge then stays off (it parses plain text), and
	// WebSockets are relayed, never handed to a worker (the TLS session
	// lives in this process).
	TLS *tls.Config
	// DisableEdge serves everything with net/http, without the event-loop
	// edge (package edge) in front; for comparisons.
	DisableEdge bool
	// DisableHandoff relays every WebSocket, even to a worker on this
	// host that takes handoffs (handoff.go); for comparisons.
	DisableHandoff bool
	// EdgeLoops is the number of the edge's event loops (default: half the
	// CPUs the process may use, at least one: the other half runs the
	// goroutines of what the edge hands over, WebSocket relays above all,
	// and one loop fed by the kernel keeps a core busy on its own).
	EdgeLoops int
	// OnWorkerUnreachable is called when a worker refuses or drops a
	// connection before answering, so the caller can tell the master. It
	// runs on the request goroutine and must not block.
	OnWorkerUnreachable func(Route)
	// Sessions opens the automation sessions of one-step CDP connections
	// (/cdp?app=…, cdp.go); nil: /cdp is not served.
	Sessions SessionOpener
	// Clock decides the handoff backoff and when a pooled connection is too
	// old to reuse (nil = clock.Real). Socket deadlines and the hop's
	// signed time stay on the system clock: the kernel and the workers
	// read those.
	Clock clock.Clock
}

// Proxy is an http.Handler that dispatches CloudBrowser requests.
type Proxy struct {
	cfg    Config
	log    zerolog.Logger
	up     *upstreams
	dialer net.Dialer

	ids *edge.RequestIDs

	st        counters
	edgeStats edge.Stats

	handoffs handoffGate
	flight   *inFlight
	pump     bytePump
	// handed are the WebSockets handed to workers on this host (handed_linux.go).
	handed *handedSockets
	edges  edgeSet
}

type counters struct {
	requests, routeErrors, badRequests, upstreamErrors atomic.Uint64
	wsOpen                                             atomic.Int64
	wsTotal, wsHandedOff, bytesUp, bytesDown, upPaired atomic.Uint64
	wsWorkerGone                                       atomic.Uint64 // relays closed by CloseWorker
	misdirected                                        atomic.Uint64 // 421s from workers: routes dropped
}

// Stats is a snapshot of proxy counters.
type Stats struct {
	Requests            uint64 // every request seen
	RouteErrors         uint64 // Router.Route failures
	BadRequests         uint64 // 400/405 answers
	UpstreamErrors      uint64 // worker unreachable / timed out
	Misdirected         uint64 // workers' 421 (not hosted here): cached routes dropped
	WebSocketsOpen      int64  // relays (and handshakes) in progress
	WebSocketsTotal     uint64 // relays established (101 relayed)
	WebSocketsHandedOff uint64 // given to a worker on this host (handoff.go)
	// WebSocketsWorkerGone: relays closed because the master declared
	// their worker dead (CloseWorker).
	WebSocketsWorkerGone uint64
	WorkerPairs          uint64 // unix socket connections to workers on this host (the edge's pair)
	BytesUp              uint64 // relayed client->worker WebSocket bytes
	BytesDown            uint64 // relayed worker->client WebSocket bytes
	EdgeRequests         uint64 // requests the event-loop edge relayed itself (package edge)
}

// New returns a Proxy; it panics if cfg.Router is nil (a programming error).
func New(cfg Config) *Proxy {
	if cfg.Router == nil {
		panic("proxy: Config.Router is nil")
	}
	config.OrDefault(&cfg.DialTimeout, 5*time.Second)
	config.OrDefault(&cfg.RouteTimeout, 5*time.Second)
	config.OrDefault(&cfg.HandshakeTimeout, 10*time.Second)
	config.OrDefault(&cfg.HalfCloseTimeout, 30*time.Second)
	config.OrDefault(&cfg.MaxIdleConnsPerWorker, 256)
	if cfg.Clock == nil {
		cfg.Clock = clock.Real
	}
	p := &Proxy{
		cfg:    cfg,
		log:    cfg.Logger.With().Str("component", "proxy").Logger(),
		dialer: net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second},
		ids:    edge.NewRequestIDs(ids.Random(8) + "-"), // the prefix tells proxy processes sharing a port apart
		handoffs: handoffGate{
			disabled: cfg.DisableHandoff,
			hostID:   handoff.HostID(),
			clk:      cfg.Clock,
		},
	}
	p.flight = newInFlight(&p.st.wsOpen)
	p.pump = bytePump{halfClose: cfg.HalfCloseTimeout, up: &p.st.bytesUp, down: &p.st.bytesDown}
	p.up = newUpstreams(&p.dialer, cfg.MaxIdleConnsPerWorker, 90*time.Second, cfg.Clock)
	p.handed = newHandedSockets(p.log)
	return p
}

// reqState is one relayed request.
type reqState struct {
	id     string
	target urlkind.Target
	route  Route
	body   *bodyWatch
	hopKey []byte // nil = do not sign
}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.st.requests.Add(1)
	id := p.ids.For(r.Header.Get("X-Request-Id"))
	r.Header.Set("X-Request-Id", id)
	w.Header().Set("X-Request-Id", id)

	if servePortProof(w, r, p.cfg.PortKey) {
		return
	}
	if p.scheme().HTTPS(r) {
		httpsec.SetHSTS(w.Header()) // on every answer, the workers' and the master's too
	}
	upgrade := pages.IsWebSocketUpgrade(r)
	t := urlkind.Classify(r.Method, r.URL.EscapedPath(), upgrade)
	switch t.Kind {
	case urlkind.KindInvalid:
		p.st.badRequests.Add(1)
		p.log.Debug().Str("request_id", id).Str("method", r.Method).Int("path_len", len(r.URL.Path)).Msg("invalid request")
		p.page(w, r, id, http.StatusBadRequest, "Bad request", "This address is not a valid CloudBrowser URL.")
		return
	case urlkind.KindHome:
		p.serveHome(w, r, id)
		return
	case urlkind.KindReserved:
		if isCDP(t) {
			p.serveCDP(w, r, id, t, upgrade)
			return
		}
		if p.cfg.Fallback != nil {
			// The master's handlers see the user as the proxy does.
			p.cfg.Fallback.ServeHTTP(w, p.scheme().Resolved(r))
			return
		}
		p.page(w, r, id, http.StatusNotFound, "Not found", "There is nothing at this address.")
		return
	}

	t0 := time.Now()
	route, err := p.route(r.Context(), t)
	if edge.IsPage(t.Kind) {
		w.Header().Add("Server-Timing", edge.RouteTiming(time.Since(t0)))
	}
	if err = routed(route, err); err != nil {
		p.routeError(w, r, id, t, err)
		return
	}
	var key []byte
	if p.cfg.HopKey != nil {
		if key = p.cfg.HopKey(); len(key) == 0 {
			p.noHopKey(w, r, id)
			return
		}
	}
	if upgrade {
		p.serveWebSocket(w, r, id, t, route, key)
		return
	}
	// Only WebSocket upgrades are supported; any other Upgrade (h2c...) is
	// not relayed (it is a hop-by-hop header).
	p.forward(w, r, &reqState{id: id, target: t, route: route, hopKey: key})
}

// routed is the error of a routing result: a route without an address is
// a worker gone.
func routed(route Route, err error) error {
	if err == nil && route.Addr == "" {
		return fmt.Errorf("router returned no address for worker %q: %w", route.WorkerID, ErrWorkerGone)
	}
	return err
}

// noHopKey answers while the master has not handed over the hop key.
func (p *Proxy) noHopKey(w http.ResponseWriter, r *http.Request, id string) {
	p.st.routeErrors.Add(1)
	p.log.Warn().Str("request_id", id).Msg("no hop key from the master yet")
	w.Header().Set("Retry-After", "2")
	p.page(w, r, id, http.StatusServiceUnavailable, "Service unavailable",
		"This proxy is not yet connected to the cluster master, retry shortly.")
}

// route asks the Router where t goes, from memory when it can answer so.
func (p *Proxy) route(ctx context.Context, t urlkind.Target) (Route, error) {
	if ir, ok := p.cfg.Router.(InstantRouter); ok {
		if r, answered, err := ir.RouteNow(t); answered {
			return r, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RouteTimeout)
	defer cancel()
	return p.cfg.Router.Route(ctx, t)
}

// misdirected takes a worker's 421 (it does not host t's instance: the
// route predates a move) as a stale route: the next request for the
// instance asks the master again instead of the cache.
func (p *Proxy) misdirected(t urlkind.Target, status int) {
	if status != http.StatusMisdirectedRequest || t.InstanceID == "" {
		return
	}
	if inv, ok := p.cfg.Router.(interface{ Invalidate(...string) }); ok {
		inv.Invalidate(t.InstanceID)
		p.st.misdirected.Add(1)
	}
}

func (p *Proxy) scheme() httpsec.Scheme {
	return httpsec.Scheme{AlwaysHTTPS: p.cfg.PublicHTTPS, TrustForwardedProto: p.cfg.TrustForwardedProto,
		TrustedProxies: p.cfg.TrustedProxies}
}

// errWorkerDead ends the exchanges with a worker the master declared dead,
// the edge's and net/http's alike.
var errWorkerDead = edge.ErrWorkerDead

// upstreamFailed answers a request whose worker could not be reached.
func (p *Proxy) upstreamFailed(w http.ResponseWriter, r *http.Request, id string, t urlkind.Target, route Route, err error) {
	p.st.upstreamErrors.Add(1)
	ev := p.log.Warn().Str("request_id", id).Str("worker", route.WorkerID).Str("addr", route.Addr).
		Str("kind", t.Kind.String()).Str("instance", t.InstanceID).Err(err)
	if errors.Is(err, errWorkerDead) {
		// Its instances are being placed elsewhere: the page reloads
		// itself and reaches the new copy.
		ev.Msg("request to a dead worker ended")
		pg, _ := pages.ForCode(wire.CodeInstanceMoving, t.App, "")
		pg.Refresh = "1"
		p.write(w, r, id, pg)
		return
	}
	if isTimeout(err) && !isDialError(err) {
		ev.Msg("worker timed out")
		p.page(w, r, id, http.StatusGatewayTimeout, "Worker timed out",
			"The worker hosting this instance did not answer in time.")
		return
	}
	ev.Msg("worker unreachable")
	if unreachable(err) && p.cfg.OnWorkerUnreachable != nil {
		p.cfg.OnWorkerUnreachable(route)
	}
	pg, _ := pages.ForCode(wire.CodeUnknownWorker, t.App, "")
	if t.Kind == urlkind.KindApp {
		pg.Message = "The worker chosen for this application is not reachable. Please retry."
	}
	p.write(w, r, id, pg)
}

// routeError answers a request the Router could not place.
func (p *Proxy) routeError(w http.ResponseWriter, r *http.Request, id string, t urlkind.Target, err error) {
	if r.Context().Err() != nil {
		return // client gone while we asked the master
	}
	p.st.routeErrors.Add(1)
	ev := p.log.Info().Str("request_id", id).Str("kind", t.Kind.String()).
		Str("app", t.App).Str("instance", t.InstanceID).Err(err)
	if code, ok := codeOf(err); ok {
		if pg, ok := pages.ForCode(code, t.App, err.Error()); ok {
			ev.Str("code", code).Msg("not routed")
			p.write(w, r, id, pg)
			return
		}
	}
	switch {
	case errors.Is(err, ErrMasterUnavailable), errors.Is(err, context.DeadlineExceeded):
		ev.Msg("master unavailable")
		p.write(w, r, id, pages.MasterUnavailable)
	default:
		p.log.Error().Str("request_id", id).Err(err).Msg("routing failed")
		p.page(w, r, id, http.StatusBadGateway, "Routing failed",
			"The request could not be routed. Please retry.")
	}
}

// Stats returns a snapshot of the counters.
func (p *Proxy) Stats() Stats {
	return Stats{
		Requests:             p.st.requests.Load(),
		RouteErrors:          p.st.routeErrors.Load(),
		BadRequests:          p.st.badRequests.Load(),
		UpstreamErrors:       p.st.upstreamErrors.Load(),
		Misdirected:          p.st.misdirected.Load(),
		WebSocketsOpen:       p.st.wsOpen.Load(),
		WebSocketsTotal:      p.st.wsTotal.Load(),
		WebSocketsHandedOff:  p.st.wsHandedOff.Load(),
		WebSocketsWorkerGone: p.st.wsWorkerGone.Load(),
		WorkerPairs:          p.st.upPaired.Load(),
		BytesUp:              p.st.bytesUp.Load(),
		BytesDown:            p.st.bytesDown.Load(),
		EdgeRequests:         p.edgeStats.Requests(),
	}
}

// Shutdown closes every live WebSocket relay (and handshake in progress),
// refuses new ones, and waits for their goroutines. Plain HTTP requests are
// drained by the http.Server's own Shutdown.
func (p *Proxy) Shutdown(ctx context.Context) error {
	drained := p.flight.shutdown()
	p.edges.shutdown(ctx)
	p.up.close()
	p.handed.stop()
	select {
	case <-drained:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("proxy: shutdown: %d relays still open: %w", p.st.wsOpen.Load(), ctx.Err())
	}
}

// The error classes the edge's relay and net/http's share: unreachable
// failures trigger OnWorkerUnreachable.
func isTimeout(err error) bool   { return edge.IsTimeout(err) }
func isDialError(err error) bool { return edge.IsDialError(err) }
func unreachable(err error) bool { return edge.Unreachable(err) }
