package netns

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
)

// helperEnv makes the test binary a helper program run in a namespace:
// "echo ADDR" (an echo server) or "relay ADDR TO" (accepts on ADDR and
// relays each connection to TO, so the path between two namespaces can be
// driven from the root namespace).
const helperEnv = "CB_NETNS_HELPER"

func TestMain(m *testing.M) {
	if h := os.Getenv(helperEnv); h != "" {
		helper(strings.Fields(h))
		return
	}
	testutil.Main(m)
}

func helper(args []string) {
	ln, err := net.Listen("tcp", args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("listening") // the parent waits for this line
	for {
		c, err := ln.Accept()
		if err != nil {
			os.Exit(1)
		}
		go func() {
			defer c.Close()
			switch args[0] {
			case "echo":
				_, _ = io.Copy(c, c)
			case "relay":
				up, err := net.Dial("tcp", args[2])
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c) }()
				_, _ = io.Copy(c, up)
			}
		}()
	}
}

// needNet makes a Net, or skips where namespaces cannot be made (in CI,
// where they can, a failure to make them fails).
func needNet(t *testing.T) *Net {
	t.Helper()
	if err := Check(); err != nil {
		t.Skip("skipping: " + err.Error())
	}
	n, err := New()
	if err != nil {
		if testutil.CI() {
			t.Fatal(err)
		}
		t.Skip("skipping: network namespaces cannot be made here: " + err.Error())
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
	})
	return n
}

// start runs a helper in h and waits until it listens.
func start(t *testing.T, h *Host, args ...string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := h.Command(self)
	cmd.Env = append(os.Environ(), helperEnv+"="+strings.Join(args, " "))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "listening\n" {
		t.Fatalf("helper %v in %s: %q %v", args, h, line, err)
	}
}

// dial connects from the root namespace.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, testutil.Scale(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// echo sends s over c and reads it back (waiting as long as needed, up to
// a bound against hangs).
func echo(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(testutil.Scale(60 * time.Second)))
	buf := make([]byte, len(s))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != s {
		t.Fatalf("echo of %q: %q %v", s, buf, err)
	}
}

var retrans = regexp.MustCompile(`retrans:\d+/(\d+)`)

// retransmits is how often h's kernel retransmitted on its TCP connections
// to peer (ss(8)): the sign that packets are lost on the way.
func retransmits(t *testing.T, h *Host, peer string) int {
	t.Helper()
	out, err := h.Command("ss", "-tin", "dst", peer).CombinedOutput()
	if err != nil {
		t.Fatalf("ss: %v: %s", err, out)
	}
	n := 0
	for _, m := range retrans.FindAllStringSubmatch(string(out), -1) {
		k, _ := strconv.Atoi(m[1])
		n += k
	}
	return n
}

// TestHostsAndCuts: hosts reach each other and are reached from the root
// namespace; a cut stalls an established connection between two of them
// (the sender retransmits, nothing comes back) without touching the root's
// paths to either; after the heal the same connection carries what was
// sent during the cut. A cut of some ports leaves the others alone.
func TestHostsAndCuts(t *testing.T) {
	n := needNet(t)
	a, err := n.Host("a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.Host("b")
	if err != nil {
		t.Fatal(err)
	}
	if a.Addr == b.Addr || a.Addr == n.Root() || !n.prefix.Contains(a.Addr) || !n.prefix.Contains(b.Addr) {
		t.Fatalf("addresses: root %s, a %s, b %s in %s", n.Root(), a.Addr, b.Addr, n.prefix)
	}
	if _, err := n.Host("a"); err == nil {
		t.Fatal("a second host a was made")
	}
	if _, err := n.Host("Bad_Name"); err == nil {
		t.Fatal("a host with a bad name was made")
	}
	start(t, a, "echo", a.AddrPort(7000))
	start(t, a, "echo", a.AddrPort(7001))
	start(t, b, "relay", b.AddrPort(7100), a.AddrPort(7000))
	start(t, b, "relay", b.AddrPort(7101), a.AddrPort(7001))
	direct := dial(t, a.AddrPort(7000))
	viaB := dial(t, b.AddrPort(7100))      // root → b → a:7000
	otherPort := dial(t, b.AddrPort(7101)) // root → b → a:7001
	echo(t, direct, "hello")
	echo(t, viaB, "hello")
	echo(t, otherPort, "hello")

	for _, ports := range [][]Port{nil, {TCP(7000)}} {
		cut, err := n.Cut(a, b, ports...)
		if err != nil {
			t.Fatal(err)
		}
		before := retransmits(t, b, a.AddrPort(7000))
		if _, err := io.WriteString(viaB, "during "+cut.String()); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 30*time.Second, testutil.Cond("b retransmitting to a across "+cut.String(), func() bool {
			return retransmits(t, b, a.AddrPort(7000)) > before
		}))
		echo(t, direct, "root still reaches a")
		if ports != nil {
			echo(t, otherPort, "another port still passes")
		}
		// A new connection across the cut does not get through either: b
		// keeps sending its SYN.
		fresh := dial(t, b.AddrPort(7100))
		if _, err := io.WriteString(fresh, "new"); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 30*time.Second, testutil.Cond("b's new connection to a stuck in SYN-SENT", func() bool {
			out, _ := b.Command("ss", "-tn", "state", "syn-sent", "dst", a.AddrPort(7000)).CombinedOutput()
			return strings.Contains(string(out), a.AddrPort(7000))
		}))
		if err := cut.Heal(); err != nil {
			t.Fatal(err)
		}
		if err := cut.Heal(); err != nil {
			t.Fatalf("healing twice: %v", err)
		}
		// What was sent during the cut arrives on the same connection.
		want := "during " + cut.String()
		_ = viaB.SetReadDeadline(time.Now().Add(testutil.Scale(90 * time.Second)))
		buf := make([]byte, len(want))
		if _, err := io.ReadFull(viaB, buf); err != nil || string(buf) != want {
			t.Fatalf("after the heal: %q %v", buf, err)
		}
		echo(t, viaB, "healed")
		_ = fresh.SetReadDeadline(time.Now().Add(testutil.Scale(90 * time.Second)))
		buf = make([]byte, 3)
		if _, err := io.ReadFull(fresh, buf); err != nil || string(buf) != "new" {
			t.Fatalf("the connection made during the cut, after the heal: %q %v", buf, err)
		}
	}
	if _, err := n.Cut(a, a); err == nil {
		t.Fatal("a cut of a host from itself")
	}
	if _, err := n.Cut(a, b, Port{"sctp", 1}); err == nil {
		t.Fatal("a cut of an sctp port")
	}
}

// TestCloseAndCleanStale: Close removes the namespaces, the processes in
// them and the bridge; CleanStale removes what a dead run left (named
// after a pid that cannot exist) and leaves live runs' alone.
func TestCloseAndCleanStale(t *testing.T) {
	if err := Check(); err != nil {
		t.Skip("skipping: " + err.Error())
	}
	n, err := New()
	if err != nil {
		if testutil.CI() {
			t.Fatal(err)
		}
		t.Skip("skipping: " + err.Error())
	}
	h, err := n.Host("x")
	if err != nil {
		n.Close()
		t.Fatal(err)
	}
	sleeper := h.Command("sleep", "600")
	if err := sleeper.Start(); err != nil {
		n.Close()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sleeper.Wait() }()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(testutil.Scale(30 * time.Second)):
		t.Fatal("the process in the namespace outlived Close")
	}
	if nsExists(t, h.NS) || linkExists(n.id) {
		t.Fatalf("left after Close: namespace %v, bridge %v", nsExists(t, h.NS), linkExists(n.id))
	}
	if _, err := n.Host("y"); err == nil {
		t.Fatal("a host on a closed net")
	}

	// A dead run's leftovers: pid_max is at most 2^22, so this pid never
	// runs.
	const dead = Prefix + "4194305"
	for _, args := range [][]string{{"netns", "add", dead + "-left"}, {"link", "add", dead, "type", "bridge"}} {
		if err := ip(args...); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = ip("netns", "del", dead+"-left"); _ = ip("link", "del", dead) })
	live, err := New() // this run's: must survive
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if _, err := live.Host("z"); err != nil {
		t.Fatal(err)
	}
	if nsExists(t, dead+"-left") || linkExists(dead) {
		t.Fatal("New did not clean up the dead run's namespace and bridge")
	}
	removed, err := CleanStale()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range removed {
		if p, _ := owner(r); p == os.Getpid() {
			t.Fatalf("CleanStale removed this run's %s", r)
		}
	}
	if !nsExists(t, live.id+"-z") || !linkExists(live.id) {
		t.Fatal("this run's namespace or bridge is gone")
	}
}

func nsExists(t *testing.T, ns string) bool {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns list: %v: %s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == ns {
			return true
		}
	}
	return false
}

func TestOwner(t *testing.T) {
	for name, want := range map[string]int{"cbn12": 12, "cbn12-master": 12, "cbn12h3": 12, "cbn": -1, "cbnx": -1, "cbp12": -1, "cbn12-": -1, "cbn12h": -1, "eth0": -1} {
		got, ok := owner(name)
		if !ok {
			got = -1
		}
		if got != want {
			t.Errorf("owner(%q) = %d, want %d", name, got, want)
		}
	}
	if !alive(os.Getpid()) || alive(4194305) {
		t.Fatal("alive")
	}
}
