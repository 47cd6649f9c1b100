package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
)

// Config configures a Guard.
type Config struct {
	// Allow are the cluster's own opt-ins (operator configuration). They
	// may allow any class, metadata included, but never a cluster endpoint.
	Allow []Rule
	// Cluster are the cluster's endpoints (host:port), always refused. A
	// host that is empty or unspecified (":8000", "0.0.0.0:8000") means
	// that port on every address of this machine.
	Cluster []string
	// InternalSuffix names the apps' internal origins (e.g.
	// ".app.cloudbrowser.internal"): <app><suffix> is served by the
	// tenant's Internal handler and never resolved.
	InternalSuffix string
	// Lookup resolves a host name (nil = the system resolver). Tests use
	// it to play DNS rebinding.
	Lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	// DialTimeout bounds one connection attempt (0 = 10 s).
	DialTimeout time.Duration
	// OnBlock is told of every refused request (metrics); it must be fast.
	OnBlock func(app, reason, target string)
	Logger  zerolog.Logger
}

// Tenant is whose policy an endpoint applies: an app's.
type Tenant struct {
	// App is the app's mount point ("" = a browser not given to an app
	// yet: public destinations only, no internal origin).
	App string
	// Allow are the app's opt-ins (its manifest's egress.allow). They
	// cannot allow metadata addresses or cluster endpoints.
	Allow []Rule
	// Internal serves http://<App><InternalSuffix>/ (nil = 404).
	Internal http.Handler
}

// Guard decides connections and opens endpoints.
type Guard struct {
	cfg Config
	log zerolog.Logger

	localAddrs map[netip.Addr]bool

	clusterMu  sync.RWMutex
	clusterAny map[int]bool            // port on any local address
	clusterAt  map[netip.AddrPort]bool // exact endpoints

	mu        sync.Mutex
	endpoints map[*Endpoint]struct{}
	closed    bool
}

// New makes a Guard.
func New(cfg Config) (*Guard, error) {
	config.OrDefault(&cfg.DialTimeout, 10*time.Second)
	g := &Guard{cfg: cfg, log: cfg.Logger.With().Str("component", "egress").Logger(),
		clusterAny: map[int]bool{}, clusterAt: map[netip.AddrPort]bool{}, localAddrs: map[netip.Addr]bool{},
		endpoints: map[*Endpoint]struct{}{}}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				g.localAddrs[p.Addr().Unmap()] = true
			}
		}
	}
	for _, ep := range cfg.Cluster {
		if err := g.AddCluster(ep); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// AddCluster refuses one more cluster endpoint (host:port; an empty or
// unspecified host means the port on every local address).
func (g *Guard) AddCluster(ep string) error {
	host, port, err := splitHostPort(ep, 0)
	if err != nil || port == 0 {
		return fmt.Errorf("egress: cluster endpoint %q: want host:port", ep)
	}
	var exact []netip.Addr
	anyLocal := host == ""
	if !anyLocal {
		if a, err := netip.ParseAddr(host); err == nil {
			if a.IsUnspecified() {
				anyLocal = true
			} else {
				exact = []netip.Addr{a.Unmap()}
			}
		} else {
			// A name: its addresses now (best effort; cluster members'
			// names rarely move).
			ctx, cancel := context.WithTimeout(context.Background(), g.cfg.DialTimeout)
			ips, err := g.lookup(ctx, host)
			cancel()
			if err != nil {
				return fmt.Errorf("egress: cluster endpoint %q: %w", ep, err)
			}
			for _, a := range ips {
				exact = append(exact, a.Unmap())
			}
		}
	}
	g.clusterMu.Lock()
	defer g.clusterMu.Unlock()
	if anyLocal {
		g.clusterAny[port] = true
	}
	for _, a := range exact {
		g.clusterAt[netip.AddrPortFrom(a, uint16(port))] = true
		if a.IsLoopback() || g.localAddrs[a] {
			g.clusterAny[port] = true // this machine: every local address reaches it
		}
	}
	return nil
}

// Check decides a connection to ip:port made for a request to host, with
// t's policy: ok, or the reason it is refused.
func (g *Guard) Check(t *Tenant, host string, ip netip.Addr, port int) (ok bool, reason string) {
	ip = ip.Unmap().WithZone("")
	if g.isCluster(ip, port) {
		return false, ReasonCluster
	}
	for _, r := range g.cfg.Allow {
		if r.Match(host, ip, port) {
			return true, ""
		}
	}
	class := Classify(ip)
	if class == Public {
		return true, ""
	}
	if class != Metadata && t != nil {
		for _, r := range t.Allow {
			if r.Match(host, ip, port) {
				return true, ""
			}
		}
	}
	return false, string(class)
}

func (g *Guard) isCluster(ip netip.Addr, port int) bool {
	g.clusterMu.RLock()
	defer g.clusterMu.RUnlock()
	if g.clusterAt[netip.AddrPortFrom(ip, uint16(port))] {
		return true
	}
	if !g.clusterAny[port] {
		return false
	}
	// Any address that reaches this machine: its own, loopback and the
	// unspecified address (which connects to the local host).
	return ip.IsLoopback() || ip.IsUnspecified() || Classify(ip) == Unspecified || g.localAddrs[ip]
}

func (g *Guard) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	if g.cfg.Lookup != nil {
		return g.cfg.Lookup(ctx, host)
	}
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// BlockedError is a connection the guard refused.
type BlockedError struct {
	Host   string
	Addr   netip.AddrPort // zero when refused before resolution
	Reason string
}

func (e *BlockedError) Error() string {
	if e.Addr.IsValid() {
		return fmt.Sprintf("egress: %s (%s) refused: %s", e.Host, e.Addr, e.Reason)
	}
	return fmt.Sprintf("egress: %s refused: %s", e.Host, e.Reason)
}

// dial connects to host:port for t. The decision is made on each resolved
// address just before connect (the dialer's Control hook), so the address
// checked is the address connected to.
func (g *Guard) dial(ctx context.Context, t *Tenant, host string, port int) (net.Conn, error) {
	host = normalizeHost(host)
	var ips []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{a}
	} else {
		if !validName(host) {
			return nil, &BlockedError{Host: host, Reason: ReasonScheme}
		}
		if host == "localhost" || strings.HasSuffix(host, ".localhost") {
			// RFC 6761: always this machine, never asked of DNS (as
			// browsers do), so such a name is judged as loopback.
			ips = []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()}
		} else {
			lctx, cancel := context.WithTimeout(ctx, g.cfg.DialTimeout)
			ips, err = g.lookup(lctx, host)
			cancel()
			if err != nil || len(ips) == 0 {
				return nil, fmt.Errorf("egress: resolve %s: %w", host, errors.Join(err, errNoAddress))
			}
		}
	}
	var (
		mu      sync.Mutex
		blocked *BlockedError
	)
	d := net.Dialer{Timeout: g.cfg.DialTimeout, Control: func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return err
		}
		if ok, reason := g.Check(t, host, ap.Addr(), int(ap.Port())); !ok {
			e := &BlockedError{Host: host, Addr: ap, Reason: reason}
			mu.Lock()
			blocked = e
			mu.Unlock()
			return e
		}
		return nil
	}}
	var errs []error
	for _, ip := range ips {
		c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(ip.WithZone(""), uint16(port)).String())
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if blocked != nil {
		return nil, blocked
	}
	return nil, fmt.Errorf("egress: connect %s: %w", net.JoinHostPort(host, strconv.Itoa(port)), errors.Join(errs...))
}

var errNoAddress = errors.New("no address")

// internalApp returns the app whose internal origin host names, if any.
func (g *Guard) internalApp(host string) (string, bool) {
	if g.cfg.InternalSuffix == "" {
		return "", false
	}
	h := normalizeHost(host)
	if h == strings.TrimPrefix(g.cfg.InternalSuffix, ".") || strings.HasSuffix(h, g.cfg.InternalSuffix) {
		return strings.TrimSuffix(h, g.cfg.InternalSuffix), true
	}
	return "", false
}

func (g *Guard) blocked(t *Tenant, reason, target string) {
	app := ""
	if t != nil {
		app = t.App
	}
	g.log.Debug().Str("app", app).Str("reason", reason).Str("target", target).Msg("egress refused")
	if g.cfg.OnBlock != nil {
		g.cfg.OnBlock(app, reason, target)
	}
}

// Close closes every endpoint.
func (g *Guard) Close() error {
	g.mu.Lock()
	g.closed = true
	eps := make([]*Endpoint, 0, len(g.endpoints))
	for e := range g.endpoints {
		eps = append(eps, e)
	}
	g.mu.Unlock()
	for _, e := range eps {
		_ = e.Close()
	}
	return nil
}
