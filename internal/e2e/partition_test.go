package e2e

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// netnsHost is a second "host": a network namespace joined to this one by
// a veth pair (hostIP here, nsIP there), which can be cut and healed.
type netnsHost struct {
	ns, link     string
	hostIP, nsIP string
}

// newNetnsHost makes one, or skips the test without root and ip(8) (in
// CI, which runs as root, it must work).
func newNetnsHost(t *testing.T) *netnsHost {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip(8) (iproute2)")
	}
	k := os.Getpid()%200 + 20
	h := &netnsHost{ns: fmt.Sprintf("cbp%d", os.Getpid()), link: fmt.Sprintf("cbp%dh", os.Getpid()),
		hostIP: fmt.Sprintf("10.233.%d.1", k), nsIP: fmt.Sprintf("10.233.%d.2", k)}
	t.Cleanup(func() {
		_ = exec.Command("ip", "netns", "del", h.ns).Run()
		_ = exec.Command("ip", "link", "del", h.link).Run()
	})
	for _, args := range [][]string{
		{"netns", "add", h.ns},
		{"link", "add", h.link, "type", "veth", "peer", "name", "eth0", "netns", h.ns},
		{"addr", "add", h.hostIP + "/30", "dev", h.link},
		{"link", "set", h.link, "up"},
		{"-n", h.ns, "addr", "add", h.nsIP + "/30", "dev", "eth0"},
		{"-n", h.ns, "link", "set", "eth0", "up"},
		{"-n", h.ns, "link", "set", "lo", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return h
}

// cut and heal take the link down and up: nothing passes either way.
func (h *netnsHost) cut(t *testing.T)  { h.setLink(t, "down") }
func (h *netnsHost) heal(t *testing.T) { h.setLink(t, "up") }

func (h *netnsHost) setLink(t *testing.T, state string) {
	t.Helper()
	if out, err := exec.Command("ip", "link", "set", h.link, state).CombinedOutput(); err != nil {
		t.Fatalf("ip link set %s %s: %v: %s", h.link, state, err, out)
	}
}

// TestPartitionE2E: the worker hosting the chat room runs on another host
// (a network namespace) and is cut off for about ten seconds. A new user
// who opens /chat meanwhile is served the room from its new worker (never
// a 503); alice's engine, relayed to the cut-off worker, is closed by the
// proxy when the master declares that worker dead and reconnects to the
// room's new copy at the same URL; when the link heals, the worker comes
// back and its copy is fenced.
func TestPartitionE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	needChromium(t)
	h := newNetnsHost(t)
	apps, _ := filepath.Abs("../../apps")
	c := startCluster(t, clusterOpts{proxies: 1, workers: 0, runtime: "chromium",
		extra: []string{"--apps", apps, "--rmi", "0.0.0.0:0", "--gossip", "0.0.0.0:0", "--gossip-advertise", h.hostIP}})
	_, rmiPort, _ := net.SplitHostPort(c.rmi)
	// The far worker first, so the room is placed there (the only worker).
	const far = "w-e2efar"
	out, err := exec.Command(binary, "worker-key", "--data-dir", filepath.Join(c.dir, "data"), "--id", far).CombinedOutput()
	if err != nil {
		t.Fatalf("worker-key: %v: %s", err, out)
	}
	c.workers[far] = c.startVia([]string{"ip", "netns", "exec", h.ns}, far, "worker", "--master", net.JoinHostPort(h.hostIP, rmiPort),
		"--secret-file", strings.TrimSpace(string(out)), "--id", far, "--listen", h.nsIP+":0", "--gossip", h.nsIP+":0",
		"--no-handoff", "--runtime", "chromium")
	c.waitFor("the far worker registered", 60*time.Second, func(st *wire.ClusterStatus) bool { return hasWorker(st, far) && connected(st) == 1 })
	base := "http://" + c.public
	users := userBrowsers(t)
	alice, alicePath := chatUser(t, users, base)
	iid := instanceOf(t, alicePath)
	if w := instanceWorker(c.mustStatus(), iid); w != far {
		t.Fatalf("the room is on %s, want %s", w, far)
	}
	c.startWorker("w-e2enear")
	c.waitFor("the near worker registered", 60*time.Second, func(st *wire.ClusterStatus) bool { return connected(st) == 2 })
	want := sendChat(t, alice, 3)

	h.cut(t)
	cut := time.Now()
	healed := false
	defer func() {
		if !healed {
			h.heal(t)
		}
	}()
	c.waitFor("the cut-off worker silent", 30*time.Second, func(st *wire.ClusterStatus) bool { return silent(st, far) })
	hops := newUser(t, base).open("/chat")
	last := hops[len(hops)-1]
	if m := browserURL.FindStringSubmatch(last.path); last.status != 200 || m == nil || m[2] != iid {
		t.Fatalf("/chat during the partition: %+v", hops)
	}
	if moved := c.movedOff(iid, far); moved != "w-e2enear" {
		t.Fatalf("the room moved to %s", moved)
	}
	decided := time.Now()
	liveOn(t, alice, base, alicePath, "w-e2enear", want)
	t.Logf("fault-to-live partition: %v (the room moved after %v, alice live on the new copy %v after that)", time.Since(cut), decided.Sub(cut), time.Since(decided))
	if d := time.Until(cut.Add(10 * time.Second)); d > 0 {
		time.Sleep(d) // the cut lasts ten seconds in all
	}
	h.heal(t)
	healed = true
	c.waitFor("the far worker back, the room where it moved", 90*time.Second, func(st *wire.ClusterStatus) bool {
		return hasWorker(st, far) && connected(st) == 2 && instanceWorker(st, iid) == "w-e2enear"
	})
	eventually(t, alice, "alice still on the new copy", "document.body.dataset.worker", "w-e2enear")
}
