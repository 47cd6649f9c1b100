package rmi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// Config configures a Node.
type Config struct {
	// Name is this node's identity, sent in the handshake (e.g. "master").
	// Required, at most 256 bytes.
	Name string
	// Secret is the key this node proves when dialing, and the cluster
	// secret a server accepts from a client of any role; required, at least
	// 16 bytes.
	Secret []byte
	// Role is what this node declares when it dials (e.g. "worker"); the
	// server checks it against the role's key and records it on the
	// connection (Conn.Role). Default RoleCluster.
	Role string
	// RoleSecrets (servers) are the keys accepted from clients declaring a
	// role, in addition to Secret: a role key proves that role only.
	RoleSecrets map[string][]byte
	// NameSecret (servers), if set, returns the key bound to a client's
	// name within its role (nil = none): a key that proves the name as well
	// as the role (Conn.NameProven). It is tried before the role's key.
	NameSecret func(role, name string) []byte
	// MaxFrame is the largest frame body accepted or sent; default 8 MiB.
	// An oversized incoming frame closes the connection; an oversized
	// outgoing call fails with ErrFrameTooLarge and the connection stays up.
	MaxFrame int
	// Logger receives structured logs; the zero value discards them.
	Logger zerolog.Logger
	// HandshakeTimeout bounds authentication of a new connection; default 5s.
	HandshakeTimeout time.Duration
	// OnConnect, if set, is called for every authenticated connection,
	// accepted or dialed, before Dial returns. Calls over c already work.
	OnConnect func(c *Conn)
	// Identify, if set, says who an incoming call comes from: it runs
	// before each method, once the call passed the role check and its
	// arguments decoded, with the connection the call came over. Its peer
	// is what PeerFrom returns inside the method; an error refuses the
	// call (the caller gets it as the reply, with its RMICode) and the
	// method does not run. It runs per call rather than per connection
	// because what a connection speaks for can change while it is up (a
	// peer registers over it), and it must be quick: calls wait on it.
	Identify func(c *Conn) (peer any, err error)
}

// RoleCluster is the role of a client that holds the cluster secret and has
// no narrower role. It cannot be given a role key.
const RoleCluster = "cluster"

// MinSecretLen is the shortest Config.Secret accepted.
const MinSecretLen = 16

// maxInflight bounds concurrently running incoming calls per connection;
// beyond it the reader stops reading, pushing back on the peer over TCP.
const maxInflight = 1024

// Stats count calls of a node since it started.
type Stats struct {
	CallsIn, CallsOut   uint64 // methods run for peers / calls made to peers
	ErrorsIn, ErrorsOut uint64 // of those, the ones that returned an error
}

type nodeStats struct{ callsIn, callsOut, errorsIn, errorsOut atomic.Uint64 }

// Stats returns the node's call counters.
func (n *Node) Stats() Stats {
	return Stats{CallsIn: n.stats.callsIn.Load(), CallsOut: n.stats.callsOut.Load(),
		ErrorsIn: n.stats.errorsIn.Load(), ErrorsOut: n.stats.errorsOut.Load()}
}

// Node is one participant: it holds the registered objects, serves and dials
// connections, and owns every goroutine it starts.
type Node struct {
	cfg Config
	// dialKey is the key this node proves when it dials: Config.Secret
	// until SetDialSecret replaces it.
	dialKey atomic.Pointer[[]byte]
	log     zerolog.Logger
	stats   nodeStats

	ctx    context.Context // cancelled by Close; aborts handshakes and clients
	cancel context.CancelFunc

	mu        sync.Mutex
	closed    bool
	objects   map[string]*service
	conns     map[*Conn]struct{}
	listeners map[net.Listener]struct{}

	// wg counts every goroutine of the node (handshakes, conn readers and
	// writers, call handlers, clients). Goroutines started from outside a
	// counted goroutine are added under mu after checking closed, so Add
	// never races with Close's Wait.
	wg sync.WaitGroup
}

// New validates cfg, fills in defaults and returns a Node.
func New(cfg Config) (*Node, error) {
	if len(cfg.Secret) < MinSecretLen {
		return nil, fmt.Errorf("rmi: secret must be at least %d bytes, got %d", MinSecretLen, len(cfg.Secret))
	}
	if !validName(cfg.Name) {
		return nil, fmt.Errorf("rmi: node name must be 1..%d bytes", maxNameLen)
	}
	if cfg.Role == "" {
		cfg.Role = RoleCluster
	}
	if !validRole(cfg.Role) {
		return nil, fmt.Errorf("rmi: role must be 1..64 bytes, got %q", cfg.Role)
	}
	roleKeys := make(map[string][]byte, len(cfg.RoleSecrets))
	for role, k := range cfg.RoleSecrets {
		switch {
		case role == RoleCluster || !validRole(role):
			return nil, fmt.Errorf("rmi: invalid role %q for a role secret", role)
		case len(k) < MinSecretLen:
			return nil, fmt.Errorf("rmi: secret of role %q must be at least %d bytes, got %d", role, MinSecretLen, len(k))
		}
		roleKeys[role] = append([]byte(nil), k...)
	}
	cfg.RoleSecrets = roleKeys
	// Unset or negative sizes and durations take their defaults, as in
	// every Config of the module; written out here so that rmi depends on
	// none of its packages.
	if cfg.MaxFrame <= 0 {
		cfg.MaxFrame = DefaultMaxFrame
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = 5 * time.Second
	}
	cfg.Secret = append([]byte(nil), cfg.Secret...) // caller may reuse its slice
	ctx, cancel := context.WithCancel(context.Background())
	n := &Node{
		cfg:       cfg,
		log:       cfg.Logger.With().Str("node", cfg.Name).Logger(),
		ctx:       ctx,
		cancel:    cancel,
		objects:   make(map[string]*service),
		conns:     make(map[*Conn]struct{}),
		listeners: make(map[net.Listener]struct{}),
	}
	n.dialKey.Store(&cfg.Secret)
	return n, nil
}

// SetDialSecret replaces the key this node proves on its next dials (a
// worker given its own key at enrolment); connections already made keep
// theirs, and as a server the node still accepts Config.Secret.
func (n *Node) SetDialSecret(k []byte) error {
	if len(k) < MinSecretLen {
		return fmt.Errorf("rmi: secret must be at least %d bytes, got %d", MinSecretLen, len(k))
	}
	k = append([]byte(nil), k...)
	n.dialKey.Store(&k)
	return nil
}

// Name returns the node's configured name.
func (n *Node) Name() string { return n.cfg.Name }

// goTracked starts f as a counted goroutine unless the node is closed.
func (n *Node) goTracked(f func()) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return false
	}
	n.wg.Go(f)
	return true
}

// Serve accepts connections on ln until ctx is done, the node is closed or
// ln fails; it closes ln on return. Each connection is authenticated before
// any call is read from it. It returns nil after ctx/Close, otherwise the
// accept error.
func (n *Node) Serve(ctx context.Context, ln net.Listener) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		_ = ln.Close()
		return ErrClosed
	}
	n.listeners[ln] = struct{}{}
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		delete(n.listeners, ln)
		n.mu.Unlock()
		_ = ln.Close()
	}()
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()

	log := n.log.With().Str("listen", ln.Addr().String()).Logger()
	log.Info().Msg("rmi: serving")
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || n.isClosed() {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("rmi: accept: %w", err)
			}
			// Transient failures (e.g. EMFILE): back off rather than spin.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			log.Warn().Err(err).Dur("retry_in", backoff).Msg("rmi: accept failed")
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
			case <-n.ctx.Done():
			}
			continue
		}
		backoff = 0
		if !n.goTracked(func() { n.serveConn(nc) }) {
			_ = nc.Close()
			return nil
		}
	}
}

func (n *Node) isClosed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.closed
}

// serveConn authenticates an accepted connection and starts it.
func (n *Node) serveConn(nc net.Conn) {
	br := bufio.NewReaderSize(nc, 64<<10)
	hs, err := n.handshake(n.ctx, nc, br, false)
	if err != nil {
		_ = nc.Close()
		ev, msg := n.log.Warn(), "rmi: handshake failed"
		switch {
		case n.ctx.Err() != nil: // we are closing
			ev = n.log.Debug()
		case errors.Is(err, ErrAuth), errors.Is(err, ErrProtocol): // wrong key or version: worth an operator's attention
			ev, msg = n.log.Error(), "rmi: handshake failed: peer rejected"
		}
		ev.Err(err).Str("remote", nc.RemoteAddr().String()).Msg(msg)
		return
	}
	c, err := n.newConn(nc, br, hs)
	if err != nil {
		_ = nc.Close()
		return
	}
	if n.cfg.OnConnect != nil {
		n.cfg.OnConnect(c)
	}
}

// Dial connects to addr over TCP and authenticates.
func (n *Node) Dial(ctx context.Context, addr string) (*Conn, error) {
	if n.isClosed() {
		return nil, ErrClosed
	}
	// Abort on either the caller's ctx or the node closing.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(n.ctx, cancel)
	defer stop()

	// A connect nobody answers (a network cut drops the SYNs) gives up
	// like a handshake, instead of after the kernel's SYN retries (about
	// two minutes): a Client then redials soon after the cut heals.
	d := net.Dialer{Timeout: n.cfg.HandshakeTimeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("rmi: dial %s: %w", addr, err)
	}
	br := bufio.NewReaderSize(nc, 64<<10)
	hs, err := n.handshake(ctx, nc, br, true)
	if err != nil {
		_ = nc.Close()
		return nil, fmt.Errorf("rmi: dial %s: %w", addr, err)
	}
	c, err := n.newConn(nc, br, hs)
	if err != nil {
		_ = nc.Close()
		return nil, err
	}
	if n.cfg.OnConnect != nil {
		n.cfg.OnConnect(c)
	}
	return c, nil
}

// Conns returns the live connections.
func (n *Node) Conns() []*Conn {
	n.mu.Lock()
	defer n.mu.Unlock()
	cs := make([]*Conn, 0, len(n.conns))
	for c := range n.conns {
		cs = append(cs, c)
	}
	return cs
}

// Close stops serving, closes all clients and connections and waits for
// every goroutine of the node to end, including running method calls (whose
// contexts are cancelled: methods must honour ctx for Close to return).
func (n *Node) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	lns := make([]net.Listener, 0, len(n.listeners))
	for ln := range n.listeners {
		lns = append(lns, ln)
	}
	conns := make([]*Conn, 0, len(n.conns))
	for c := range n.conns {
		conns = append(conns, c)
	}
	n.mu.Unlock()

	n.cancel() // aborts handshakes, dials and client loops
	for _, ln := range lns {
		_ = ln.Close()
	}
	for _, c := range conns {
		c.shutdown(ErrClosed)
	}
	n.wg.Wait()
	return nil
}
