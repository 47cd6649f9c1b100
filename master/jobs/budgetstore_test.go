package jobs

import (
	"net/http"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// TestBudgetsSurviveRestart: a 429's pause (with its strikes) and a
// robots.txt Crawl-delay are in state.db, so a master opened on the same
// store holds the site back as before; they leave the store once they ran
// out.
func TestBudgetsSurviveRestart(t *testing.T) {
	e := newEnvOn(t, t.TempDir()+"/state.db", func(c *Config) { c.ReportEvery = time.Hour })
	e.robots["slow.test:80"] = robotsAnswer{body: "User-agent: *\nCrawl-delay: 5\n", status: 200}
	e.q.Workers().Set("w", 4)
	e.check("http://busy.test/a")
	e.check("http://slow.test/a")
	ls := e.pump()
	if len(ls) != 2 {
		t.Fatalf("launched %v", urls(ls))
	}
	for _, l := range ls {
		o := wire.JobOutcome{Status: http.StatusOK, Check: wire.CheckOK}
		if l.run.Spec.URL == "http://busy.test/a" {
			o = wire.JobOutcome{Status: http.StatusTooManyRequests, RetryAfter: "30", Check: wire.CheckUnavailable}
		}
		if err := e.done(l, o); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(e.st.All(BucketBudgets)); n != 2 {
		t.Fatalf("%d budget records stored, want 2: %v", n, e.st.All(BucketBudgets))
	}

	// The master restarts: the pause and the delay come back.
	e.q = e.open(func(c *Config) { c.ReportEvery = time.Hour })
	e.q.Workers().Set("w", 4)
	polite := map[string]wire.BudgetPoliteness{}
	for _, p := range e.q.Stats().Polite {
		polite[p.Budget] = p
	}
	busy, slow := e.dns["busy.test"][0].String()+":80", e.dns["slow.test"][0].String()+":80"
	if p := polite[busy]; !p.PausedUntil.Equal(e.clock.Now().Add(30*time.Second)) || p.Reason != "HTTP 429, Retry-After 30" {
		t.Errorf("the paused budget after a restart: %+v (all %+v)", p, polite)
	}
	if p := polite[slow]; p.CrawlDelayMs != 5000 {
		t.Errorf("the crawl-delayed budget after a restart: %+v", p)
	}
	e.check("http://busy.test/b")
	if ls := e.pump(); len(ls) != 0 {
		t.Fatalf("a paused site got a job after a restart: %v", urls(ls))
	}
	e.clock.Advance(30 * time.Second)
	if ls := e.tick(); len(ls) != 1 {
		t.Fatalf("after the pause: %v", urls(ls))
	}
	// The strike survived: the next 503 without Retry-After doubles.
	e.q.mu.Lock()
	strikes := e.q.sched.budgets[busy].pause.strikes
	e.q.mu.Unlock()
	if strikes != 1 {
		t.Errorf("strikes after a restart: %d, want 1", strikes)
	}

	// Past the pause and the robots.txt TTL, the sweep deletes them (the
	// strike stays until a success).
	e.clock.Advance(2 * DefaultConfig().RobotsTTL)
	e.tick()
	recs := e.st.All(BucketBudgets)
	if _, ok := recs[slow]; ok || len(recs) != 1 {
		t.Errorf("records after they ran out: %v", recs)
	}
}
