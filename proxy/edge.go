package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/handoff"
)

// The edge is the proxy's public front on Linux: a few epoll event loops,
// one per CPU on a locked OS thread, as nginx runs, with no goroutine per
// connection. They relay the requests that make up nearly all of a page
// load (GET and HEAD without a body, to an instance whose route is cached)
// and hand every other connection, with the bytes already read, to the
// net/http server that serves everything else exactly as before: the
// Application URL's placement, uploads, WebSocket upgrades, error pages,
// and whatever the edge's strict parser does not take (edgehead.go). The
// measurements behind it are in docs/benchmarks.md ("HTTP").

// Serve serves p on ln through srv, whose Handler must be p: with the edge
// where the platform has one, else srv.Serve(ln) alone. It returns what
// srv.Serve returns; Shutdown (and srv.Shutdown) end both.
func (p *Proxy) Serve(srv *http.Server, ln net.Listener) error {
	return srv.Serve(p.startEdge(ln))
}

// edgeStats counts what the edge did.
type edgeStats struct {
	requests atomic.Uint64
	handoffs [len(handoffReasons)]atomic.Uint64
}

var handoffReasons = [...]string{hoSyntax, hoMethod, hoFraming, hoLarge, hoTarget}

func (s *edgeStats) handoff(reason string) {
	for i, r := range handoffReasons {
		if r == reason {
			s.handoffs[i].Add(1)
			return
		}
	}
}

// EdgeHandoffs returns, by reason, the connections the edge handed to
// net/http.
func (p *Proxy) EdgeHandoffs() map[string]uint64 {
	m := make(map[string]uint64, len(handoffReasons))
	for i, r := range handoffReasons {
		m[r] = p.edge.handoffs[i].Load()
	}
	return m
}

// edgeWaiter is a running edge as Shutdown sees it.
type edgeWaiter interface {
	stop()
	kill()
	done() <-chan struct{}
	// closeWorker ends the exchanges in flight with a worker the master
	// declared dead (an answer not begun gets the moving page).
	closeWorker(wid string)
}

// shutdownEdges stops every edge and waits for its loops to finish the
// answers in flight; when ctx ends first they close everything.
func (p *Proxy) shutdownEdges(ctx context.Context) {
	p.mu.Lock()
	edges := p.edges
	p.mu.Unlock()
	for _, e := range edges {
		e.stop()
	}
	for _, e := range edges {
		select {
		case <-e.done():
		case <-ctx.Done():
			e.kill()
			<-e.done()
		}
	}
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

var _ io.Reader = (*handedConn)(nil)

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
