package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/ready"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// TestMasterOutageAndRestart: while the master is frozen, a standalone proxy
// keeps routing existing instances; after a kill -9 and restart, workers
// re-register and the instance table is rebuilt from them.
func TestMasterOutageAndRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	c := startCluster(t, clusterOpts{proxies: 0, workers: 2})
	standalone := c.start("proxy-standalone", "proxy", "--master", c.rmi, "--listen", anyPort,
		"--secret-file", filepath.Join(c.dir, "data", "cluster.secret"), "--name", "standalone").addrs(t)["public"]
	c.waitFor("standalone proxy subscribed", 20*time.Second, func(st *wire.ClusterStatus) bool { return len(st.Proxies) == 2 })

	alice := newUser(t, "http://"+standalone)
	hops := alice.open("/hello")
	last := hops[len(hops)-1]
	m := browserURL.FindStringSubmatch(last.path)
	if m == nil || last.status != 200 {
		t.Fatalf("chain: %+v", hops)
	}
	iid := m[2]

	// Freeze the master: existing instances stay reachable through the
	// proxy; new placements fail with a clear 503.
	if err := syscall.Kill(c.master.pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	frozen := true
	defer func() {
		if frozen {
			_ = syscall.Kill(c.master.pid(), syscall.SIGCONT)
		}
	}()
	if h := alice.get("/hello/a/" + iid); h.status != 404 || h.worker != last.worker {
		t.Fatalf("instance URL during master outage: %+v", h)
	}
	if h := alice.get(last.path); h.status != 200 {
		t.Fatalf("browser URL during master outage: %+v", h)
	}
	if h := newUser(t, "http://"+standalone).get("/notes"); h.status != 503 {
		t.Fatalf("application URL during master outage: want 503, got %+v", h)
	}
	_ = syscall.Kill(c.master.pid(), syscall.SIGCONT)
	frozen = false

	// kill -9 and restart the master with the same data directory.
	c.master.kill()
	c.startMaster(clusterOpts{proxies: 0})
	st := c.waitFor("workers re-registered with their instances", 30*time.Second, func(st *wire.ClusterStatus) bool {
		return connected(st) == 2 && instanceWorker(st, iid) == last.worker
	})
	_ = st
	pub := newUser(t, "http://"+c.public)
	pub.c.Jar = alice.c.Jar // same person, now through the master's embedded proxy
	again := pub.open("/hello")
	if got := again[len(again)-1]; got.path != last.path || got.status != 200 {
		t.Fatalf("after the master restart alice should find her browser %s: %+v", last.path, again)
	}
}

// TestGarbageOnRMIPort: a peer that sends garbage is disconnected and logged;
// the master keeps serving.
func TestGarbageOnRMIPort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	c := startCluster(t, clusterOpts{proxies: 0, workers: 1})
	for _, junk := range [][]byte{
		[]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		{0xff, 0xff, 0xff, 0xff, 1, 2, 3},
		{0, 0, 0, 5, 0x93, 0xc1, 0xc1, 0xc1, 0xc1},
	} {
		conn, err := net.DialTimeout("tcp", c.rmi, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = conn.Write(junk)
		_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
		buf := make([]byte, 4096)
		for {
			if _, err := conn.Read(buf); err != nil {
				break // closed by the master (or the deadline, which fails below)
			}
		}
		conn.Close()
	}
	st := c.mustStatus()
	if connected(st) != 1 {
		t.Fatalf("the worker lost its registration: %+v", st.Workers)
	}
	if h := newUser(t, "http://"+c.public).open("/hello"); h[len(h)-1].status != 200 {
		t.Fatalf("cluster broken after garbage: %+v", h)
	}
	if !logContains(c.master, "rmi: handshake failed") {
		t.Errorf("master did not log the garbage peer")
	}
	// A worker with the wrong secret is refused and never registered.
	intruder := exec.Command(binary, "worker", "--master", c.rmi, "--id", "w-intruder")
	intruder.Env = append(os.Environ(), "CB_SECRET=not-the-cluster-secret-at-all")
	if err := intruder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = intruder.Process.Kill(); _ = intruder.Wait() }()
	testutil.Eventually(t, 20*time.Second, testutil.Cond("the master logging the intruder's failed authentication", func() bool { return logContains(c.master, "peer rejected") }))
	for _, w := range c.mustStatus().Workers {
		if w.ID == "w-intruder" {
			t.Fatal("a worker with the wrong secret registered")
		}
	}
}

// TestUpAndStatus runs the all-in-one command and the status CLI as a person
// would.
func TestUpAndStatus(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	readyFile := filepath.Join(dir, "up.ready")
	cmd := exec.Command(binary, "--ready-file", readyFile, "up", "--data-dir", dir, "--listen", anyPort, "--workers", "2")
	stdout, _ := cmd.StdoutPipe()
	logf, _ := os.Create(filepath.Join(dir, "up.log"))
	defer logf.Close()
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		checkRaces(t) // up and its workers (TestMain catches what ends later)
		if t.Failed() {
			t.Logf("up log:\n%s", tail(logf.Name(), 0, 80))
		}
	}()
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var url string
	deadline := time.After(30 * time.Second)
	for url == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("up exited before printing its URL")
			}
			if _, u, found := strings.Cut(l, "open "); found {
				url = strings.TrimSpace(u)
			}
		case <-deadline:
			t.Fatal("up did not print its URL")
		}
	}
	// The URL names the port up really bound (it was given port 0).
	if r, err := ready.Read(readyFile); err != nil || url != "http://"+r.Addrs["public"]+"/" {
		t.Fatalf("up printed %q; its ready file says %v (%v)", url, r.Addrs, err)
	}
	// A newcomer clicks at once: the app answers, no "503 no workers".
	if hs := newUser(t, strings.TrimSuffix(url, "/")).open("/hello"); hs[len(hs)-1].status != 200 {
		t.Fatalf("the app right after up printed its URL: %+v", hs)
	}
	waitFor := func(cond func(string) bool) string {
		var out string
		testutil.Eventually(t, 20*time.Second, func() error {
			b, _ := exec.Command(binary, "status", "--master", url, "--data-dir", dir).CombinedOutput()
			if out = string(b); !cond(out) {
				return fmt.Errorf("status does not match yet; last output:\n%s", out)
			}
			return nil
		})
		return out
	}
	waitFor(func(s string) bool {
		return strings.Contains(s, "w-local1") && strings.Contains(s, "w-local2") && strings.Count(s, "connected") == 2
	})
	u := newUser(t, strings.TrimSuffix(url, "/"))
	hops := u.open("/notes")
	last := hops[len(hops)-1]
	m := browserURL.FindStringSubmatch(last.path)
	if m == nil || last.status != 200 {
		t.Fatalf("notes chain through up: %+v", hops)
	}
	out := waitFor(func(s string) bool { return strings.Contains(s, m[2]) })
	for _, want := range []string{"/hello", "/notes", "singleInstancePerUser", "WORKER", "INSTANCE"} {
		if !strings.Contains(out, want) {
			t.Errorf("status output lacks %q:\n%s", want, out)
		}
	}
	js, err := exec.Command(binary, "status", "--master", url, "--data-dir", dir, "--json").Output()
	if err != nil || !strings.Contains(string(js), `"instances"`) || !strings.Contains(string(js), m[2]) {
		t.Fatalf("status --json: %v %s", err, js)
	}
	upQuickRestart(t, cmd.Process.Pid, strings.TrimSuffix(url, "/"), dir, u, last.path, m[2]) // up serves the admin API on its public port
	// Files holding secrets are private.
	for _, f := range []string{"cluster.secret", "admin.token", "worker.key", "proxy.key"} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v mode %v, want 0600", f, err, fi.Mode().Perm())
		}
	}
	// Ctrl-C stops everything.
	_ = cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("up exited with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("up did not stop on SIGINT")
	}
}

// TestCLIErrors: bad flags give a message naming the flag and a non-zero
// exit.
func TestCLIErrors(t *testing.T) {
	dir := t.TempDir()
	loose := filepath.Join(dir, "loose.secret")
	_ = os.WriteFile(loose, []byte("0123456789abcdef0123456789abcdef\n"), 0o644)
	for _, tc := range []struct {
		name string
		args []string
		env  []string
		want string
	}{
		{"worker without secret", []string{"worker"}, nil, "--secret-file"},
		{"worker with readable secret", []string{"worker", "--secret-file", loose}, nil, "chmod 600"},
		{"worker bad id", []string{"worker", "--id", "BAD"}, []string{"CB_SECRET=0123456789abcdef0123"}, `--id "BAD" is not a worker id`},
		{"worker negative rest", []string{"worker", "--runtime", "none", "--rest-after", "-1s"}, []string{"CB_SECRET=0123456789abcdef0123"}, "--rest-after must not be negative"},
		{"worker frame scale", []string{"worker", "--runtime", "none", "--frame-scale-min", "1.5"}, []string{"CB_SECRET=0123456789abcdef0123"}, "--frame-scale-min 1.5 is not in (0, 1]"},
		{"worker render scale", []string{"worker", "--render-scale", "0.1"}, []string{"CB_SECRET=0123456789abcdef0123"}, "--render-scale 0.1 is not within [0.25, 1]"},
		{"worker frame latencies", []string{"worker", "--runtime", "none", "--frame-latency-high", "20ms", "--frame-latency-low", "30ms"}, []string{"CB_SECRET=0123456789abcdef0123"}, "--frame-latency-low 30ms must be below the high latency limit, 20ms"},
		{"short CB_SECRET", []string{"proxy"}, []string{"CB_SECRET=short"}, "CB_SECRET"},
		{"master bad balancer", []string{"master", "--data-dir", dir, "--balancer", "fastest"}, nil, "--balancer"},
		{"master bad apps dir", []string{"master", "--data-dir", dir, "--apps", filepath.Join(dir, "nope")}, nil, "--apps"},
		{"bad log format", []string{"--log-format", "xml", "status"}, nil, "--log-format"},
		{"up zero workers", []string{"up", "--data-dir", dir, "--workers", "0"}, nil, "--workers"},
		{"status unreachable", []string{"status", "--master", "http://127.0.0.1:1", "--token", "x"}, nil, "asking the master"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, binary, tc.args...)
			cmd.Env = append(os.Environ(), tc.env...)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("exit 0; output:\n%s", out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Fatalf("output does not name %q:\n%s", tc.want, out)
			}
		})
	}
}

// upQuickRestart: the worker hosting the user's instance is killed -9 and
// up restarts it under the same id within seconds, before gossip notices.
// The master takes its registration without the instance as the loss of
// it and places it again at once: the user's Browser URL answers again (no
// 503 for minutes) and the admin can close the instance (200, not 502).
func upQuickRestart(t *testing.T, upPid int, adminBase, dir string, u *user, path, iid string) {
	t.Helper()
	token, err := os.ReadFile(filepath.Join(dir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	admin := func(method, p string) (int, []byte) {
		req, _ := http.NewRequest(method, adminBase+p, nil)
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
		req.Header.Set("Accept", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	status := func() *wire.ClusterStatus {
		var st wire.ClusterStatus
		code, b := admin(http.MethodGet, "/api/v1/cluster")
		if code != http.StatusOK || json.Unmarshal(b, &st) != nil {
			t.Fatalf("status: %d %s", code, b)
		}
		return &st
	}
	wid := instanceWorker(status(), iid)
	pid := 0
	for _, p := range childPids(upPid) {
		cl, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		if args := strings.Split(string(cl), "\x00"); slices.Contains(args, "worker") && slices.Contains(args, wid) {
			pid = p
		}
	}
	if wid == "" || pid == 0 {
		t.Fatalf("no worker process for %s's worker %q", iid, wid)
	}
	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 60*time.Second, func() error {
		if h := u.get(path); h.status != http.StatusOK {
			return fmt.Errorf("the Browser URL after the restart: %d", h.status)
		}
		return nil
	})
	t.Logf("fault-to-live up-quick-restart: %s", time.Since(killed).Round(10*time.Millisecond))
	if code, b := admin(http.MethodPost, "/api/v1/instances/"+iid+"/close"); code != http.StatusOK {
		t.Fatalf("admin close after the restart: %d %s", code, b)
	}
}
