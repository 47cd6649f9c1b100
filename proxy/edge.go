package proxy

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"sync"

	"github.com/cloudbrowser-go/cloudbrowser/internal/handoff"
	"github.com/cloudbrowser-go/cloudbrowser/internal/tlsfront"
	"github.com/cloudbrowser-go/cloudbrowser/internal/urlkind"
	"github.com/cloudbrowser-go/cloudbrowser/proxy/edge"
)

// The proxy's public front on Linux is the event-loop edge (package
// edge): it relays the plain GET and HEAD requests of page loads itself
// and hands every other connection to the net/http server. What follows
// starts it and answers what it asks of the proxy.

// Serve serves p on ln through srv, whose Handler must be p: with the edge
// where the platform has one, else srv.Serve(ln) alone. It returns what
// srv.Serve returns; Shutdown (and srv.Shutdown) end both.
func (p *Proxy) Serve(srv *http.Server, ln net.Listener) error {
	if p.cfg.TLS != nil {
		// HTTP/1.1 only (the TLS config's ALPN): no HTTP/2 server either.
		srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
		if srv.ErrorLog == nil {
			srv.ErrorLog = tlsfront.ErrorLog(p.log)
		}
		return srv.Serve(tls.NewListener(ln, p.cfg.TLS))
	}
	return srv.Serve(p.startEdge(ln))
}

// edgeable reports whether the edge can serve p: it relays only what it
// can decide alone, so configurations that read more of the request than
// the edge does stay with net/http.
func (p *Proxy) edgeable() bool {
	return !p.cfg.DisableEdge && !p.cfg.TrustForwardedFor && !p.cfg.TrustForwardedProto &&
		len(p.cfg.TrustedProxies) == 0 && p.cfg.TLS == nil && p.cfg.ResponseHeaderTimeout == 0
}

// startEdge starts the event loops on ln's socket and returns the listener
// net/http serves from; ln itself when the edge cannot run.
func (p *Proxy) startEdge(ln net.Listener) net.Listener {
	if !p.edgeable() {
		return ln
	}
	cfg := edge.Config{
		Host:           (*edgeHost)(p),
		HopKey:         p.cfg.HopKey,
		IDs:            p.ids,
		Stats:          &p.edgeStats,
		Requests:       &p.st.requests,
		UpstreamErrors: &p.st.upstreamErrors,
		WorkerPairs:    &p.st.upPaired,
		Log:            p.log,
		DialTimeout:    p.cfg.DialTimeout,
		Loops:          p.cfg.EdgeLoops,
		PublicHTTPS:    p.cfg.PublicHTTPS,
	}
	if ir, ok := p.cfg.Router.(InstantRouter); ok {
		cfg.Instant = ir
	}
	e, hl := edge.Start(ln, cfg)
	if e != nil {
		p.edges.add(e)
	}
	return hl
}

// EdgeHandoffs returns, by reason, the connections the edge handed to
// net/http.
func (p *Proxy) EdgeHandoffs() map[string]uint64 { return p.edgeStats.Handoffs() }

// edgeSet is the edges serving the proxy's listeners, one per Serve:
// CloseWorker and Shutdown reach them all.
type edgeSet struct {
	mu  sync.Mutex
	all []*edge.Edge
}

func (s *edgeSet) add(e *edge.Edge) {
	s.mu.Lock()
	s.all = append(s.all, e)
	s.mu.Unlock()
}

func (s *edgeSet) list() []*edge.Edge {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.all
}

// closeWorker ends every edge's exchanges with worker wid.
func (s *edgeSet) closeWorker(wid string) {
	for _, e := range s.list() {
		e.CloseWorker(wid)
	}
}

// shutdown stops every edge and waits for its loops to finish the
// answers in flight; when ctx ends first they close everything.
func (s *edgeSet) shutdown(ctx context.Context) {
	edges := s.list()
	for _, e := range edges {
		e.Stop()
	}
	for _, e := range edges {
		select {
		case <-e.Done():
		case <-ctx.Done():
			e.Kill()
			<-e.Done()
		}
	}
}

// edgeHost is the proxy as its edges see it (edge.Host): a conversion of
// *Proxy, so the proxy's exported methods stay its own.
type edgeHost Proxy

func (h *edgeHost) Route(ctx context.Context, t urlkind.Target) (Route, error) {
	return (*Proxy)(h).route(ctx, t)
}

func (h *edgeHost) CanHandOff(route Route) bool { return h.handoffs.allows(route) }

func (h *edgeHost) HandoffFailed(socket string) { h.handoffs.failed(socket) }

func (h *edgeHost) Misdirected(t urlkind.Target, status int) { (*Proxy)(h).misdirected(t, status) }

func (h *edgeHost) ServeHome(w http.ResponseWriter, r *http.Request, id string) {
	(*Proxy)(h).serveHome(w, r, id)
}

func (h *edgeHost) RouteError(w http.ResponseWriter, r *http.Request, id string, t urlkind.Target, route Route, err error) {
	(*Proxy)(h).routeError(w, r, id, t, routed(route, err))
}

func (h *edgeHost) NoHopKey(w http.ResponseWriter, r *http.Request, id string) {
	(*Proxy)(h).noHopKey(w, r, id)
}

func (h *edgeHost) UpstreamFailed(w http.ResponseWriter, r *http.Request, id string, t urlkind.Target, route Route, err error) {
	(*Proxy)(h).upstreamFailed(w, r, id, t, route, err)
}

// handedConn is a connection the edge handed over, with the bytes it had
// already read from it.
type handedConn = handoff.PrefixedConn

// unwrapConn returns the connection under a handed-over one once its early
// bytes are consumed, so a WebSocket relay splices between two
// *net.TCPConn values.
func unwrapConn(c net.Conn) net.Conn {
	if h, ok := c.(*handedConn); ok && len(h.Pre) == 0 {
		return h.Conn
	}
	return c
}
