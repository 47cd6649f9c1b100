// Package e2e starts the real cloudbrowser binary (master, proxy processes,
// workers) on loopback and drives it the way users and admins do.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/ready"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cb-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "cloudbrowser")
	args := []string{"build", "-o", binary}
	if raceBinary() {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "github.com/cloudbrowser-go/cloudbrowser/cmd/cloudbrowser")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building cloudbrowser:", err)
		os.Exit(1)
	}
	if raceBinary() {
		// Every process of the binary, started by the harness or not
		// (up's workers, detached proxies, CLI runs), writes its race
		// reports here; see races_test.go.
		raceDir = filepath.Join(dir, "races")
		if err := os.Mkdir(raceDir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Setenv("GORACE", "log_path="+filepath.Join(raceDir, "race")+" "+os.Getenv("GORACE"))
	}
	// Workers keep no warm browsers unless a test asks (TestWarmFirstVisit):
	// the tests count browsers, and a 2-core CI runner has no CPU to spare
	// for browsers nobody uses.
	os.Setenv("CB_GENERAL_POOL_MIN", "0")
	code := m.Run()
	if unreported := newRaceReports(); len(unreported) > 0 {
		fmt.Fprintf(os.Stderr, "data races reported by processes of the binary under test:\n%s\n", strings.Join(unreported, "\n"))
		code = 1
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// anyPort lets a process bind any free loopback port; the test reads the
// port back from its --ready-file (proc.addrs). Never pick a port and
// start a process on it later: something else may take it in between.
const anyPort = "127.0.0.1:0"

// proc is one process of the cluster under test.
type proc struct {
	name  string
	cmd   *exec.Cmd
	log   *os.File
	ready string // --ready-file path
	done  chan struct{}
	err   error
	// dumpAt is the log's size when the process was made to dump its
	// goroutines (0 = never): its tail is what came before.
	dumpAt int64
}

// addrs waits for the process's --ready-file and returns the addresses it
// bound (keys: master rmi, gossip, admin, public; proxy public, admin;
// worker http).
func (p *proc) addrs(t *testing.T) map[string]string {
	t.Helper()
	var r ready.File
	testutil.Eventually(t, 60*time.Second, func() error {
		var err error
		r, err = ready.Read(p.ready)
		switch {
		case errors.Is(err, os.ErrNotExist) && p.exited():
			t.Fatalf("%s exited before it was ready (%v):\n%s", p.name, p.err, tail(p.log.Name(), 0, 40))
		case errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("%s not ready:\n%s", p.name, tail(p.log.Name(), 0, 40))
		case err != nil:
			t.Fatalf("%s: %v", p.name, err)
		}
		return nil
	})
	return r.Addrs
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// kill sends SIGKILL and waits.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// stop sends SIGTERM and waits (SIGKILL after 60 s: a worker hands its
// instances over before it exits).
func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		p.kill()
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// cluster is a master (with proxy children) and workers started from the
// binary.
type cluster struct {
	t          *testing.T
	dir        string
	rmi        string
	admin      string
	public     string
	token      string
	runtime    string
	workerArgs []string
	mu         sync.Mutex
	procs      []*proc
	master     *proc
	workers    map[string]*proc
}

type clusterOpts struct {
	proxies int
	workers int
	runtime string   // "none" (default) or "chromium"
	extra   []string // more master flags
	worker  []string // more worker flags
}

// appsCluster starts one proxy and one Chromium worker (with workerArgs)
// serving the test apps (testdata/apps); it skips in -short mode and
// needs Chromium.
func appsCluster(t *testing.T, workerArgs ...string) *cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	needChromium(t)
	apps, _ := filepath.Abs("testdata/apps")
	return startCluster(t, clusterOpts{proxies: 1, workers: 1, runtime: "chromium", extra: []string{"--apps", apps}, worker: workerArgs})
}

// workerMetric is the value of an unlabelled metric of the first worker.
func (c *cluster) workerMetric(t *testing.T, name string) float64 {
	t.Helper()
	return value(scrape(t, "http://"+c.mustStatus().Workers[0].HTTPAddr+"/metrics", c.metricsToken()), name, nil)
}

func startCluster(t *testing.T, o clusterOpts) *cluster {
	t.Helper()
	c := &cluster{t: t, dir: t.TempDir(), workers: map[string]*proc{}}
	t.Cleanup(c.shutdown)
	c.startMaster(o)
	tok, err := os.ReadFile(filepath.Join(c.dir, "data", "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	c.token = strings.TrimSpace(string(tok))
	if o.runtime == "" {
		o.runtime = "none"
	}
	c.runtime, c.workerArgs = o.runtime, o.worker
	for i := 1; i <= o.workers; i++ {
		c.startWorker(fmt.Sprintf("w-e2e%d", i))
	}
	c.waitFor("all workers registered", 30*time.Second, func(st *wire.ClusterStatus) bool {
		return connected(st) == o.workers && len(st.Proxies) == max(o.proxies, 1)
	})
	return c
}

// startMaster starts the master on any free ports the first time and on
// the same ports after that (a restarted master is found where it was).
func (c *cluster) startMaster(o clusterOpts) {
	c.t.Helper()
	or := func(addr string) string {
		if addr == "" {
			return anyPort
		}
		return addr
	}
	args := []string{"master", "--data-dir", filepath.Join(c.dir, "data"), "--rmi", or(c.rmi),
		"--gossip", anyPort, "--admin", or(c.admin), "--listen", or(c.public),
		"--proxies", fmt.Sprint(o.proxies)}
	c.master = c.start("master", append(args, o.extra...)...)
	a := c.master.addrs(c.t)
	c.rmi, c.admin, c.public = a["rmi"], a["admin"], a["public"]
	waitHTTP(c.t, "http://"+c.admin+"/healthz", 20*time.Second)
}

// startWorker starts worker id with its own key (cloudbrowser worker-key),
// so it can be restarted under the same id.
func (c *cluster) startWorker(id string) *proc {
	c.t.Helper()
	out, err := exec.Command(binary, "worker-key", "--data-dir", filepath.Join(c.dir, "data"), "--id", id).CombinedOutput()
	if err != nil {
		c.t.Fatalf("worker-key %s: %v: %s", id, err, out)
	}
	p := c.start(id, append([]string{"worker", "--master", c.rmi, "--secret-file", strings.TrimSpace(string(out)),
		"--id", id, "--listen", "127.0.0.1:0", "--runtime", c.runtime}, c.workerArgs...)...)
	c.mu.Lock()
	c.workers[id] = p
	c.mu.Unlock()
	return p
}

// start runs the binary with args, logging to a file shown on failure.
func (c *cluster) start(name string, args ...string) *proc {
	c.t.Helper()
	return c.startVia(nil, name, args...)
}

// startVia runs the binary through a wrapper command (such as ip netns
// exec NS), which must exec it.
func (c *cluster) startVia(wrap []string, name string, args ...string) *proc {
	c.t.Helper()
	base := filepath.Join(c.dir, fmt.Sprintf("%s-%d", name, time.Now().UnixNano()))
	lf, err := os.Create(base + ".log")
	if err != nil {
		c.t.Fatal(err)
	}
	argv := append(append(append([]string(nil), wrap...), binary, "--log-level", "debug", "--ready-file", base+".ready"), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: lf, ready: base + ".ready", done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p
}

func (c *cluster) shutdown() {
	c.mu.Lock()
	procs := append([]*proc(nil), c.procs...)
	c.mu.Unlock()
	if c.t.Failed() {
		dumpStuck(c.t, procs)
	}
	// The master first (it stops its proxies), so stopping workers do not
	// hand their instances to each other; then the rest, newest first.
	if c.master != nil && !c.master.exited() {
		c.master.stop()
	}
	for i := len(procs) - 1; i >= 0; i-- {
		if !procs[i].exited() {
			procs[i].stop()
		}
	}
	if c.public != "" {
		killProxies(c.public) // proxies outlive a killed master
	}
	checkRaces(c.t)
	if c.t.Failed() {
		keep := os.Getenv("CB_E2E_LOGS") // a directory for the whole logs of failed tests
		for _, p := range procs {
			c.t.Logf("---- log of %s (tail) ----\n%s", p.name, tail(p.log.Name(), p.dumpAt, 60))
			if keep != "" {
				if b, err := os.ReadFile(p.log.Name()); err == nil && os.MkdirAll(keep, 0o755) == nil {
					_ = os.WriteFile(filepath.Join(keep, filepath.Base(p.log.Name())), b, 0o644)
				}
			}
		}
	}
	for _, p := range procs {
		p.log.Close()
	}
}

// dumpStuck makes each live worker of a failed test print its goroutines
// (SIGQUIT: Go's runtime dumps them to the log and exits) and logs those
// stuck on a lock or a channel send (stuckGoroutines): a wedged worker
// shows there, where a log tail shows only that nothing happened.
func dumpStuck(t *testing.T, procs []*proc) {
	for _, p := range procs {
		if !slices.Contains(p.cmd.Args, "worker") || p.exited() {
			continue
		}
		if st, err := p.log.Stat(); err == nil {
			p.dumpAt = st.Size()
		}
		_ = p.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			continue
		}
		b, _ := os.ReadFile(p.log.Name())
		if stuck := stuckGoroutines(string(b[min(p.dumpAt, int64(len(b))):])); stuck != "" {
			t.Logf("---- goroutines of %s waiting for a lock or a channel send for a minute or more ----\n%s", p.name, stuck)
		}
	}
}

// stuckGoroutines is the goroutines of a Go traceback in log waiting a
// minute or more for a lock or to send on a channel ("goroutine 7
// [sync.Mutex.Lock, 2 minutes]:"): what a deadlock looks like, unlike the
// idle loops that wait in select or receive.
func stuckGoroutines(log string) string {
	var out []string
	for _, g := range strings.Split(log, "\n\n") {
		g = strings.TrimSpace(g)
		if i := strings.Index(g, "goroutine "); i >= 0 {
			g = g[i:]
			head, _, _ := strings.Cut(g, "\n")
			if strings.HasSuffix(head, " minutes]:") &&
				(strings.Contains(head, "Lock") || strings.Contains(head, "semacquire") || strings.Contains(head, "chan send")) {
				out = append(out, g)
			}
		}
	}
	return strings.Join(out, "\n\n")
}

// tail is the last n lines of the file at path, of its first upTo bytes
// (0 = all).
func tail(path string, upTo int64, n int) string {
	b, _ := os.ReadFile(path)
	if upTo > 0 && upTo < int64(len(b)) {
		b = b[:upTo]
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// status asks the admin API.
func (c *cluster) status() (*wire.ClusterStatus, error) {
	req, _ := http.NewRequest(http.MethodGet, "http://"+c.admin+"/api/v1/cluster", nil)
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("status: %s: %s", resp.Status, b)
	}
	var st wire.ClusterStatus
	return &st, json.NewDecoder(resp.Body).Decode(&st)
}

func (c *cluster) mustStatus() *wire.ClusterStatus {
	c.t.Helper()
	st, err := c.status()
	if err != nil {
		c.t.Fatal(err)
	}
	return st
}

// waitFor polls the status until cond holds.
func (c *cluster) waitFor(what string, timeout time.Duration, cond func(*wire.ClusterStatus) bool) *wire.ClusterStatus {
	c.t.Helper()
	var got *wire.ClusterStatus
	testutil.Eventually(c.t, timeout, func() error {
		st, err := c.status()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if !cond(st) {
			js, _ := json.MarshalIndent(st, "", " ")
			return fmt.Errorf("%s; last status:\n%s", what, js)
		}
		got = st
		return nil
	})
	return got
}

// admin POSTs to the admin API.
func (c *cluster) adminPost(path string) {
	c.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+c.admin+path, nil)
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		c.t.Fatalf("POST %s: %s", path, resp.Status)
	}
}

func connected(st *wire.ClusterStatus) int {
	n := 0
	for _, w := range st.Workers {
		if w.State == "connected" {
			n++
		}
	}
	return n
}

func instanceWorker(st *wire.ClusterStatus, iid string) string {
	for _, in := range st.Instances {
		if in.ID == iid {
			return in.Worker
		}
	}
	return ""
}

func waitHTTP(t *testing.T, url string, timeout time.Duration) {
	t.Helper()
	testutil.Eventually(t, timeout, func() error {
		resp, err := http.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	})
}

// user is an end user's HTTP client: a cookie jar and no automatic
// redirects, so every hop can be checked.
type user struct {
	t    *testing.T
	base string
	c    *http.Client
}

func newUser(t *testing.T, base string) *user {
	jar, _ := cookiejar.New(nil)
	return &user{t: t, base: base, c: &http.Client{
		Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

type hop struct {
	path, location, worker string
	status                 int
	body                   string
}

func (u *user) get(path string) hop {
	u.t.Helper()
	resp, err := u.c.Get(u.base + path)
	if err != nil {
		u.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return hop{path: path, status: resp.StatusCode, location: resp.Header.Get("Location"),
		worker: resp.Header.Get("X-CB-Worker"), body: string(b)}
}

// open follows the redirect chain from path and returns every hop.
func (u *user) open(path string) []hop {
	u.t.Helper()
	var hops []hop
	for i := 0; i < 10; i++ {
		h := u.get(path)
		hops = append(hops, h)
		if h.status != http.StatusFound {
			return hops
		}
		path = h.location
	}
	u.t.Fatalf("redirect loop: %+v", hops)
	return nil
}

// pids of the children of pid (all threads), from /proc.
func childPids(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(b)) {
			var p int
			fmt.Sscan(s, &p)
			out = append(out, p)
		}
	}
	return out
}

// logContains reports whether a process log has a line containing s.
func logContains(p *proc, s string) bool {
	f, err := os.Open(p.log.Name())
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if bytes.Contains(sc.Bytes(), []byte(s)) {
			return true
		}
	}
	return false
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// raceBinary: when the tests run with -race, the binary under test is
// race-built too, and a race any of its processes reports fails the test
// (races_test.go). CB_E2E_RACE_BINARY=0 builds it without, for speed.
func raceBinary() bool { return testutil.Race && os.Getenv("CB_E2E_RACE_BINARY") != "0" }

func TestStuckGoroutines(t *testing.T) {
	log := `{"level":"debug","message":"client connected"}
SIGQUIT: quit
PC=0x4 m=0 sigcode=0

goroutine 1 [select]:
main.main()

goroutine 7 [sync.Mutex.Lock, 2 minutes]:
sync.(*Mutex).Lock(...)
github.com/cloudbrowser-go/cloudbrowser/worker/engine.(*Hub).Serve(...)

goroutine 9 [chan receive, 1 minutes]:
main.wait()
`
	got := stuckGoroutines(log)
	for _, tc := range []struct {
		goroutine string
		want      bool
	}{{"goroutine 7 [sync.Mutex.Lock, 2 minutes]:", true}, {"goroutine 9 [chan receive, 1 minutes]:", false}, {"goroutine 1 [select]:", false}} {
		if strings.Contains(got, tc.goroutine) != tc.want {
			t.Errorf("%q in the stuck goroutines: %v, want %v\n%s", tc.goroutine, !tc.want, tc.want, got)
		}
	}
}
