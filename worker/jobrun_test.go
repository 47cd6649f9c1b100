package worker

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/secret"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// jobRuntime's browsers load every page as a 200 saying "hello".
type jobRuntime struct{ browser.Null }

type jobBrowser struct{ browser.Browser }

func (r *jobRuntime) NewBrowser(ctx context.Context, opts browser.Options) (browser.Browser, error) {
	b, err := r.Null.NewBrowser(ctx, opts)
	if err != nil {
		return nil, err
	}
	return jobBrowser{b}, nil
}

func (b jobBrowser) Load(ctx context.Context, url string, opts browser.LoadOptions) (browser.LoadResult, error) {
	res, err := b.Browser.Load(ctx, url, opts)
	res.Status, res.Title = 200, "hello page"
	return res, err
}

func (b jobBrowser) Evaluate(ctx context.Context, expr string, out any) error {
	*(out.(*string)) = "hello"
	return nil
}

// Reset makes a jobBrowser reusable by the general pool, like chromium's.
func (b jobBrowser) Reset(ctx context.Context) error { return nil }

// jobQueue is the master's JobQueue as the worker reaches it over RMI.
type jobQueue struct {
	mu      sync.Mutex
	working int
	done    []wire.JobOutcome
}

func (q *jobQueue) Working(ctx context.Context, p wire.JobProgress) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.working++
	return nil
}

func (q *jobQueue) Ready(ctx context.Context, p wire.JobProgress) (wire.JobGo, error) {
	return wire.JobGo{}, nil
}

func (q *jobQueue) Started(ctx context.Context, s wire.JobStarted) error { return nil }

func (q *jobQueue) Done(ctx context.Context, o wire.JobOutcome) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.done = append(q.done, o)
	return nil
}

func (q *jobQueue) outcomes() []wire.JobOutcome {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]wire.JobOutcome(nil), q.done...)
}

// TestRunJob: the Application Manager's RunJob runs an attempt in a pooled
// browser and the worker reports its outcome to the master's JobQueue over
// RMI; a job for an app that is not deployed fails permanently; the load
// report carries the job slots.
// jobWorker is a worker with fake browsers whose master connection
// reaches q; mod changes its configuration.
func jobWorker(t *testing.T, q *jobQueue, mod func(*Config)) *Worker {
	t.Helper()
	master, err := rmi.New(rmi.Config{Name: "master", Secret: []byte(testSecret), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := master.Register(wire.ObjJobQueue, q); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveCtx, stop := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { defer close(served); _ = master.Serve(serveCtx, ln) }()
	t.Cleanup(func() { stop(); master.Close(); <-served })

	cfg := Config{ID: "w-test", Secret: testSecret, Master: ln.Addr().String(), Logger: zerolog.Nop(),
		Runtime: &jobRuntime{}, MaxBrowsers: 8}
	if mod != nil {
		mod(&cfg)
	}
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	node, err := rmi.New(rmi.Config{Name: "w-test", Role: secret.RoleWorker, Secret: []byte(testSecret), Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	w.node, w.client = node, node.NewClient(ln.Addr().String(), nil)
	t.Cleanup(func() { w.Close() })
	return w
}

func TestRunJob(t *testing.T) {
	ctx := context.Background()
	q := &jobQueue{}
	w := jobWorker(t, q, nil)

	if s := w.jobs.Stats(); s.Slots != 2 {
		t.Fatalf("job slots %d, want 8/4 = 2", s.Slots)
	}
	if l := w.load(ctx); l.JobSlots != 2 || l.JobsRunning != 0 {
		t.Fatalf("load report jobs %d/%d", l.JobsRunning, l.JobSlots)
	}
	err := w.apps.RunJob(ctx, wire.JobRun{ID: "j1", Attempt: 1, ReportEveryMs: 1000,
		Spec: wire.JobSpec{Kind: wire.JobCheck, URL: "https://example.com/"}})
	if err != nil {
		t.Fatal(err)
	}
	err = w.apps.RunJob(ctx, wire.JobRun{ID: "j2", Attempt: 1, ReportEveryMs: 1000,
		Spec: wire.JobSpec{Kind: wire.JobCheck, URL: "https://example.com/", App: "nope"}})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		if o := q.outcomes(); len(o) < 2 {
			return fmt.Errorf("outcomes so far: %+v", o)
		}
		return nil
	})
	byID := map[string]wire.JobOutcome{}
	for _, o := range q.outcomes() {
		byID[o.ID] = o
	}
	if o := byID["j1"]; o.Err != "" || o.Check != wire.CheckOK || o.Status != 200 || o.Title != "hello page" || o.Hash == "" {
		t.Fatalf("j1 outcome %+v", o)
	}
	if o := byID["j2"]; !o.Permanent || !strings.Contains(o.Err, `app "nope" is not deployed`) {
		t.Fatalf("j2 outcome %+v", o)
	}
	// The slot is freed right after Done.
	testutil.Eventually(t, 30*time.Second, testutil.Cond("job slots freed", func() bool { return w.jobs.Stats().Used == 0 }))
	mfs, err := w.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "," + l.GetName() + "=" + l.GetValue()
			}
			seen[name] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	if seen["cloudbrowser_worker_jobs_total,kind=check,result=ok"] != 1 || seen["cloudbrowser_worker_jobs_total,kind=check,result=failed"] != 1 {
		t.Fatalf("jobs_total metrics: %v", seen)
	}
	if v, ok := seen["cloudbrowser_worker_job_slots,state=free"]; !ok || v != 2 {
		t.Fatalf("job_slots free = %v (present %v)", v, ok)
	}
	// j1's general-pool browser was reset and freed for the next job.
	testutil.Eventually(t, 30*time.Second, testutil.Cond("a browser reused", func() bool { return w.pools.Stats().Reused == 1 }))
	if mfs, err = w.reg.Gather(); err != nil {
		t.Fatal(err)
	}
	reused := -1.0
	for _, mf := range mfs {
		if mf.GetName() == "cloudbrowser_jobs_browsers_reused_total" {
			reused = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if reused != 1 {
		t.Fatalf("cloudbrowser_jobs_browsers_reused_total = %v, want 1", reused)
	}
	if err := w.apps.CancelJob(ctx, "j1", 1); err != nil {
		t.Fatalf("cancel of an ended attempt: %v", err)
	}
}

// TestJobBrowserReuseOff: with NoJobReuse (--job-browser-reuse=false) a
// job's general-pool browser is closed after it, never reset and lent.
func TestJobBrowserReuseOff(t *testing.T) {
	ctx := context.Background()
	q := &jobQueue{}
	w := jobWorker(t, q, func(c *Config) { c.NoJobReuse = true })
	for _, id := range []string{"j1", "j2"} {
		if err := w.apps.RunJob(ctx, wire.JobRun{ID: id, Attempt: 1, ReportEveryMs: 1000,
			Spec: wire.JobSpec{Kind: wire.JobCheck, URL: "https://example.com/"}}); err != nil {
			t.Fatal(err)
		}
		n := len(q.outcomes())
		testutil.Eventually(t, 30*time.Second, testutil.Cond("the job's outcome", func() bool { return len(q.outcomes()) > n }))
	}
	testutil.Eventually(t, 30*time.Second, testutil.Cond("both jobs' browsers closed", func() bool {
		s := w.pools.Stats()
		return s.Returns == 2 && s.Destroyed >= 2
	}))
	if s := w.pools.Stats(); s.Reused != 0 {
		t.Fatalf("reused %d browsers with reuse off (%+v)", s.Reused, s)
	}
}
