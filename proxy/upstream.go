package proxy

import (
	"bufio"
	"context"
	"net"
	"sync"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
)

// upConn is a keep-alive HTTP/1.1 connection to a worker.
type upConn struct {
	net.Conn
	addr   string
	br     *bufio.Reader
	bw     *bufio.Writer
	reused bool      // taken from the pool (may have been closed by the worker since)
	idleAt time.Time // when it went back to the pool
}

// upstreams keeps idle connections per worker address. Taking is LIFO, so
// the warmest connection serves the next request and surplus ones age out.
// There is no background reaper: stale connections are closed when a
// request passes by, when a worker is found unreachable, and at Shutdown.
type upstreams struct {
	dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	maxIdle int           // per address
	idleFor time.Duration // an idle connection older than this is not reused
	clk     clock.Clock

	mu     sync.Mutex
	idle   map[string][]*upConn
	closed bool
}

func newUpstreams(d *net.Dialer, maxIdle int, idleFor time.Duration, clk clock.Clock) *upstreams {
	return &upstreams{dial: d.DialContext, maxIdle: maxIdle, idleFor: idleFor, clk: clk, idle: make(map[string][]*upConn)}
}

// get returns an idle connection to addr or dials a new one.
func (u *upstreams) get(ctx context.Context, addr string) (*upConn, error) {
	c, stale := u.take(addr, u.clk.Now())
	closeConns(stale)
	if c != nil {
		return c, nil
	}
	nc, err := u.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &upConn{Conn: nc, addr: addr, br: bufio.NewReaderSize(nc, 4<<10), bw: bufio.NewWriterSize(nc, 4<<10)}, nil
}

func (u *upstreams) take(addr string, now time.Time) (c *upConn, stale []*upConn) {
	u.mu.Lock()
	defer u.mu.Unlock()
	s := u.idle[addr]
	n := len(s)
	if n == 0 {
		return nil, nil
	}
	c = s[n-1]
	s[n-1] = nil
	s = s[:n-1]
	if now.Sub(c.idleAt) >= u.idleFor { // the rest is older still
		delete(u.idle, addr)
		return nil, append(s, c)
	}
	u.idle[addr] = s
	c.reused = true
	return c, nil
}

// put returns a connection whose last exchange ended cleanly.
func (u *upstreams) put(c *upConn) {
	c.idleAt = u.clk.Now()
	u.mu.Lock()
	if u.closed || len(u.idle[c.addr]) >= u.maxIdle {
		u.mu.Unlock()
		c.Close()
		return
	}
	u.idle[c.addr] = append(u.idle[c.addr], c)
	u.mu.Unlock()
}

// drop closes the idle connections to addr: its worker went away, and the
// next request must not find them first.
func (u *upstreams) drop(addr string) {
	u.mu.Lock()
	s := u.idle[addr]
	delete(u.idle, addr)
	u.mu.Unlock()
	closeConns(s)
}

// close closes every idle connection; connections in use are closed when
// their exchange ends.
func (u *upstreams) close() {
	u.mu.Lock()
	idle := u.idle
	u.idle = make(map[string][]*upConn)
	u.closed = true
	u.mu.Unlock()
	for _, s := range idle {
		closeConns(s)
	}
}

func closeConns(s []*upConn) {
	for _, c := range s {
		c.Close()
	}
}
