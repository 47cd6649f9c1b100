// Package membership joins a CloudBrowser process to the cluster's gossip
// layer (hashicorp/memberlist) and turns memberlist's callbacks into ordered
// events. The master uses it as the failure detector for workers.
package membership

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/logx"
)

// Roles of cluster members.
const (
	RoleMaster = "master"
	RoleWorker = "worker"
	RoleProxy  = "proxy"
)

// Meta is gossiped with every member (memberlist allows 512 bytes).
type Meta struct {
	Role    string `json:"r"`
	ID      string `json:"id"`
	Leaving bool   `json:"l,omitempty"` // set just before a graceful leave
}

// EventKind says what happened to a member.
type EventKind int

// Event kinds.
const (
	Joined EventKind = iota
	Updated
	Left // graceful: the member announced it was leaving
	Failed
)

func (k EventKind) String() string {
	return [...]string{"joined", "updated", "left", "failed"}[k]
}

// Event is one membership change.
type Event struct {
	Kind EventKind
	Name string
	Addr string
	Meta Meta
}

// Config configures a member.
type Config struct {
	Name     string // unique node name
	BindAddr string // default 127.0.0.1
	BindPort int    // 0 = pick one
	// Advertise is the address others use; empty = BindAddr.
	Advertise string
	Key       []byte // 32-byte gossip key (AES-GCM); required
	Label     string // separates clusters on one network
	Meta      Meta
	Logger    zerolog.Logger
	// OnEvent receives events in order on one goroutine; it may block briefly.
	OnEvent func(Event)
}

// Tuning is the failure-detection profile. See docs/membership.md for why.
func tuning(c *memberlist.Config) {
	c.ProbeInterval = 400 * time.Millisecond
	c.ProbeTimeout = 200 * time.Millisecond
	c.SuspicionMult = 2
	c.SuspicionMaxTimeoutMult = 3
	c.GossipInterval = 100 * time.Millisecond
	c.GossipToTheDeadTime = 5 * time.Second
	c.PushPullInterval = 15 * time.Second
	c.TCPTimeout = 2 * time.Second
}

// ParseBind splits a --gossip address ("host:port", port 0 = any).
func ParseBind(addr string) (host string, port int, err error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("gossip address %q: %w", addr, err)
	}
	port, err = strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("gossip address %q: bad port %q", addr, p)
	}
	return h, port, nil
}

// Member is this process's membership.
type Member struct {
	ml     *memberlist.Memberlist
	del    *delegate
	log    zerolog.Logger
	events chan Event
	done   chan struct{}
	once   sync.Once
	// name and addr of the local node, fixed at start.
	name, addr string
}

// Start creates the local member; call Join to meet the others.
func Start(cfg Config) (*Member, error) {
	if len(cfg.Key) != 32 {
		return nil, fmt.Errorf("membership: gossip key must be 32 bytes, got %d", len(cfg.Key))
	}
	mc := memberlist.DefaultLANConfig()
	tuning(mc)
	mc.Name = cfg.Name
	mc.BindAddr = cfg.BindAddr
	if mc.BindAddr == "" {
		mc.BindAddr = "127.0.0.1"
	}
	mc.BindPort = cfg.BindPort
	mc.AdvertisePort = cfg.BindPort
	if cfg.Advertise != "" {
		mc.AdvertiseAddr = cfg.Advertise
	}
	mc.SecretKey = cfg.Key
	mc.GossipVerifyIncoming, mc.GossipVerifyOutgoing = true, true
	mc.Label = cfg.Label
	mc.Logger = logx.StdLogger(cfg.Logger.With().Str("component", "memberlist").Logger())
	m := &Member{
		log:    cfg.Logger,
		events: make(chan Event, 1024),
		done:   make(chan struct{}),
	}
	m.del = &delegate{m: m}
	m.del.setMeta(cfg.Meta)
	mc.Delegate = m.del
	mc.Events = m.del
	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("membership: create: %w", err)
	}
	m.ml = ml
	// The local node's fields are rewritten under memberlist's lock by
	// UpdateNode (Leave): read them once here, not through LocalNode later.
	n := ml.LocalNode()
	m.name, m.addr = n.Name, net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
	go m.dispatch(cfg.OnEvent)
	return m, nil
}

func (m *Member) dispatch(fn func(Event)) {
	defer close(m.done)
	for ev := range m.events {
		if fn != nil {
			fn(ev)
		}
	}
}

// Addr is the host:port others join through.
func (m *Member) Addr() string { return m.addr }

// Name is the local node name.
func (m *Member) Name() string { return m.name }

// Join contacts seeds, retrying until one answers or ctx ends.
func (m *Member) Join(ctx context.Context, seeds ...string) error {
	backoff := 100 * time.Millisecond
	for {
		n, err := m.ml.Join(seeds)
		if err == nil && n > 0 {
			return nil
		}
		m.log.Warn().Err(err).Strs("seeds", seeds).Msg("gossip join failed, retrying")
		select {
		case <-ctx.Done():
			return fmt.Errorf("membership: join %v: %w", seeds, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 3*time.Second)
	}
}

// Info describes a member as this node sees it.
type Info struct {
	Name  string
	Addr  string
	State string // alive, suspect, dead, left
	Meta  Meta
}

// Members lists the live members (joined and not yet failed or left), by
// name. It is this node's own roster, kept from memberlist's events:
// memberlist.Members returns pointers into its node table, whose fields it
// keeps writing without a lock the caller could take (a data race).
func (m *Member) Members() []Info {
	m.del.mu.Lock()
	out := make([]Info, 0, len(m.del.roster))
	for _, in := range m.del.roster {
		out = append(out, in)
	}
	m.del.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Alive reports whether the named member is known and alive.
func (m *Member) Alive(name string) bool {
	m.del.mu.Lock()
	defer m.del.mu.Unlock()
	_, ok := m.del.roster[name]
	return ok
}

// Leave announces a graceful departure (so peers can tell it from a crash),
// leaves the cluster and shuts the member down.
func (m *Member) Leave(timeout time.Duration) error {
	var err error
	m.once.Do(func() {
		meta := m.del.meta()
		meta.Leaving = true
		m.del.setMeta(meta)
		if uerr := m.ml.UpdateNode(timeout / 2); uerr != nil {
			m.log.Debug().Err(uerr).Msg("gossip leave flag not fully spread")
		}
		err = m.ml.Leave(timeout / 2)
		if serr := m.ml.Shutdown(); err == nil {
			err = serr
		}
		m.del.closeEvents()
		<-m.done
	})
	return err
}

// Shutdown stops without announcing (used by tests to simulate a crash, and
// on fatal errors).
func (m *Member) Shutdown() error {
	var err error
	m.once.Do(func() {
		err = m.ml.Shutdown()
		m.del.closeEvents()
		<-m.done
	})
	return err
}

type delegate struct {
	m      *Member
	mu     sync.Mutex
	raw    []byte
	closed bool
	// roster is the live members, from the events (Members).
	roster map[string]Info
}

// see records a member's arrival or update (on) or departure in roster.
func (d *delegate) see(n *memberlist.Node, on bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.roster == nil {
		d.roster = map[string]Info{}
	}
	if on {
		d.roster[n.Name] = Info{Name: n.Name, Addr: n.Address(), State: "alive", Meta: decodeMeta(n.Meta)}
	} else {
		delete(d.roster, n.Name)
	}
}

func (d *delegate) setMeta(meta Meta) {
	b, _ := json.Marshal(meta) // plain struct: cannot fail
	d.mu.Lock()
	d.raw = b
	d.mu.Unlock()
}

func (d *delegate) meta() Meta {
	d.mu.Lock()
	defer d.mu.Unlock()
	return decodeMeta(d.raw)
}

func decodeMeta(b []byte) Meta {
	var m Meta
	_ = json.Unmarshal(b, &m) // foreign or empty meta decodes to zero
	return m
}

func (d *delegate) emit(ev Event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	select {
	case d.m.events <- ev:
	default:
		d.m.log.Error().Str("node", ev.Name).Str("event", ev.Kind.String()).Msg("membership event queue full, event dropped")
	}
}

func (d *delegate) closeEvents() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.closed {
		d.closed = true
		close(d.m.events)
	}
}

// memberlist.Delegate
func (d *delegate) NodeMeta(limit int) []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.raw) > limit {
		return nil
	}
	return append([]byte(nil), d.raw...)
}
func (d *delegate) NotifyMsg([]byte)                           {}
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }
func (d *delegate) LocalState(join bool) []byte                { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool)     {}

// memberlist.EventDelegate
func (d *delegate) NotifyJoin(n *memberlist.Node) {
	d.see(n, true)
	d.emit(Event{Kind: Joined, Name: n.Name, Addr: n.Address(), Meta: decodeMeta(n.Meta)})
}
func (d *delegate) NotifyUpdate(n *memberlist.Node) {
	d.see(n, true)
	d.emit(Event{Kind: Updated, Name: n.Name, Addr: n.Address(), Meta: decodeMeta(n.Meta)})
}
func (d *delegate) NotifyLeave(n *memberlist.Node) {
	d.see(n, false)
	meta := decodeMeta(n.Meta)
	kind := Failed
	if meta.Leaving || n.State == memberlist.StateLeft {
		kind = Left
	}
	d.emit(Event{Kind: kind, Name: n.Name, Addr: n.Address(), Meta: meta})
}
