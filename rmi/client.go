package rmi

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Redial backoff bounds for Client.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// Client keeps one live, authenticated connection to addr, redialing with
// exponential backoff and jitter whenever it drops. It never retries a call:
// a call that fails because the connection dropped returns ErrClosed, since
// only the caller knows whether the method is safe to repeat.
type Client struct {
	n         *Node
	addr      string
	onConnect func(ctx context.Context, c *Conn) error
	log       zerolog.Logger
	ctx       context.Context
	cancel    context.CancelFunc
	done      chan struct{} // closed when run returns

	mu      sync.Mutex
	conn    *Conn
	changed chan struct{} // closed and replaced whenever conn/closed changes
	closed  bool
	// kick cuts a redial back-off short when a caller waits for a
	// connection (at most one dial per minBackoff): a server that came back
	// is found at once by whoever needs it, not after up to maxBackoff.
	kick chan struct{}
}

// NewClient starts a client for addr. onConnect (optional) runs after each
// successful dial and handshake, before the connection is handed out, e.g.
// to re-register a worker with the master; if it fails the connection is
// closed and the dial retried. Node.Close also stops the client.
func (n *Node) NewClient(addr string, onConnect func(ctx context.Context, c *Conn) error) *Client {
	ctx, cancel := context.WithCancel(n.ctx)
	cl := &Client{
		n: n, addr: addr, onConnect: onConnect,
		log: n.log.With().Str("client", addr).Logger(),
		ctx: ctx, cancel: cancel,
		done:    make(chan struct{}),
		changed: make(chan struct{}),
		kick:    make(chan struct{}, 1),
	}
	if !n.goTracked(cl.run) {
		cancel()
		cl.closed = true
		close(cl.done)
	}
	return cl
}

func (cl *Client) set(c *Conn, closed bool) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.conn = c
	cl.closed = cl.closed || closed
	close(cl.changed)
	cl.changed = make(chan struct{})
}

func (cl *Client) run() {
	defer close(cl.done)
	defer cl.set(nil, true)
	backoff := minBackoff
	for {
		c, err := cl.connect()
		if err != nil {
			if cl.ctx.Err() != nil {
				return
			}
			wait := jitter(backoff)
			cl.log.Warn().Err(err).Dur("retry_in", wait).Msg("rmi: client dial failed")
			if !cl.pause(wait) {
				return
			}
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		up := time.Now()
		cl.set(c, false)
		select {
		case <-c.Done():
		case <-cl.ctx.Done():
			_ = c.Close()
			return
		}
		cl.set(nil, false)
		if time.Since(up) >= maxBackoff { // it was stable: start over fast
			backoff = minBackoff
		}
		wait := jitter(backoff)
		cl.log.Warn().Err(c.Err()).Dur("retry_in", wait).Msg("rmi: client connection lost")
		if !cl.pause(wait) {
			return
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

func (cl *Client) connect() (*Conn, error) {
	c, err := cl.n.Dial(cl.ctx, cl.addr)
	if err != nil {
		return nil, err
	}
	if cl.onConnect != nil {
		if err := cl.onConnect(cl.ctx, c); err != nil {
			_ = c.Close()
			return nil, fmt.Errorf("rmi: client onConnect: %w", err)
		}
	}
	return c, nil
}

// jitter returns a duration in [d/2, d] ("equal jitter"), so clients that
// lost the same server do not redial in lockstep.
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2+1)
}

func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// pause waits d before the next dial, or less when a caller is waiting
// for a connection (kick), but at least minBackoff. false: the client ends.
func (cl *Client) pause(d time.Duration) bool {
	floor := time.Now().Add(minBackoff)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-cl.ctx.Done():
		return false
	case <-t.C:
		return true
	case <-cl.kick:
		return sleep(cl.ctx, time.Until(floor))
	}
}

// Conn waits for a live connection (one whose onConnect succeeded) or ctx.
// While there is none, it asks the client to redial now rather than after
// its back-off.
func (cl *Client) Conn(ctx context.Context) (*Conn, error) {
	for {
		cl.mu.Lock()
		c, ch, closed := cl.conn, cl.changed, cl.closed
		cl.mu.Unlock()
		if closed {
			return nil, fmt.Errorf("rmi: client %s: %w", cl.addr, ErrClosed)
		}
		if c != nil && c.Err() == nil {
			return c, nil
		}
		select {
		case cl.kick <- struct{}{}:
		default:
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("rmi: client %s: waiting for connection: %w", cl.addr, ctx.Err())
		}
	}
}

// Call waits for a live connection and calls object.method over it.
func (cl *Client) Call(ctx context.Context, object, method string, reply any, args ...any) error {
	c, err := cl.Conn(ctx)
	if err != nil {
		return err
	}
	return c.Call(ctx, object, method, reply, args...)
}

// Close stops redialing, closes the current connection and waits for the
// client's goroutine.
func (cl *Client) Close() error {
	cl.cancel()
	<-cl.done
	return nil
}
