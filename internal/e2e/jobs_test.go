package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// apiJob is a job as the API shows it.
type apiJob struct {
	ID       string `json:"id"`
	State    string `json:"state"`
	Reason   string `json:"reason"`
	Disallow string `json:"disallow"`
	Worker   string `json:"worker"`
	Attempts []struct {
		N      int    `json:"n"`
		Worker string `json:"worker"`
		Err    string `json:"err"`
	} `json:"attempts"`
	Spec       wire.JobSpec        `json:"spec"`
	Politeness *wire.JobPoliteness `json:"politeness"`
	Result     *struct {
		Status   int
		FinalURL string
		Title    string
		Hash     string
		Check    string
		Reason   string
	} `json:"result"`
}

func (c *cluster) jobsToken() string {
	c.t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, "data", "jobs.token"))
	if err != nil {
		c.t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// api calls the admin API with token and returns status, headers, body.
func (c *cluster) api(method, path, token string, body any) (int, http.Header, []byte) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, "http://"+c.admin+path, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Timeout: 5 * time.Minute}).Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func (c *cluster) job(id, token string) apiJob {
	c.t.Helper()
	st, _, b := c.api("GET", "/api/v1/jobs/"+id, token, nil)
	if st != 200 {
		c.t.Fatalf("job %s: %d %s", id, st, b)
	}
	var j apiJob
	if err := json.Unmarshal(b, &j); err != nil {
		c.t.Fatal(err)
	}
	return j
}

// waitJobs waits until every job ended and returns them.
func (c *cluster) waitJobs(ids []string, token string, timeout time.Duration) map[string]apiJob {
	c.t.Helper()
	var out map[string]apiJob
	testutil.Eventually(c.t, timeout, func() error {
		out = map[string]apiJob{}
		open := 0
		for _, id := range ids {
			j := c.job(id, token)
			out[id] = j
			if j.State == wire.JobQueued || j.State == wire.JobWorking {
				open++
			}
		}
		if open > 0 {
			return fmt.Errorf("%d of %d jobs still open", open, len(ids))
		}
		return nil
	})
	return out
}

func submitBatch(c *cluster, token string, specs []wire.JobSpec) []string {
	c.t.Helper()
	st, _, b := c.api("POST", "/api/v1/jobs", token, specs)
	if st != http.StatusAccepted {
		c.t.Fatalf("submit: %d %s", st, b)
	}
	var rep struct{ Jobs []apiJob }
	if err := json.Unmarshal(b, &rep); err != nil || len(rep.Jobs) != len(specs) {
		c.t.Fatalf("submit reply: %v %s", err, b)
	}
	ids := make([]string, len(rep.Jobs))
	for i, j := range rep.Jobs {
		ids[i] = j.ID
	}
	return ids
}

// TestJobsPoliteBatch: a batch of checks and renders over three local
// hosts runs on two workers' job slots; the site never sees more than the
// configured concurrency or starts per second per host; robots.txt and the
// address rules refuse what they must; results are what a browser saw.
func TestJobsPoliteBatch(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	needChromium(t)
	site := newJobSite(t, 3, 400*time.Millisecond)
	site.hosts[2].setRobots("User-agent: *\nDisallow: /page/private\n")
	c := startCluster(t, clusterOpts{proxies: 0, workers: 2, runtime: "chromium",
		extra:  []string{"--jobs-allow", "127.0.0.1/8", "--job-concurrency", "2", "--job-rate", "1"},
		worker: append(site.egressArgs(), "--job-slots", "3")})
	tok := c.jobsToken()

	var specs []wire.JobSpec
	for h, host := range site.hosts {
		for i := range 8 {
			specs = append(specs, wire.JobSpec{Kind: wire.JobCheck, URL: host.url(fmt.Sprintf("/page/c%d-%d", h, i))})
		}
	}
	specs = append(specs,
		wire.JobSpec{Kind: wire.JobRender, URL: site.hosts[0].url("/page/shot"), Format: wire.FormatPNG, Width: 800, Height: 600},
		wire.JobSpec{Kind: wire.JobRender, URL: site.hosts[1].url("/page/words"), Format: wire.FormatText},
		wire.JobSpec{Kind: wire.JobCheck, URL: site.hosts[2].url("/page/private")},
		wire.JobSpec{Kind: wire.JobCheck, URL: "http://169.254.169.254/latest/meta-data/"},
	)
	ids := submitBatch(c, tok, specs)
	got := c.waitJobs(ids, tok, 4*time.Minute)

	for i, id := range ids[:24] {
		j := got[id]
		if j.State != wire.JobDone || j.Result == nil || j.Result.Check != wire.CheckOK || j.Result.Status != 200 ||
			!strings.HasPrefix(j.Result.Title, "Page c") || j.Result.Hash == "" {
			t.Errorf("check %d: %+v result %+v", i, j, j.Result)
		}
	}
	shot, words, private, metadata := got[ids[24]], got[ids[25]], got[ids[26]], got[ids[27]]
	if shot.State != wire.JobDone || words.State != wire.JobDone {
		t.Fatalf("renders: %+v / %+v", shot, words)
	}
	st, hdr, b := c.api("GET", "/api/v1/jobs/"+shot.ID+"/result", tok, nil)
	if st != 200 || hdr.Get("Content-Type") != "image/png" {
		t.Fatalf("png result: %d %s", st, hdr.Get("Content-Type"))
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil || img.Bounds().Dx() != 800 || img.Bounds().Dy() != 600 {
		t.Fatalf("png: %v %v", err, img.Bounds())
	}
	st, _, b = c.api("GET", "/api/v1/jobs/"+words.ID+"/result", tok, nil)
	if st != 200 || !strings.Contains(string(b), "Page words on "+site.hosts[1].addr) {
		t.Fatalf("text result: %d %q", st, b)
	}
	if private.State != wire.JobDisallowed || private.Disallow != "robots" || site.hosts[2].count("/page/private") != 0 {
		t.Errorf("robots.txt not obeyed: %+v (site saw %d)", private, site.hosts[2].count("/page/private"))
	}
	if metadata.State != wire.JobDisallowed || metadata.Disallow != "address" {
		t.Errorf("metadata address not refused: %+v", metadata)
	}
	for i, h := range site.hosts {
		peak, perSec := h.peakInFlight(), h.maxStartsPerWindow(time.Second)
		t.Logf("host %d: peak concurrency %d (limit 2), most starts in one second %d (limit 1); gaps %v", i, peak, perSec, h.gaps())
		if peak > 2 || perSec > 1 {
			t.Errorf("host %d: politeness exceeded: peak %d, starts/s %d; gaps between requests %v", i, peak, perSec, h.gaps())
		}
	}

	// Metrics count the jobs (admin token).
	if st, _, b := c.api("GET", "/metrics", c.token, nil); st != 200 || !strings.Contains(string(b), `cloudbrowser_jobs_total{kind="check",outcome="done"} 24`) ||
		!strings.Contains(string(b), "cloudbrowser_job_wait_seconds") || !strings.Contains(string(b), "cloudbrowser_job_slots") {
		t.Errorf("metrics: %d\n%s", st, grepLines(string(b), "cloudbrowser_job"))
	}
	// The jobs token may not administer; the status shows the jobs side.
	if st, _, _ := c.api("GET", "/api/v1/cluster", tok, nil); st != http.StatusForbidden {
		t.Errorf("jobs token on the cluster status: %d, want 403", st)
	}
	cs := c.mustStatus()
	if cs.Jobs == nil || len(cs.Jobs.Workers) != 2 || cs.Jobs.Outcomes[wire.JobDone] < 26 || cs.Jobs.Outcomes[wire.JobDisallowed] < 2 {
		t.Errorf("jobs status: %+v", cs.Jobs)
	}
	if cs.Jobs.Wait.Count < 26 || cs.Jobs.Run.Count < 26 || len(cs.Jobs.Run.Buckets) == 0 {
		t.Errorf("wait/run histograms in the status: %+v / %+v", cs.Jobs.Wait, cs.Jobs.Run)
	}
	for _, w := range cs.Jobs.Workers {
		if w.Slots != 3 {
			t.Errorf("worker %s offers %d slots, want 3", w.Worker, w.Slots)
		}
	}
	// Bad input names the field.
	for _, bad := range []struct {
		spec  wire.JobSpec
		field string
	}{
		{wire.JobSpec{Kind: "fetch", URL: "http://x/"}, "kind"},
		{wire.JobSpec{Kind: wire.JobRender, URL: "not a url"}, "url"},
		{wire.JobSpec{Kind: wire.JobRender, URL: "http://x/", Format: "gif"}, "format"},
		{wire.JobSpec{Kind: wire.JobRender, URL: "http://x/", Width: 99999}, "width"},
	} {
		st, _, b := c.api("POST", "/api/v1/jobs", tok, bad.spec)
		var e struct{ Field string }
		_ = json.Unmarshal(b, &e)
		if st != 400 || e.Field != bad.field {
			t.Errorf("%+v: %d %s, want 400 naming %s", bad.spec, st, b, bad.field)
		}
	}
	if st, _, _ := c.api("GET", "/api/v1/jobs/nope", tok, nil); st != 404 {
		t.Errorf("unknown job: %d", st)
	}
}

// TestRenderCache: identical concurrent synchronous renders cause one
// render; later ones are hits until purged.
func TestRenderCache(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	needChromium(t)
	site := newJobSite(t, 1, 300*time.Millisecond)
	c := startCluster(t, clusterOpts{proxies: 0, workers: 1, runtime: "chromium",
		extra: []string{"--jobs-allow", "127.0.0.1/8"}, worker: site.egressArgs()})
	tok := c.jobsToken()
	q := "/api/v1/render?format=text&url=" + url.QueryEscape(site.hosts[0].url("/page/cached?b=2&a=1&utm_source=x"))

	const n = 10
	var wg sync.WaitGroup
	bodies := make([]string, n)
	statuses := make([]int, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, _, b := c.api("GET", q, tok, nil)
			statuses[i], bodies[i] = st, string(b)
		}()
	}
	wg.Wait()
	for i := range n {
		if statuses[i] != 200 || bodies[i] != bodies[0] || !strings.Contains(bodies[i], "Page cached") {
			t.Fatalf("request %d: %d %q", i, statuses[i], bodies[i])
		}
	}
	if got := site.hosts[0].count("/page/cached"); got != 1 {
		t.Fatalf("%d identical concurrent renders reached the site %d times, want 1", n, got)
	}
	// The same page with its query in another order and without utm_*.
	st, hdr, _ := c.api("GET", "/api/v1/render?format=text&url="+url.QueryEscape(site.hosts[0].url("/page/cached?a=1&b=2")), tok, nil)
	if st != 200 || hdr.Get("X-Cache") != "HIT" || hdr.Get("Age") == "" {
		t.Fatalf("second render: %d X-Cache=%q Age=%q", st, hdr.Get("X-Cache"), hdr.Get("Age"))
	}
	if st, _, b := c.api("POST", "/api/v1/cache/purge", tok, map[string]string{"url": site.hosts[0].url("/page/cached?a=1&b=2")}); st != 200 || !strings.Contains(strings.ReplaceAll(string(b), " ", ""), `"purged":1`) {
		t.Fatalf("purge: %d %s", st, b)
	}
	st, hdr, _ = c.api("GET", q, tok, nil)
	if st != 200 || hdr.Get("X-Cache") != "MISS" || site.hosts[0].count("/page/cached") != 2 {
		t.Fatalf("after purge: %d X-Cache=%q site count %d", st, hdr.Get("X-Cache"), site.hosts[0].count("/page/cached"))
	}
	// The CLI, as a user runs it: render to a file, submit, list, show.
	cli := func(args ...string) string {
		t.Helper()
		full := append(args, "--master", "http://"+c.admin, "--data-dir", filepath.Join(c.dir, "data"))
		out, err := exec.Command(binary, full...).CombinedOutput()
		if err != nil {
			t.Fatalf("cloudbrowser %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	file := filepath.Join(t.TempDir(), "page.txt")
	if out := cli("render", site.hosts[0].url("/page/cached?a=1&b=2"), "--format", "text", "-o", file); !strings.Contains(out, "hit") {
		t.Errorf("render CLI output: %s", out)
	}
	if b, err := os.ReadFile(file); err != nil || !strings.Contains(string(b), "Page cached") {
		t.Fatalf("render CLI file: %v %q", err, b)
	}
	out := cli("jobs", "submit", "--kind", "check", site.hosts[0].url("/page/cli"))
	id := strings.Fields(out)[0]
	c.waitJobs([]string{id}, tok, time.Minute)
	if out := cli("jobs", "show", id); !strings.Contains(out, "done") || !strings.Contains(out, "Page cli") {
		t.Errorf("jobs show: %s", out)
	}
	if out := cli("jobs", "list", "--state", "done"); !strings.Contains(out, id) {
		t.Errorf("jobs list: %s", out)
	}
	if out, err := exec.Command(binary, "render", "ftp://x/", "-o", "-", "--master", "http://"+c.admin, "--data-dir", filepath.Join(c.dir, "data")).CombinedOutput(); err == nil || !strings.Contains(string(out), "URL") {
		t.Errorf("render of a bad URL: %v %s", err, out)
	}

	// The asynchronous API: a render being generated is joined (202 with
	// the job making it and since when); once done, it is a cache hit.
	slow := site.hosts[0].url("/page/async")
	st1, _, b1 := c.api("POST", "/api/v1/jobs", tok, wire.JobSpec{Kind: wire.JobRender, URL: slow, Format: wire.FormatText})
	st2, h2, b2 := c.api("POST", "/api/v1/jobs", tok, wire.JobSpec{Kind: wire.JobRender, URL: slow, Format: wire.FormatText})
	var first, second struct {
		apiJob
		GeneratingSince time.Time `json:"generatingSince"`
	}
	_ = json.Unmarshal(b1, &first)
	_ = json.Unmarshal(b2, &second)
	if st1 != 202 || st2 != 202 || h2.Get("X-Cache") != "GENERATING" || second.ID != first.ID || second.GeneratingSince.IsZero() {
		t.Fatalf("joining a render: %d %s / %d %s %s", st1, b1, st2, h2.Get("X-Cache"), b2)
	}
	c.waitJobs([]string{first.ID}, tok, time.Minute)
	st3, h3, b3 := c.api("POST", "/api/v1/jobs", tok, wire.JobSpec{Kind: wire.JobRender, URL: slow, Format: wire.FormatText})
	var third apiJob
	_ = json.Unmarshal(b3, &third)
	if st3 != 200 || h3.Get("X-Cache") != "HIT" || third.State != wire.JobDone {
		t.Fatalf("render after it was cached: %d %s %s", st3, h3.Get("X-Cache"), b3)
	}
	if st, _, b := c.api("GET", "/api/v1/jobs/"+third.ID+"/result", tok, nil); st != 200 || !strings.Contains(string(b), "Page async") {
		t.Fatalf("cached job's result: %d %q", st, b)
	}
	if site.hosts[0].count("/page/async") != 1 {
		t.Fatalf("three requests for one render reached the site %d times", site.hosts[0].count("/page/async"))
	}

	// A failing render answers its reason; the disallowed one 403.
	if st, _, b := c.api("GET", "/api/v1/render?url="+url.QueryEscape("http://169.254.169.254/"), tok, nil); st != 403 {
		t.Fatalf("disallowed render: %d %s", st, b)
	}
}

// TestPooledRender: a render named after an app uses that app's pool,
// whose browsers the pool's init sequence logged in.
func TestPooledRender(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	needChromium(t)
	c := startCluster(t, clusterOpts{proxies: 0, workers: 1, runtime: "chromium"})
	tok := c.jobsToken()
	st, _, b := c.api("GET", "/api/v1/render?format=text&app=pooldemo&url="+url.QueryEscape("http://pooldemo.app.cloudbrowser.internal/search.html"), tok, nil)
	if st != 200 || !strings.Contains(string(b), "Signed in as demo") {
		t.Fatalf("pooled render: %d %q", st, b)
	}
	// Without the app the general pool's browser is not logged in (and may
	// not reach the app's origin at all).
	st, _, b = c.api("GET", "/api/v1/render?format=text&url="+url.QueryEscape("http://pooldemo.app.cloudbrowser.internal/search.html"), tok, nil)
	if st == 200 && strings.Contains(string(b), "Signed in as demo") {
		t.Fatalf("a render without the app got the pool's login: %q", b)
	}
}

// TestJobsSurviveKills: a worker killed with -9 mid-batch loses no job
// (its attempts run again elsewhere, each job ends DONE once), and a
// master killed with -9 with jobs queued finds them all after a restart.
func TestJobsSurviveKills(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	needChromium(t)
	site := newJobSite(t, 2, 1500*time.Millisecond)
	extra := []string{"--jobs-allow", "127.0.0.1/8", "--job-concurrency", "2", "--job-rate", "4", "--job-report-every", "500ms"}
	c := startCluster(t, clusterOpts{proxies: 0, workers: 2, runtime: "chromium", extra: extra,
		worker: append(site.egressArgs(), "--job-slots", "2")})
	tok := c.jobsToken()

	var specs []wire.JobSpec
	for i := range 12 {
		specs = append(specs, wire.JobSpec{Kind: wire.JobCheck, URL: site.hosts[i%2].url(fmt.Sprintf("/page/k%d", i))})
	}
	ids := submitBatch(c, tok, specs)
	deadline := time.Now().Add(2 * time.Minute)
	for killed := false; !killed; {
		for i, id := range ids {
			// Working there, and its page is being loaded: the worker has
			// it (not just the master's hand-over in flight).
			j := c.job(id, tok)
			if j.State == wire.JobWorking && j.Worker == "w-e2e1" && site.hosts[i%2].count(fmt.Sprintf("/page/k%d", i)) > 0 {
				c.workers["w-e2e1"].kill()
				killed = true
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no job ever ran on w-e2e1")
		}
		time.Sleep(50 * time.Millisecond)
	}
	got := c.waitJobs(ids, tok, 3*time.Minute)
	moved := 0
	for _, id := range ids {
		j := got[id]
		if j.State != wire.JobDone || j.Result == nil || j.Result.Check != wire.CheckOK {
			t.Errorf("job %s after the worker's kill: %+v", id, j)
		}
		if len(j.Attempts) > 1 {
			moved++
			if last := j.Attempts[len(j.Attempts)-1]; last.Worker != "w-e2e2" || last.Err != "" {
				t.Errorf("job %s: last attempt %+v", id, last)
			}
		}
	}
	if moved == 0 {
		t.Error("no job was retried after its worker was killed")
	}
	t.Logf("%d jobs retried on the surviving worker", moved)
	if n := c.mustStatus().Jobs.Outcomes[wire.JobDone]; n != int64(len(ids)) {
		t.Errorf("jobs counted done: %d, want exactly %d", n, len(ids))
	}

	// kill -9 the master with jobs queued: none is lost.
	specs = specs[:0]
	for i := range 8 {
		specs = append(specs, wire.JobSpec{Kind: wire.JobCheck, URL: site.hosts[0].url(fmt.Sprintf("/page/m%d", i))})
	}
	ids = submitBatch(c, tok, specs)
	c.master.kill()
	c.startMaster(clusterOpts{extra: extra})
	got = c.waitJobs(ids, tok, 3*time.Minute)
	for _, id := range ids {
		if j := got[id]; j.State != wire.JobDone || j.Result == nil || j.Result.Check != wire.CheckOK {
			t.Errorf("job %s after the master's kill: %+v", id, j)
		}
	}
}

// TestMonitors: a monitor records every check; its state change (the site
// starts failing) moves lastStateChange, shows in the filtered list and on
// the status, and marks the URL's cached renders stale.
func TestMonitors(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	needChromium(t)
	site := newJobSite(t, 1, 0)
	c := startCluster(t, clusterOpts{proxies: 0, workers: 1, runtime: "chromium",
		extra: []string{"--jobs-allow", "127.0.0.1/8"}, worker: site.egressArgs()})
	tok := c.jobsToken()
	page := site.hosts[0].url("/page/watched")

	if st, _, b := c.api("POST", "/api/v1/monitors", tok, map[string]any{"url": page, "interval": "5s"}); st != 400 || !strings.Contains(string(b), "interval") {
		t.Fatalf("too short an interval: %d %s", st, b)
	}
	st, _, b := c.api("POST", "/api/v1/monitors", tok, map[string]any{"url": page, "interval": "10s"})
	if st != 201 {
		t.Fatalf("add monitor: %d %s", st, b)
	}
	var mon struct {
		ID              string
		State           string
		LastStateChange time.Time
		Checks          int
	}
	_ = json.Unmarshal(b, &mon)
	get := func() {
		st, _, b := c.api("GET", "/api/v1/monitors/"+mon.ID, tok, nil)
		if st != 200 {
			t.Fatalf("monitor: %d %s", st, b)
		}
		_ = json.Unmarshal(b, &mon)
	}
	waitFor := func(what string, cond func() bool) {
		testutil.Eventually(t, 90*time.Second, func() error {
			if get(); !cond() {
				return fmt.Errorf("%s: monitor %+v", what, mon)
			}
			return nil
		})
	}
	waitFor("the first check", func() bool { return mon.State == wire.CheckOK })
	firstChange := mon.LastStateChange
	// A cached render of the page, to be marked stale by the change.
	render := "/api/v1/render?format=text&url=" + url.QueryEscape(page)
	if st, _, _ := c.api("GET", render, tok, nil); st != 200 {
		t.Fatalf("render: %d", st)
	}
	waitFor("a second check", func() bool { return mon.Checks >= 2 })
	if !mon.LastStateChange.Equal(firstChange) || mon.State != wire.CheckOK {
		t.Fatalf("an unchanged check moved lastStateChange: %+v (first %v)", mon, firstChange)
	}
	site.hosts[0].setStatus("/page/watched", 503)
	waitFor("the state change", func() bool { return mon.State == wire.CheckUnavailable })
	if !mon.LastStateChange.After(firstChange) {
		t.Fatalf("lastStateChange did not move: %+v", mon)
	}
	st, _, b = c.api("GET", "/api/v1/monitors?state=unavailable", tok, nil)
	if st != 200 || !strings.Contains(string(b), mon.ID) {
		t.Fatalf("filtered list: %d %s", st, b)
	}
	if st, _, b := c.api("GET", "/api/v1/monitors?state=ok", tok, nil); st != 200 || strings.Contains(string(b), mon.ID) {
		t.Fatalf("ok list still has the monitor: %d %s", st, b)
	}
	js := c.mustStatus().Jobs
	if js == nil || len(js.Changes) == 0 || js.Changes[0].To != wire.CheckUnavailable || js.Monitors[wire.CheckUnavailable] != 1 {
		t.Fatalf("status does not show the change: %+v", js)
	}
	// Marked stale right after the monitor's new state is stored (the
	// hook runs outside the queue's lock): at most a moment later.
	testutil.Eventually(t, 10*time.Second, func() error {
		if st, hdr, _ := c.api("GET", render, tok, nil); st != 200 || hdr.Get("X-Cache") == "HIT" {
			return fmt.Errorf("the render cached before the change was served as fresh: %d %s", st, hdr.Get("X-Cache"))
		}
		return nil
	})
	if st, _, _ := c.api("DELETE", "/api/v1/monitors/"+mon.ID, tok, nil); st != 204 {
		t.Fatalf("remove: %d", st)
	}
	if st, _, _ := c.api("GET", "/api/v1/monitors/"+mon.ID, tok, nil); st != 404 {
		t.Fatalf("removed monitor: %d", st)
	}
}

// grepLines keeps the lines of s containing sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestRenderMonitorWarmsCache: a scheduled render (monitor add --kind
// render) fills the render cache under the signature an on-demand render
// of the same page has: the next GET /api/v1/render is a HIT, and the site
// was fetched once, by the monitor.
func TestRenderMonitorWarmsCache(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	needChromium(t)
	site := newJobSite(t, 1, 0)
	c := startCluster(t, clusterOpts{proxies: 0, workers: 1, runtime: "chromium",
		extra: []string{"--jobs-allow", "127.0.0.1/8"}, worker: site.egressArgs()})
	tok := c.jobsToken()
	page := site.hosts[0].url("/page/scheduled")
	st, _, b := c.api("POST", "/api/v1/monitors", tok, map[string]any{"url": page, "interval": "1h", "kind": "render", "format": "text"})
	if st != 201 {
		t.Fatalf("add render monitor: %d %s", st, b)
	}
	var mon struct {
		ID     string
		Checks int
	}
	_ = json.Unmarshal(b, &mon)
	testutil.Eventually(t, 90*time.Second, func() error {
		st, _, b := c.api("GET", "/api/v1/monitors/"+mon.ID, tok, nil)
		if st != 200 {
			return fmt.Errorf("monitor: %d %s", st, b)
		}
		_ = json.Unmarshal(b, &mon)
		if mon.Checks < 1 {
			return fmt.Errorf("no scheduled render yet: %s", b)
		}
		return nil
	})
	st, hdr, body := c.api("GET", "/api/v1/render?format=text&url="+url.QueryEscape(page), tok, nil)
	if st != 200 || hdr.Get("X-Cache") != "HIT" || !strings.Contains(string(body), "Page scheduled") {
		t.Fatalf("render after the scheduled one: %d X-Cache=%q %.200s", st, hdr.Get("X-Cache"), body)
	}
	if n := site.hosts[0].count("/page/scheduled"); n != 1 {
		t.Fatalf("the site saw the page %d times, want 1 (the monitor's render)", n)
	}
}
