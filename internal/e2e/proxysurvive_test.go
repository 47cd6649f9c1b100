package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/internal/procfs"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// proxyProcs lists the live proxy processes serving public (from /proc).
func proxyProcs(public string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		args, err := procfs.Cmdline(pid)
		if err != nil || !slices.Contains(args, "proxy") || !slices.Contains(args, public) {
			continue
		}
		if st, err := procfs.ReadStat(pid); err == nil && st.Alive() {
			out = append(out, pid)
		}
	}
	slices.Sort(out)
	return out
}

// killProxies ends proxies a test left behind (their master was killed).
func killProxies(public string) {
	for _, pid := range proxyProcs(public) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// pingThrough sends a WebSocket ping and waits for the pong: the relay
// still carries bytes both ways to the worker.
func pingThrough(t *testing.T, conn *websocket.Conn, pongs <-chan struct{}) {
	t.Helper()
	if err := conn.WriteControl(websocket.PingMessage, []byte("still there?"), time.Now().Add(5*time.Second)); err != nil {
		t.Fatalf("ping: %v", err)
	}
	select {
	case <-pongs:
	case <-time.After(10 * time.Second):
		t.Fatal("no pong through the proxy")
	}
}

// TestProxiesOutliveMaster: the proxies a master started keep serving when
// it is killed (open sockets relay, cached routes answer, Application URLs
// get a quick 503); the restarted master adopts them instead of starting
// more; a clean stop leaves none behind.
func TestProxiesOutliveMaster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	c := startCluster(t, clusterOpts{proxies: 2, workers: 1})
	before := proxyProcs(c.public)
	if len(before) != 2 {
		t.Fatalf("proxy processes: %v, want 2", before)
	}

	alice := newUser(t, "http://"+c.public)
	hops := alice.open("/hello")
	last := hops[len(hops)-1]
	if last.status != 200 || browserURL.FindStringSubmatch(last.path) == nil {
		t.Fatalf("chain: %+v", hops)
	}
	ch := &chatter{u: alice, url: "ws://" + c.public + last.path + "/ws"}
	conn := ch.dial(context.Background())
	if conn == nil {
		t.Fatal("client engine socket refused")
	}
	defer conn.Close()
	pongs := make(chan struct{}, 4)
	conn.SetPongHandler(func(string) error { pongs <- struct{}{}; return nil })
	go func() { // the reader runs the control handlers
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
		}
	}()
	pingThrough(t, conn, pongs)

	c.master.kill()
	if got := proxyProcs(c.public); !slices.Equal(got, before) {
		t.Fatalf("proxies after the master's kill -9: %v, want %v still running", got, before)
	}
	pingThrough(t, conn, pongs)
	if h := alice.get(last.path); h.status != 200 {
		t.Fatalf("browser URL (cached route) while the master is down: %+v", h)
	}
	start := time.Now()
	h := newUser(t, "http://"+c.public).get("/hello")
	took := time.Since(start)
	t.Logf("Application URL while the master is down: %d in %v", h.status, took)
	if h.status != 503 || !strings.Contains(h.body, "unavailable") {
		t.Fatalf("Application URL while the master is down: %+v", h)
	}
	// The route timeout is 5 s; the answer must not wait for it.
	if took >= 3*time.Second {
		t.Fatalf("the 503 took %v: it waited for the route timeout", took)
	}

	c.startMaster(clusterOpts{proxies: 2})
	c.waitFor("proxies and worker back", 30*time.Second, func(st *wire.ClusterStatus) bool {
		return connected(st) == 1 && len(st.Proxies) == 2
	})
	if got := proxyProcs(c.public); !slices.Equal(got, before) {
		t.Fatalf("proxies after the restart: %v, want the adopted %v and no others", got, before)
	}
	if !logContains(c.master, "adopting the proxy a previous master started") {
		t.Error("the master did not log the adoption")
	}
	pingThrough(t, conn, pongs)
	if hs := newUser(t, "http://"+c.public).open("/hello"); hs[len(hs)-1].status != 200 {
		t.Fatalf("new user after the restart: %+v", hs)
	}

	c.master.stop()
	testutil.Eventually(t, 20*time.Second, func() error {
		if ps := proxyProcs(c.public); len(ps) > 0 {
			return fmt.Errorf("proxies left after a clean stop: %v", ps)
		}
		return nil
	})
}

// TestSecondClusterRefusedOnSharedPort: the public port is shared only by
// proxies of one cluster. Another cluster's master or proxy on it fails at
// start and says why; a proxy of the same cluster joins.
func TestSecondClusterRefusedOnSharedPort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	a := startCluster(t, clusterOpts{proxies: 1, workers: 1})
	b := startCluster(t, clusterOpts{proxies: 0, workers: 0})

	run := func(args ...string) (string, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, binary, args...).CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("%v kept running on the shared public port:\n%s", args[:2], tail2(out))
		}
		return string(out), err == nil
	}
	out, ok := run("master", "--data-dir", filepath.Join(t.TempDir(), "data"), "--rmi", anyPort,
		"--gossip", "127.0.0.1:0", "--admin", anyPort, "--listen", a.public, "--proxies", "2")
	if ok || !strings.Contains(out, "another cluster") {
		t.Fatalf("second master with --proxies 2 on the same port: ok=%v\n%s", ok, tail2([]byte(out)))
	}
	out, ok = run("proxy", "--master", b.rmi, "--secret-file", filepath.Join(b.dir, "data", "proxy.key"),
		"--listen", a.public, "--name", "intruder")
	if ok || !strings.Contains(out, "another cluster") {
		t.Fatalf("another cluster's proxy on the same port: ok=%v\n%s", ok, tail2([]byte(out)))
	}
	// Every request still reaches cluster A.
	for i := 0; i < 20; i++ {
		if hs := newUser(t, "http://"+a.public).open("/hello"); hs[len(hs)-1].status != 200 {
			t.Fatalf("request %d: %+v", i, hs)
		}
	}
	// A's own standalone proxy may join.
	a.start("proxy-standalone", "proxy", "--master", a.rmi, "--secret-file", filepath.Join(a.dir, "data", "proxy.key"),
		"--listen", a.public, "--name", "standalone")
	a.waitFor("the same cluster's proxy joined", 30*time.Second, func(st *wire.ClusterStatus) bool { return len(st.Proxies) == 2 })
}
