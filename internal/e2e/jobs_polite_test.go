package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// TestJobsBackoff: a site answering 429 with Retry-After: 3 gets no
// request in those 3 s: the jobs queued meanwhile wait, say so in their
// politeness, and the status and metrics show the pause.
func TestJobsBackoff(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	needChromium(t)
	site := newJobSite(t, 1, 0)
	h := site.hosts[0]
	h.setRetryAfter("/page/busy", 429, "3")
	c := startCluster(t, clusterOpts{proxies: 0, workers: 1, runtime: "chromium",
		extra: []string{"--jobs-allow", "127.0.0.1/8", "--job-rate", "5"}, worker: site.egressArgs()})
	tok := c.jobsToken()

	busy := submitBatch(c, tok, []wire.JobSpec{{Kind: wire.JobCheck, URL: h.url("/page/busy")}})
	got := c.waitJobs(busy, tok, 2*time.Minute)
	if j := got[busy[0]]; j.State != wire.JobDone || j.Result == nil || j.Result.Status != 429 {
		t.Fatalf("the busy page's check: %+v", j)
	}
	// Queued during the pause.
	var specs []wire.JobSpec
	for i := range 3 {
		specs = append(specs, wire.JobSpec{Kind: wire.JobCheck, URL: h.url(fmt.Sprintf("/page/after%d", i))})
	}
	ids := submitBatch(c, tok, specs)
	if cs := c.mustStatus(); cs.Jobs == nil || len(cs.Jobs.Polite) != 1 || cs.Jobs.Polite[0].PausedUntil.IsZero() ||
		!strings.Contains(cs.Jobs.Polite[0].Reason, "429") {
		t.Errorf("the status during the pause: %+v", cs.Jobs)
	}
	got = c.waitJobs(ids, tok, 2*time.Minute)
	answered := h.startsOf("/page/busy")[0]
	for _, at := range h.allStarts() {
		if at.After(answered) && at.Sub(answered) < 3*time.Second {
			t.Errorf("a request %v after the 429 with Retry-After: 3 (starts %v)", at.Sub(answered), h.gaps())
		}
	}
	first := got[ids[0]]
	if first.State != wire.JobDone || first.Politeness == nil || first.Politeness.BackoffMs <= 0 ||
		!strings.Contains(first.Politeness.BackoffReason, "HTTP 429, Retry-After 3") {
		t.Errorf("a job queued during the pause: %+v politeness %+v", first, first.Politeness)
	}
	if st, _, b := c.api("GET", "/metrics", c.token, nil); st != 200 || !strings.Contains(string(b), `cloudbrowser_jobs_backoffs_total{status="429"} 1`) {
		t.Errorf("metrics: %d\n%s", st, grepLines(string(b), "backoff"))
	}
}

// TestJobsCrawlDelay: robots.txt's Crawl-delay: 2 spaces the site's
// requests at least 2 s apart although the class allows 5 a second.
func TestJobsCrawlDelay(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	needChromium(t)
	site := newJobSite(t, 1, 0)
	h := site.hosts[0]
	h.setRobots("User-agent: *\nCrawl-delay: 2\nDisallow: /page/private\n")
	c := startCluster(t, clusterOpts{proxies: 0, workers: 1, runtime: "chromium",
		extra: []string{"--jobs-allow", "127.0.0.1/8", "--job-rate", "5", "--job-concurrency", "4"}, worker: append(site.egressArgs(), "--job-slots", "4")})
	tok := c.jobsToken()
	var specs []wire.JobSpec
	for i := range 4 {
		specs = append(specs, wire.JobSpec{Kind: wire.JobCheck, URL: h.url(fmt.Sprintf("/page/slow%d", i))})
	}
	ids := submitBatch(c, tok, specs)
	got := c.waitJobs(ids, tok, 2*time.Minute)
	for _, id := range ids {
		if j := got[id]; j.State != wire.JobDone || j.Politeness == nil || j.Politeness.CrawlDelayMs != 2000 {
			t.Errorf("job %+v politeness %+v", j, j.Politeness)
		}
	}
	gaps := h.gaps()
	if len(gaps) != 3 {
		t.Fatalf("the site saw %d gaps, want 3: %v", len(gaps), gaps)
	}
	for _, g := range gaps {
		if g < 2*time.Second {
			t.Errorf("requests %v apart at Crawl-delay: 2 (gaps %v)", g, gaps)
		}
	}
}

// TestJobsRequestsCounted: the site sees what the jobs ask for and nothing
// else: a check fetches its document only (no favicon, no subresource),
// a render its document and the page's own subresources, never a favicon.
func TestJobsRequestsCounted(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	needChromium(t)
	site := newJobSite(t, 1, 0)
	h := site.hosts[0]
	c := startCluster(t, clusterOpts{proxies: 0, workers: 1, runtime: "chromium",
		extra: []string{"--jobs-allow", "127.0.0.1/8"}, worker: site.egressArgs()})
	tok := c.jobsToken()
	ids := submitBatch(c, tok, []wire.JobSpec{
		{Kind: wire.JobCheck, URL: h.url("/page/c1")},
		{Kind: wire.JobCheck, URL: h.url("/page/c2")},
		{Kind: wire.JobRender, URL: h.url("/page/r1"), Format: wire.FormatText},
	})
	got := c.waitJobs(ids, tok, 2*time.Minute)
	for _, id := range ids {
		if got[id].State != wire.JobDone {
			t.Fatalf("job %+v", got[id])
		}
	}
	reqs := h.requests()
	t.Logf("the site saw %v", reqs)
	if reqs["/favicon.ico"] != 0 {
		t.Errorf("jobs fetched /favicon.ico %d times", reqs["/favicon.ico"])
	}
	for _, p := range []string{"/page/c1", "/page/c2", "/page/r1"} {
		if reqs[p] != 1 {
			t.Errorf("%s fetched %d times, want 1", p, reqs[p])
		}
	}
}

// TestJobsOneAllowPolicy: the master's --jobs-allow is the one switch:
// with it alone (no --egress-allow on the worker) jobs to the allowed site
// run; a job to another loopback port ends DISALLOWED at the master, and
// one the allowed site redirects there ends DISALLOWED by the worker's
// guard, which applies the same rules.
func TestJobsOneAllowPolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	needChromium(t)
	site := newJobSite(t, 2, 0)
	allowed, other := site.hosts[0], site.hosts[1]
	c := startCluster(t, clusterOpts{proxies: 0, workers: 1, runtime: "chromium",
		extra: []string{"--jobs-allow", allowed.addr}})
	tok := c.jobsToken()
	ids := submitBatch(c, tok, []wire.JobSpec{
		{Kind: wire.JobCheck, URL: allowed.url("/page/ok")},
		{Kind: wire.JobRender, URL: allowed.url("/page/words"), Format: wire.FormatText},
		{Kind: wire.JobCheck, URL: other.url("/page/nope")},
		{Kind: wire.JobCheck, URL: allowed.url("/go?to=" + other.url("/page/redirected"))},
	})
	got := c.waitJobs(ids, tok, 2*time.Minute)
	check, render, direct, redirected := got[ids[0]], got[ids[1]], got[ids[2]], got[ids[3]]
	if check.State != wire.JobDone || check.Result == nil || check.Result.Check != wire.CheckOK {
		t.Errorf("a check of the allowed site: %+v %+v", check, check.Result)
	}
	if render.State != wire.JobDone {
		t.Errorf("a render of the allowed site: %+v", render)
	}
	if direct.State != wire.JobDisallowed || direct.Disallow != "address" {
		t.Errorf("a check of another port: %+v", direct)
	}
	if redirected.State != wire.JobDisallowed || redirected.Disallow != "egress" || !strings.Contains(redirected.Reason, "egress guard") {
		t.Errorf("a check redirected to another port: %+v", redirected)
	}
	if n := other.requests()["/page/redirected"] + other.requests()["/page/nope"]; n != 0 {
		t.Errorf("the other port was reached %d times", n)
	}
}

// TestJobsEveryRequestWithinLimits: every request of the jobs' browsers
// is held to its host's budget, cluster-wide (two workers, several jobs on
// one host at once): the site, whose pages have two images and a script
// of their own, never sees more requests at once than --job-concurrency
// nor more in any one second than --job-rate, documents and subresources
// alike. A check loads its document only (its script never ran), unless
// it asks for subresources; a render loads them all.
func TestJobsEveryRequestWithinLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	needChromium(t)
	// Each request takes the site 1.5 s: at 2 starts a second, three
	// would overlap without the concurrency bound.
	site := newJobSite(t, 2, 1500*time.Millisecond)
	for _, h := range site.hosts {
		h.setSubresources(true)
	}
	c := startCluster(t, clusterOpts{proxies: 0, workers: 2, runtime: "chromium",
		extra:  []string{"--jobs-allow", "127.0.0.1/8", "--job-concurrency", "2", "--job-rate", "2"},
		worker: append(site.egressArgs(), "--job-slots", "3")})
	tok := c.jobsToken()
	var specs []wire.JobSpec
	for h, host := range site.hosts {
		for i := range 3 {
			specs = append(specs, wire.JobSpec{Kind: wire.JobCheck, URL: host.url(fmt.Sprintf("/page/c%d-%d", h, i))})
		}
		specs = append(specs, wire.JobSpec{Kind: wire.JobCheck, URL: host.url(fmt.Sprintf("/page/s%d", h)), Subresources: true})
		for i := range 3 {
			specs = append(specs, wire.JobSpec{Kind: wire.JobRender, URL: host.url(fmt.Sprintf("/page/r%d-%d", h, i)), Format: wire.FormatHTML})
		}
	}
	ids := submitBatch(c, tok, specs)
	got := c.waitJobs(ids, tok, 4*time.Minute)
	for i, id := range ids {
		j, spec := got[id], specs[i]
		if j.State != wire.JobDone || j.Result == nil || j.Result.Status != 200 {
			t.Errorf("%s: %+v result %+v", spec.URL, j, j.Result)
			continue
		}
		// The page's own script ran only where subresources were loaded.
		scripted := strings.Contains(j.Result.Title, "(scripted)")
		if want := spec.Kind == wire.JobRender || spec.Subresources; scripted != want {
			t.Errorf("%s (%s, subresources %v): title %q", spec.URL, spec.Kind, spec.Subresources, j.Result.Title)
		}
	}
	for h, host := range site.hosts {
		reqs := host.requests()
		for i := range 3 {
			name := fmt.Sprintf("c%d-%d", h, i)
			if n := reqs["/img/"+name+"-1.png"] + reqs["/img/"+name+"-2.png"] + reqs["/js/"+name+".js"]; n != 0 || reqs["/page/"+name] != 1 {
				t.Errorf("check %s without subresources: the site saw %d subresource requests, %d of the page", name, n, reqs["/page/"+name])
			}
			name = fmt.Sprintf("r%d-%d", h, i)
			if reqs["/img/"+name+"-1.png"] != 1 || reqs["/js/"+name+".js"] != 1 {
				t.Errorf("render %s: the site saw %v", name, reqs)
			}
		}
		if name := fmt.Sprintf("s%d", h); reqs["/img/"+name+"-2.png"] != 1 || reqs["/js/"+name+".js"] != 1 {
			t.Errorf("check %s with subresources: the site saw %v", name, reqs)
		}
		if reqs["/favicon.ico"] != 0 {
			t.Errorf("host %d: /favicon.ico fetched %d times", h, reqs["/favicon.ico"])
		}
		peak, perSec, gaps := host.anyStats()
		t.Logf("host %d: %d requests; peak concurrency %d (limit 2), most in one second %d (limit 2); gaps %v", h, len(gaps)+1, peak, perSec, gaps)
		if peak > 2 || perSec > 2 {
			t.Errorf("host %d: every request's politeness exceeded: peak %d, in one second %d; gaps %v", h, peak, perSec, gaps)
		}
	}
}

// TestJobsBackoffSurvivesMasterRestart: a site's 429 pause is in the
// master's state.db: after a kill -9 and a restart during the pause, the
// site still gets no request until its Retry-After has passed, and the
// restarted master shows the pause.
func TestJobsBackoffSurvivesMasterRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	needChromium(t)
	site := newJobSite(t, 1, 0)
	h := site.hosts[0]
	h.setRetryAfter("/page/busy", 429, "8")
	extra := []string{"--jobs-allow", "127.0.0.1/8", "--job-rate", "5"}
	c := startCluster(t, clusterOpts{proxies: 0, workers: 1, runtime: "chromium", extra: extra, worker: site.egressArgs()})
	tok := c.jobsToken()
	busy := submitBatch(c, tok, []wire.JobSpec{{Kind: wire.JobCheck, URL: h.url("/page/busy")}})
	if j := c.waitJobs(busy, tok, 2*time.Minute)[busy[0]]; j.State != wire.JobDone || j.Result == nil || j.Result.Status != 429 {
		t.Fatalf("the busy page's check: %+v", j)
	}
	answered := h.startsOf("/page/busy")[0]

	c.master.kill()
	c.startMaster(clusterOpts{extra: extra})
	if cs := c.mustStatus(); cs.Jobs == nil || len(cs.Jobs.Polite) != 1 || !strings.Contains(cs.Jobs.Polite[0].Reason, "Retry-After 8") {
		t.Errorf("the restarted master's status: %+v", cs.Jobs)
	}
	ids := submitBatch(c, tok, []wire.JobSpec{{Kind: wire.JobCheck, URL: h.url("/page/after0")}, {Kind: wire.JobCheck, URL: h.url("/page/after1")}})
	got := c.waitJobs(ids, tok, 2*time.Minute)
	for _, id := range ids {
		if j := got[id]; j.State != wire.JobDone || j.Politeness == nil || !strings.Contains(j.Politeness.BackoffReason, "HTTP 429, Retry-After 8") {
			t.Errorf("a job after the restart: %+v politeness %+v", j, j.Politeness)
		}
	}
	for _, at := range h.allStarts() {
		if at.After(answered) && at.Sub(answered) < 8*time.Second {
			t.Errorf("a request %v after the 429 with Retry-After: 8, across a master restart (gaps %v)", at.Sub(answered), h.gaps())
		}
	}
}
