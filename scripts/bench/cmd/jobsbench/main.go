// Command jobsbench measures the jobs feature on a real
// cluster: it starts the cloudbrowser binary (a master with --proxies 0
// and one chromium worker, data in a temporary directory, loopback
// addresses) and serves a local site whose hosts (one loopback port each)
// count the page requests they get.
//
//	jobsbench -bin ./cloudbrowser -mode cache -requests 15 -concurrent 100
//	jobsbench -bin ./cloudbrowser -mode politeness -checks 200
//
// cache: p50 of synchronous GET /api/v1/render misses (each a new URL)
// vs hits (the same URLs again) and their ratio; then -concurrent
// identical requests for a new URL at once: how many page requests the
// site got (the cache must make it 1) and the p50/max latency.
//
// politeness: -checks check jobs in one batch over 5 hosts with different
// per-host limits (--job-classes); per host the site's peak concurrency
// and most starts in any one-second window vs the limits, and the time
// from the submission to the host's last page vs the ideal schedule for
// its limits (efficiency = ideal / measured).
//
// Output: tab-separated lines "name value [unit]".
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	readyfile "github.com/cloudbrowser-go/cloudbrowser/internal/ready"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/jobs"
)

func main() {
	bin := flag.String("bin", "cloudbrowser", "the cloudbrowser binary")
	mode := flag.String("mode", "cache", "cache | politeness")
	requests := flag.Int("requests", 15, "cache: misses (and as many hits) measured")
	concurrent := flag.Int("concurrent", 100, "cache: identical concurrent requests")
	checks := flag.Int("checks", 200, "politeness: checks over the 5 hosts")
	delay := flag.Duration("delay", 200*time.Millisecond, "politeness: the site's answer time per page")
	slots := flag.Int("slots", 8, "job slots of the worker")
	keep := flag.Bool("keep", false, "keep the data directory and logs")
	flag.Parse()
	log.SetFlags(0)

	dir, err := os.MkdirTemp("", "jobsbench-")
	if err != nil {
		log.Fatal(err)
	}
	if !*keep {
		defer os.RemoveAll(dir)
	}
	nHosts := 1
	if *mode == "politeness" {
		nHosts = len(politeHosts)
	}
	siteDelay := time.Duration(0)
	if *mode == "politeness" {
		siteDelay = *delay
	}
	s := newSite(nHosts, siteDelay)
	defer s.close()

	var masterExtra []string
	if *mode == "politeness" {
		var rules []map[string]any
		for i, h := range s.hosts {
			rules = append(rules, map[string]any{"pattern": h.addr, "limits": map[string]any{
				"concurrent": politeHosts[i].Concurrent, "startsPerSec": politeHosts[i].StartsPerSec}})
		}
		b, _ := json.Marshal(rules)
		path := filepath.Join(dir, "classes.json")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			log.Fatal(err)
		}
		masterExtra = append(masterExtra, "--job-classes", path)
	}
	c, err := startCluster(*bin, dir, masterExtra, append(s.egressArgs(), "--job-slots", fmt.Sprint(*slots)))
	if c != nil {
		defer c.stop()
	}
	if err != nil {
		log.Fatal(err)
	}
	switch *mode {
	case "cache":
		err = benchCache(c, s.hosts[0], *requests, *concurrent)
	case "politeness":
		err = benchPoliteness(c, s, *checks, *delay)
	default:
		err = fmt.Errorf("-mode: %q is not cache or politeness", *mode)
	}
	if err != nil {
		c.stop()
		c.dumpLogs()
		if !*keep {
			os.RemoveAll(dir) // log.Fatal skips the deferred removal
		}
		log.Fatal(err)
	}
}

// ---- the site ----

type site struct {
	hosts []*host
	srvs  []*http.Server
}

type host struct {
	addr  string
	delay time.Duration

	mu       sync.Mutex
	inFlight int
	peak     int
	starts   []time.Time
	lastEnd  time.Time
	served   map[string]int
}

func newSite(n int, delay time.Duration) *site {
	s := &site{}
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			log.Fatal(err)
		}
		h := &host{addr: ln.Addr().String(), delay: delay, served: map[string]int{}}
		srv := &http.Server{Handler: h}
		go func() { _ = srv.Serve(ln) }()
		s.hosts, s.srvs = append(s.hosts, h), append(s.srvs, srv)
	}
	return s
}

func (s *site) close() {
	for _, srv := range s.srvs {
		_ = srv.Close()
	}
}

func (s *site) egressArgs() []string {
	var out []string
	for _, h := range s.hosts {
		out = append(out, "--egress-allow", h.addr)
	}
	return out
}

// ServeHTTP counts /page/... requests (the documents jobs load); anything
// else (robots.txt, favicon) is a 404 and not counted.
func (h *host) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.URL.Path, "/page/") {
		http.NotFound(w, r)
		return
	}
	h.mu.Lock()
	h.inFlight++
	h.peak = max(h.peak, h.inFlight)
	h.starts = append(h.starts, time.Now())
	h.served[r.URL.RequestURI()]++
	h.mu.Unlock()
	time.Sleep(h.delay)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprintf(w, `<!doctype html><title>Page %s</title><style>body{font:15px sans-serif;margin:2em}</style><h1>Page %s</h1><p>Some <b>text</b> on %s.</p>`,
		r.URL.Path, r.URL.RequestURI(), h.addr)
	h.mu.Lock()
	h.inFlight--
	h.lastEnd = time.Now()
	h.mu.Unlock()
}

func (h *host) url(path string) string { return "http://" + h.addr + path }

func (h *host) count(uri string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.served[uri]
}

// maxStartsIn is the most page requests that started within any window
// [t, t+d).
func (h *host) maxStartsIn(d time.Duration) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return jobs.MaxStartsIn(h.starts, d)
}

// ---- the cluster ----

type cluster struct {
	dir, admin, token, jobsToken string
	procs                        []*exec.Cmd
	logs                         []string
	stopOnce                     sync.Once
}

func startCluster(bin, dir string, masterExtra, workerExtra []string) (*cluster, error) {
	c := &cluster{dir: dir}
	data := filepath.Join(dir, "data")
	ready := filepath.Join(dir, "master.ready")
	const any = "127.0.0.1:0"
	if err := c.start(bin, "master", append([]string{"--ready-file", ready, "master", "--data-dir", data, "--rmi", any, "--gossip", any,
		"--admin", any, "--listen", any, "--proxies", "0", "--jobs-allow", "127.0.0.1/8"}, masterExtra...)); err != nil {
		return c, err
	}
	var rmi string
	if err := waitFor(30*time.Second, "the master", func() bool {
		r, err := readyfile.Read(ready)
		if err != nil {
			return false
		}
		c.admin, rmi = r.Addrs["admin"], r.Addrs["rmi"]
		resp, err := http.Get("http://" + c.admin + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}); err != nil {
		return c, err
	}
	for _, f := range []struct {
		name string
		dst  *string
	}{{"admin.token", &c.token}, {"jobs.token", &c.jobsToken}} {
		b, err := os.ReadFile(filepath.Join(data, f.name))
		if err != nil {
			return c, err
		}
		*f.dst = strings.TrimSpace(string(b))
	}
	if err := c.start(bin, "worker", append([]string{"worker", "--master", rmi, "--secret-file", filepath.Join(data, "worker.key"),
		"--id", "w-bench", "--listen", "127.0.0.1:0", "--runtime", "chromium"}, workerExtra...)); err != nil {
		return c, err
	}
	err := waitFor(60*time.Second, "the worker's job slots", func() bool {
		var st wire.ClusterStatus
		code, _, b, err := c.api(context.Background(), "GET", "/api/v1/cluster", c.token, nil)
		if err != nil || code != 200 || json.Unmarshal(b, &st) != nil {
			return false
		}
		return st.Jobs != nil && len(st.Jobs.Workers) == 1 && st.Jobs.Workers[0].Slots > 0
	})
	return c, err
}

func (c *cluster) start(bin, name string, args []string) error {
	logPath := filepath.Join(c.dir, name+".log")
	lf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	c.procs, c.logs = append(c.procs, cmd), append(c.logs, logPath)
	return nil
}

// stop ends the master first (so the worker does not wait for it), then
// the worker; SIGKILL after 30 s.
func (c *cluster) stop() {
	c.stopOnce.Do(func() {
		for _, p := range c.procs {
			_ = p.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = p.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				_ = p.Process.Kill()
				<-done
			}
		}
	})
}

func (c *cluster) dumpLogs() {
	for _, p := range c.logs {
		b, _ := os.ReadFile(p)
		lines := strings.Split(string(b), "\n")
		log.Printf("---- %s (tail) ----\n%s", p, strings.Join(lines[max(0, len(lines)-40):], "\n"))
	}
}

var httpClient = &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 200}}

func (c *cluster) api(ctx context.Context, method, path, token string, body any) (int, http.Header, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+c.admin+path, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b, err
}

func waitFor(timeout time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// ---- cache ----

// render asks for a synchronous PNG render of u and checks the answer.
func (c *cluster) render(u, wantCache string) (time.Duration, error) {
	t0 := time.Now()
	code, hdr, b, err := c.api(context.Background(), "GET", "/api/v1/render?format=png&url="+url.QueryEscape(u), c.jobsToken, nil)
	d := time.Since(t0)
	if err != nil {
		return d, err
	}
	if code != 200 || hdr.Get("Content-Type") != "image/png" || len(b) == 0 {
		return d, fmt.Errorf("render %s: %d %s %.200q", u, code, hdr.Get("Content-Type"), b)
	}
	if wantCache != "" && hdr.Get("X-Cache") != wantCache {
		return d, fmt.Errorf("render %s: X-Cache %q, want %q", u, hdr.Get("X-Cache"), wantCache)
	}
	return d, nil
}

func benchCache(c *cluster, h *host, n, conc int) error {
	// One render first: the Chromium process and the pool's first browser.
	if _, err := c.render(h.url("/page/warm"), ""); err != nil {
		return err
	}
	var miss, hit []time.Duration
	for i := range n {
		u := h.url(fmt.Sprintf("/page/p?n=%d", i))
		d, err := c.render(u, "MISS")
		if err != nil {
			return err
		}
		miss = append(miss, d)
		// The hit right after its miss, so both see the same machine load.
		if d, err = c.render(u, "HIT"); err != nil {
			return err
		}
		hit = append(hit, d)
	}
	pm, ph := pct(miss, 50), pct(hit, 50)
	fmt.Printf("miss_p50\t%.1f\tms\n", ms(pm))
	fmt.Printf("hit_p50\t%.2f\tms\n", ms(ph))
	fmt.Printf("hit/miss\t%.4f\n", float64(ph)/float64(pm))

	path := "/page/burst"
	u := h.url(path)
	lat := make([]time.Duration, conc)
	errs := make([]error, conc)
	var wg sync.WaitGroup
	startGate := make(chan struct{})
	for i := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-startGate
			lat[i], errs[i] = c.render(u, "")
		}()
	}
	close(startGate)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Printf("concurrent_requests\t%d\n", conc)
	fmt.Printf("concurrent_site_requests\t%d\n", h.count(path))
	fmt.Printf("concurrent_p50\t%.1f\tms\n", ms(pct(lat, 50)))
	fmt.Printf("concurrent_max\t%.1f\tms\n", ms(pct(lat, 100)))
	fmt.Printf("concurrent_max/miss_p50\t%.2f\n", float64(pct(lat, 100))/float64(pm))
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// pct is the p-th percentile (nearest rank).
func pct(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// ---- politeness ----

type limits struct {
	Concurrent   int
	StartsPerSec float64
}

// politeHosts: five local hosts with different limits.
var politeHosts = []limits{{2, 1}, {3, 2}, {2, 1}, {2, 1.5}, {4, 2}}

// ideal is the shortest time n pages of d each can take under l (as
// master/jobs's idealSchedule): starts 1/rate apart, at most Concurrent
// at once.
func ideal(n int, l limits, d time.Duration) time.Duration {
	gap := time.Duration(float64(time.Second) / l.StartsPerSec)
	rate := time.Duration(max(n-1, 0))*gap + d
	conc := time.Duration((n+l.Concurrent-1)/l.Concurrent) * d
	return max(rate, conc)
}

func benchPoliteness(c *cluster, s *site, n int, d time.Duration) error {
	specs := make([]wire.JobSpec, n)
	per := make([]int, len(s.hosts))
	for i := range n {
		h := i % len(s.hosts)
		per[h]++
		specs[i] = wire.JobSpec{Kind: wire.JobCheck, URL: s.hosts[h].url(fmt.Sprintf("/page/c%d", i))}
	}
	t0 := time.Now()
	code, _, b, err := c.api(context.Background(), "POST", "/api/v1/jobs", c.jobsToken, specs)
	if err != nil {
		return err
	}
	if code != http.StatusAccepted {
		return fmt.Errorf("submit: %d %s", code, b)
	}
	var rep struct {
		Jobs []struct{ ID, State string }
	}
	if err := json.Unmarshal(b, &rep); err != nil || len(rep.Jobs) != n {
		return fmt.Errorf("submit reply: %v %.300s", err, b)
	}
	// Wait for every job to end (polling the jobs one by one would load
	// the master: poll the last of each host's, then verify all).
	var phases [5][]time.Duration // lease, navigate, wait, capture, total
	open := func() (int, error) {
		left := 0
		for i := range phases {
			phases[i] = phases[i][:0]
		}
		for _, j := range rep.Jobs {
			code, _, b, err := c.api(context.Background(), "GET", "/api/v1/jobs/"+j.ID, c.jobsToken, nil)
			if err != nil || code != 200 {
				return 0, fmt.Errorf("job %s: %d %v %s", j.ID, code, err, b)
			}
			var got struct {
				State  string
				Result *wire.JobOutcome `json:"result"`
			}
			_ = json.Unmarshal(b, &got)
			if r := got.Result; r != nil {
				for i, v := range []int64{r.Timings.LeaseMs, r.Timings.NavigateMs, r.Timings.WaitMs, r.Timings.CaptureMs, r.Timings.TotalMs} {
					phases[i] = append(phases[i], time.Duration(v)*time.Millisecond)
				}
			}
			switch got.State {
			case string(wire.JobQueued), string(wire.JobWorking):
				left++
			case string(wire.JobDone):
			default:
				return 0, fmt.Errorf("job %s ended %s: %s", j.ID, got.State, b)
			}
		}
		return left, nil
	}
	deadline := time.Now().Add(10 * time.Minute)
	for {
		done := 0
		for _, h := range s.hosts {
			h.mu.Lock()
			done += len(h.starts)
			h.mu.Unlock()
		}
		if done >= n {
			left, err := open()
			if err != nil {
				return err
			}
			if left == 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("jobs still open after 10 minutes (%d pages served)", done)
		}
		time.Sleep(500 * time.Millisecond)
	}
	var makespan, idealMakespan time.Duration
	worst := 1.0
	exceeded := false
	fmt.Printf("host\tlimit_conc\tpeak_conc\tlimit_starts/s\tmax_starts_in_1s\ttime_s\tideal_s\tefficiency\n")
	for i, h := range s.hosts {
		l := politeHosts[i]
		h.mu.Lock()
		total, peak, pages := h.lastEnd.Sub(t0), h.peak, len(h.starts)
		h.mu.Unlock()
		if pages != per[i] {
			return fmt.Errorf("host %d served %d pages, want %d (one per job)", i, pages, per[i])
		}
		perSec := h.maxStartsIn(time.Second)
		id := ideal(per[i], l, d)
		eff := float64(id) / float64(total)
		worst = min(worst, eff)
		makespan, idealMakespan = max(makespan, total), max(idealMakespan, id)
		if peak > l.Concurrent || perSec > int(math.Ceil(l.StartsPerSec)) {
			exceeded = true
		}
		fmt.Printf("h%d\t%d\t%d\t%.1f\t%d\t%.2f\t%.2f\t%.3f\n", i, l.Concurrent, peak, l.StartsPerSec, perSec,
			total.Seconds(), id.Seconds(), eff)
	}
	for i, name := range []string{"lease", "navigate", "wait", "capture", "attempt"} {
		if len(phases[i]) > 0 {
			fmt.Printf("%s_p50/max_ms\t%.0f/%.0f\n", name, ms(pct(phases[i], 50)), ms(pct(phases[i], 100)))
		}
	}
	fmt.Printf("makespan_s\t%.2f\n", makespan.Seconds())
	fmt.Printf("ideal_s\t%.2f\n", idealMakespan.Seconds())
	fmt.Printf("efficiency\t%.3f\n", float64(idealMakespan)/float64(makespan))
	fmt.Printf("worst_host_efficiency\t%.3f\n", worst)
	fmt.Printf("limits_exceeded\t%v\n", exceeded)
	if exceeded {
		return errors.New("a host saw more than its limits allow")
	}
	return nil
}
