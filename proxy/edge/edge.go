// Package edge is the reverse proxy's public front on Linux: a few epoll
// event loops, one per CPU on a locked OS thread, as nginx runs, with no
// goroutine per connection. They relay the requests that make up nearly all
// of a page load (GET and HEAD without a body, to an instance whose route is
// cached) and hand every other connection, with the bytes already read, to
// the net/http server that serves everything else exactly as before: the
// Application URL's placement, uploads, WebSocket upgrades, error pages,
// and whatever the edge's strict parser does not take (parse.go). The
// measurements behind it are in docs/benchmarks.md ("HTTP").
//
// The package owns the loops, their worker connections and pools, the
// strict HTTP/1.1 head parsers, the listener net/http accepts handed
// connections from, and the wire pieces the proxy's net/http path shares
// with it so both relay the same bytes (Route, Head, the hop-by-hop
// header sets, request ids). What only the proxy knows (routing, whether a
// worker takes handoffs, its error pages) the edge asks of a Host. Package
// proxy imports edge; edge never imports proxy.
package edge

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/urlkind"
)

// Host is what the edge asks of the proxy it fronts. No method is called
// for a request relayed on a pooled worker connection with an instant
// route: the hot path stays within the package (Config's fields).
type Host interface {
	// Route asks the router where t goes, waiting as long as the proxy's
	// route timeout allows. It runs off the loop.
	Route(ctx context.Context, t urlkind.Target) (Route, error)
	// CanHandOff: route's worker is on this host and takes handoffs, so a
	// new worker connection is a unix socket pair handed to it.
	CanHandOff(route Route) bool
	// HandoffFailed: the worker's handoff socket did not take a
	// connection; the proxy leaves it alone for a while.
	HandoffFailed(socket string)
	// Misdirected: a worker answered 421 for t (the route predates a
	// move). Called for 421 answers only.
	Misdirected(t urlkind.Target, status int)

	// The proxy's own pages, rendered into w as net/http's path renders
	// them; r is the request as the edge parsed it. They run off the
	// loop (ServeHome) or on it (the rest: they only render).

	ServeHome(w http.ResponseWriter, r *http.Request, id string)
	// RouteError: the router failed (err), or gave a route without an
	// address (err nil).
	RouteError(w http.ResponseWriter, r *http.Request, id string, t urlkind.Target, route Route, err error)
	// NoHopKey: Config.HopKey returned no key yet.
	NoHopKey(w http.ResponseWriter, r *http.Request, id string)
	// UpstreamFailed: the worker could not be reached or failed before its
	// answer began.
	UpstreamFailed(w http.ResponseWriter, r *http.Request, id string, t urlkind.Target, route Route, err error)
}

// Config is an edge's settings and the proxy's state it shares. Every
// field but Instant, HopKey, Loops and PublicHTTPS is required.
type Config struct {
	Host Host
	// Instant answers routes from memory on the loop; nil: every route is
	// asked of Host.Route off the loop.
	Instant InstantRouter
	// HopKey signs every relayed request (Head.Key); nil signs nothing.
	HopKey func() []byte
	// IDs are the proxy's request ids, shared with its net/http path.
	IDs *RequestIDs
	// Stats counts what the edge did, across the proxy's edges.
	Stats *Stats
	// Requests, UpstreamErrors and WorkerPairs are the proxy's counters of
	// requests seen, worker failures and unix socket pairs made.
	Requests, UpstreamErrors, WorkerPairs *atomic.Uint64
	Log                                   zerolog.Logger
	// DialTimeout bounds connecting to a worker and resolving its name.
	DialTimeout time.Duration
	// Loops is the number of event loops (default: half the CPUs the
	// process may use, at least one).
	Loops int
	// PublicHTTPS: workers are told X-Forwarded-Proto https.
	PublicHTTPS bool
}

// Stats counts what the edges of one proxy did.
type Stats struct {
	requests atomic.Uint64
	handoffs [len(handoffReasons)]atomic.Uint64
}

var handoffReasons = [...]string{hoSyntax, hoMethod, hoFraming, hoLarge, hoTarget}

func (s *Stats) handoff(reason string) {
	for i, r := range handoffReasons {
		if r == reason {
			s.handoffs[i].Add(1)
			return
		}
	}
}

// Requests returns the requests the edges relayed or answered themselves.
func (s *Stats) Requests() uint64 { return s.requests.Load() }

// Handoffs returns, by reason, the connections the edges handed to
// net/http.
func (s *Stats) Handoffs() map[string]uint64 {
	m := make(map[string]uint64, len(handoffReasons))
	for i, r := range handoffReasons {
		m[r] = s.handoffs[i].Load()
	}
	return m
}

// handoffListener is what the net/http server accepts from: the
// connections the edge handed over.
type handoffListener struct {
	addr    net.Addr
	ch      chan net.Conn
	closed  chan struct{}
	mu      sync.Mutex
	isDone  bool
	onClose func()
}

func newHandoffListener(addr net.Addr, onClose func()) *handoffListener {
	return &handoffListener{addr: addr, ch: make(chan net.Conn, 1024), closed: make(chan struct{}), onClose: onClose}
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close stops the edge too: the server is shutting down.
func (l *handoffListener) Close() error {
	l.mu.Lock()
	if l.isDone {
		l.mu.Unlock()
		return nil
	}
	l.isDone = true
	close(l.closed)
	for len(l.ch) > 0 {
		(<-l.ch).Close()
	}
	l.mu.Unlock()
	l.onClose()
	return nil
}

func (l *handoffListener) Addr() net.Addr { return l.addr }

// give passes c to the server; the event loop never waits for it. With the
// queue full (the server is not accepting) the connection is closed.
func (l *handoffListener) give(c net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.isDone {
		c.Close()
		return
	}
	select {
	case l.ch <- c:
	default:
		c.Close()
	}
}

// pageRecorder is the ResponseWriter the edge renders the proxy's own
// pages with (the home page, routing errors); the loop then writes the
// recorded answer like a worker's.
type pageRecorder struct {
	h    http.Header
	code int
	body []byte
}

func (r *pageRecorder) Header() http.Header { return r.h }

func (r *pageRecorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}

func (r *pageRecorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	r.body = append(r.body, b...)
	return len(b), nil
}

// answer serializes the recorded page as an HTTP/1.1 answer.
func (r *pageRecorder) answer(head1, close bool) []byte {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	r.h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	r.h.Del("Connection")
	r.h.Del("Transfer-Encoding")
	r.h.Set("Content-Length", strconv.Itoa(len(r.body)))
	if close {
		r.h.Set("Connection", "close")
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %03d %s\r\n", r.code, http.StatusText(r.code))
	_ = r.h.Write(&b)
	b.WriteString("\r\n")
	if !head1 {
		b.Write(r.body)
	}
	return b.Bytes()
}
