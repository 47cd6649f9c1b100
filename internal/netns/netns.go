// Package netns makes "hosts" for tests on one Linux machine: network
// namespaces joined by a bridge, each with an address of its own, and cuts
// between them that drop packets the way a failed network does (silently,
// in both directions, for every protocol or only for some ports). The root
// namespace is on the bridge too (Net.Root): the test process and what it
// runs itself (users' browsers, HTTP clients) form one more host, which is
// never cut.
//
// Everything it creates is named cbn<pid>…: the namespaces cbn<pid>-<host>,
// the bridge cbn<pid> and the host ends of the veth pairs cbn<pid>h<n>.
// Close removes them; CleanStale removes those of runs whose process is gone
// (a crashed or killed test), with the processes still inside them.
//
// It needs root and ip(8) (iproute2): Check says why not.
//
// # Cuts
//
// A cut is a set of policy-routing rules (ip rule … blackhole) in the
// namespaces of both hosts: each drops, on input, what comes from the other
// (optionally only the given ports, as source or destination). Dropping on
// input, not output, keeps the sender unaware, as on a real network: its
// packets leave and nothing answers; no error comes back. So that the rules
// also catch established connections, each namespace has IP early demux off
// (which would otherwise skip the route lookup for packets of a connected
// socket) and its local routing table looked up after the cut rules.
package netns

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Prefix starts the name of everything this package creates.
const Prefix = "cbn"

// Check reports why network namespaces cannot be made here (nil: root and
// ip(8) are present; making them may still fail, e.g. in a container
// without CAP_SYS_ADMIN, which New then reports).
func Check() error {
	if os.Geteuid() != 0 {
		return errors.New("network namespaces need root (ip netns add)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("network namespaces need ip(8) from iproute2")
	}
	return nil
}

// Net is a set of hosts on one bridge.
type Net struct {
	id     string // cbn<pid>
	prefix netip.Prefix
	root   netip.Addr

	mu     sync.Mutex
	hosts  []*Host
	closed bool
}

// Host is one network namespace on the bridge.
type Host struct {
	Name string     // as given to Net.Host
	NS   string     // the namespace: cbn<pid>-<name>
	Addr netip.Addr // its address on the bridge
	veth string     // the veth end in the root namespace

	mu   sync.Mutex
	pref int // the next free rule preference
}

// The rule preferences of a host's namespace: cut rules from firstPref,
// the local table (at 0 in a new namespace) moved to localPref.
const (
	firstPref = 10
	localPref = 10000
)

// maxHosts bounds a Net: its /24 has the root at .1 and hosts from .2.
const maxHosts = 200

// run runs ip (or another command) and returns its output; an error holds
// the command line and what it printed.
func run(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

func ip(args ...string) error {
	_, err := run("ip", args...)
	return err
}

// lockPath serializes subnet choice and bridge creation between processes
// (the tests of several packages run at once).
var lockPath = filepath.Join(os.TempDir(), "cloudbrowser-netns.lock")

func lock() (func(), error) {
	f, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("netns: lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("netns: lock: %w", err)
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// New cleans up after dead runs (CleanStale), then makes the bridge with
// the root namespace's address on a /24 of 10.237.0.0/16 no interface of
// the root namespace uses. Close it when done.
func New() (*Net, error) {
	if err := Check(); err != nil {
		return nil, err
	}
	unlock, err := lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if _, err := cleanStale(); err != nil {
		return nil, err
	}
	prefix, err := freePrefix()
	if err != nil {
		return nil, err
	}
	n := &Net{id: fmt.Sprintf("%s%d", Prefix, os.Getpid()), prefix: prefix, root: prefix.Addr().Next()}
	// Bridged packets skip the root namespace's firewall (a host with
	// br_netfilter and a FORWARD policy of DROP, as Docker sets up, would
	// drop them); a kernel too old for the option gets a plain bridge.
	if err := ip("link", "add", n.id, "type", "bridge", "nf_call_iptables", "0", "nf_call_ip6tables", "0", "nf_call_arptables", "0"); err != nil {
		if err := ip("link", "add", n.id, "type", "bridge"); err != nil {
			return nil, fmt.Errorf("netns: %w", err)
		}
	}
	for _, args := range [][]string{
		{"addr", "add", netip.PrefixFrom(n.root, 24).String(), "dev", n.id},
		{"link", "set", n.id, "up"},
	} {
		if err := ip(args...); err != nil {
			_ = ip("link", "del", n.id)
			return nil, fmt.Errorf("netns: %w", err)
		}
	}
	return n, nil
}

// freePrefix picks a /24 of 10.237.0.0/16 that no address of the root
// namespace is in (other runs' bridges hold theirs).
func freePrefix() (netip.Prefix, error) {
	out, err := run("ip", "-4", "-o", "addr", "show")
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("netns: %w", err)
	}
	used := map[netip.Prefix]bool{}
	for _, f := range strings.Fields(out) {
		if p, err := netip.ParsePrefix(f); err == nil && p.Addr().Is4() {
			used[netip.PrefixFrom(p.Addr(), 24).Masked()] = true
		}
	}
	start := os.Getpid() % 250
	for i := range 250 {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 237, byte((start + i) % 250), 0}), 24)
		if !used[p] {
			return p, nil
		}
	}
	return netip.Prefix{}, errors.New("netns: every /24 of 10.237.0.0/16 is in use")
}

// Root is the root namespace's address on the bridge: where the test
// process is seen from the hosts.
func (n *Net) Root() netip.Addr { return n.root }

// Host makes a namespace named after name (letters, digits and '-'), joins
// it to the bridge with the next address, and brings up its loopback.
func (n *Net) Host(name string) (*Host, error) {
	if !validName.MatchString(name) {
		return nil, fmt.Errorf("netns: host name %q: want 1-20 lowercase letters, digits or '-'", name)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, errors.New("netns: net closed")
	}
	if len(n.hosts) >= maxHosts {
		return nil, fmt.Errorf("netns: at most %d hosts", maxHosts)
	}
	for _, h := range n.hosts {
		if h.Name == name {
			return nil, fmt.Errorf("netns: host %q exists", name)
		}
	}
	addr := n.root
	for range len(n.hosts) + 1 {
		addr = addr.Next()
	}
	h := &Host{Name: name, NS: n.id + "-" + name, Addr: addr, veth: fmt.Sprintf("%sh%d", n.id, len(n.hosts)+1), pref: firstPref}
	steps := [][]string{
		{"netns", "add", h.NS},
		{"link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns", h.NS},
		{"link", "set", h.veth, "master", n.id, "up"},
		{"-n", h.NS, "addr", "add", netip.PrefixFrom(addr, 24).String(), "dev", "eth0"},
		{"-n", h.NS, "link", "set", "eth0", "up"},
		{"-n", h.NS, "link", "set", "lo", "up"},
		// Cut rules go before the local table (see the package comment).
		{"-n", h.NS, "rule", "add", "pref", strconv.Itoa(localPref), "lookup", "local"},
		{"-n", h.NS, "rule", "del", "pref", "0", "lookup", "local"},
	}
	for i, args := range steps {
		if err := ip(args...); err != nil {
			if i > 0 {
				_ = ip("netns", "del", h.NS)
			}
			return nil, fmt.Errorf("netns: %w", err)
		}
	}
	// Early demux hands packets of connected sockets their cached route,
	// past the rules: off, so a cut also stops established connections.
	if _, err := run("ip", "netns", "exec", h.NS, "sh", "-c", "echo 0 > /proc/sys/net/ipv4/ip_early_demux"); err != nil {
		_ = ip("netns", "del", h.NS)
		return nil, fmt.Errorf("netns: %w", err)
	}
	n.hosts = append(n.hosts, h)
	return h, nil
}

var validName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,19}$`)

// Exec is the command prefix that runs a program in h's namespace (ip netns
// exec replaces itself with the program: its pid is the program's).
func (h *Host) Exec() []string { return []string{"ip", "netns", "exec", h.NS} }

// Command is exec.Command of name and args in h's namespace.
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.NS, name}, args...)...)
}

// AddrPort is h's address with port.
func (h *Host) AddrPort(port uint16) string { return netip.AddrPortFrom(h.Addr, port).String() }

func (h *Host) String() string { return h.Name + "(" + h.Addr.String() + ")" }

// Pids lists the processes in h's namespace.
func (h *Host) Pids() ([]int, error) {
	return nsPids(h.NS)
}

func nsPids(ns string) ([]int, error) {
	out, err := run("ip", "netns", "pids", ns)
	if err != nil {
		return nil, fmt.Errorf("netns: %w", err)
	}
	var pids []int
	for _, f := range strings.Fields(out) {
		if p, err := strconv.Atoi(f); err == nil {
			pids = append(pids, p)
		}
	}
	return pids, nil
}

// Port names traffic of one protocol to or from one port.
type Port struct {
	Proto string // "tcp" or "udp"
	Num   uint16
}

// TCP and UDP name a port.
func TCP(n uint16) Port { return Port{"tcp", n} }
func UDP(n uint16) Port { return Port{"udp", n} }

func (p Port) String() string { return fmt.Sprintf("%s/%d", p.Proto, p.Num) }

// Cut is a partition between two hosts, in force until Heal.
type Cut struct {
	desc  string
	mu    sync.Mutex
	rules []rule // nil once healed
}

type rule struct {
	h    *Host
	pref int
}

// Cut drops every packet between a and b, both ways, or with ports only
// those whose source or destination port is one of them (e.g. a service's
// port: its requests and its answers). Other hosts still reach both.
func (n *Net) Cut(a, b *Host, ports ...Port) (*Cut, error) {
	if a == b {
		return nil, errors.New("netns: a cut needs two hosts")
	}
	c := &Cut{desc: a.Name + " ✂ " + b.Name}
	if len(ports) > 0 {
		names := make([]string, len(ports))
		for i, p := range ports {
			if p.Proto != "tcp" && p.Proto != "udp" {
				return nil, fmt.Errorf("netns: port %v: protocol tcp or udp", p)
			}
			names[i] = p.String()
		}
		c.desc += " (" + strings.Join(names, ", ") + ")"
	}
	for _, side := range [][2]*Host{{a, b}, {b, a}} {
		at, from := side[0], side[1]
		var matches [][]string
		if len(ports) == 0 {
			matches = [][]string{nil}
		}
		for _, p := range ports {
			num := strconv.Itoa(int(p.Num))
			matches = append(matches, []string{"ipproto", p.Proto, "dport", num}, []string{"ipproto", p.Proto, "sport", num})
		}
		for _, m := range matches {
			pref, err := at.addRule(append([]string{"iif", "eth0", "from", from.Addr.String() + "/32"}, m...))
			if err != nil {
				_ = c.Heal()
				return nil, err
			}
			c.rules = append(c.rules, rule{at, pref})
		}
	}
	return c, nil
}

// addRule adds a blackhole rule matching sel under h's next preference.
func (h *Host) addRule(sel []string) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pref >= localPref {
		return 0, fmt.Errorf("netns: %s: too many cut rules", h.Name)
	}
	pref := h.pref
	args := append([]string{"-n", h.NS, "rule", "add", "pref", strconv.Itoa(pref)}, sel...)
	if err := ip(append(args, "blackhole")...); err != nil {
		return 0, fmt.Errorf("netns: %w", err)
	}
	h.pref++
	return pref, nil
}

// Heal removes the cut's rules (the first error is returned; every rule is
// tried). Healing twice does nothing.
func (c *Cut) Heal() error {
	c.mu.Lock()
	rules := c.rules
	c.rules = nil
	c.mu.Unlock()
	var first error
	for _, r := range rules {
		if err := ip("-n", r.h.NS, "rule", "del", "pref", strconv.Itoa(r.pref)); err != nil && first == nil {
			first = fmt.Errorf("netns: heal %s: %w", c.desc, err)
		}
	}
	return first
}

func (c *Cut) String() string { return c.desc }

// Close ends the processes left in the hosts' namespaces (SIGKILL), then
// removes the namespaces (and with them their veth pairs) and the bridge.
func (n *Net) Close() error {
	n.mu.Lock()
	hosts := n.hosts
	n.hosts, n.closed = nil, true
	n.mu.Unlock()
	var errs []error
	for _, h := range hosts {
		if err := removeNS(h.NS); err != nil {
			errs = append(errs, err)
		}
	}
	if err := ip("link", "del", n.id); err != nil && linkExists(n.id) {
		errs = append(errs, fmt.Errorf("netns: %w", err))
	}
	return errors.Join(errs...)
}

// removeNS kills what runs in namespace ns and deletes it.
func removeNS(ns string) error {
	if pids, err := nsPids(ns); err == nil {
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
	}
	if err := ip("netns", "del", ns); err != nil {
		return fmt.Errorf("netns: %w", err)
	}
	return nil
}

func linkExists(name string) bool {
	return ip("link", "show", "dev", name) == nil
}

// stale matches names of this package's namespaces and links, with the
// pid of the run that made them.
var stale = regexp.MustCompile(`^` + Prefix + `([0-9]+)(-[a-z0-9-]+|h[0-9]+)?$`)

// owner is the pid in a name of this package's ("" for other names).
func owner(name string) (int, bool) {
	m := stale.FindStringSubmatch(name)
	if m == nil {
		return 0, false
	}
	pid, err := strconv.Atoi(m[1])
	return pid, err == nil
}

// alive says whether process pid exists.
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// CleanStale removes the namespaces (ending what runs in them), bridges
// and veth ends of runs whose process is gone, and returns their names.
func CleanStale() ([]string, error) {
	if err := Check(); err != nil {
		return nil, err
	}
	unlock, err := lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	return cleanStale()
}

// cleanStale is CleanStale under the lock (two runs cleaning at once would
// remove the same things).
func cleanStale() ([]string, error) {
	var removed []string
	var errs []error
	out, err := run("ip", "netns", "list")
	if err != nil {
		return nil, fmt.Errorf("netns: %w", err)
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if pid, ok := owner(f[0]); ok && !alive(pid) {
			if err := removeNS(f[0]); err != nil {
				errs = append(errs, err)
				continue
			}
			removed = append(removed, f[0])
		}
	}
	links, err := run("ip", "-o", "link", "show")
	if err != nil {
		return removed, fmt.Errorf("netns: %w", err)
	}
	var names []string
	for _, line := range strings.Split(links, "\n") {
		// "7: cbn123h1@if2: <…>" or "5: cbn123: <…>"
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		if pid, ok := owner(name); ok && !alive(pid) {
			names = append(names, name)
		}
	}
	// veth ends first (a namespace's removal usually took them already),
	// then the bridges.
	slices.SortFunc(names, func(a, b string) int { return len(b) - len(a) })
	for _, name := range names {
		if err := ip("link", "del", name); err != nil && linkExists(name) {
			errs = append(errs, fmt.Errorf("netns: %w", err))
			continue
		}
		removed = append(removed, name)
	}
	return removed, errors.Join(errs...)
}
