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
