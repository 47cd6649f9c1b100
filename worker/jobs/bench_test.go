package jobs

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium"
	"github.com/cloudbrowser-go/cloudbrowser/worker/pool"
	"github.com/cloudbrowser-go/cloudbrowser/worker/seqrun"
)

// freshLeaser makes a new browser for every job and closes it when the job
// gives it back: the baseline pooled browsers are measured against.
type freshLeaser struct{ rt *chromium.Runtime }

type freshLease struct{ b browser.Browser }

func (l freshLease) Browser() browser.Browser { return l.b }

// Return closes the browser synchronously, so its cost is part of the
// job's (the Done report follows Return).
func (l freshLease) Return() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = l.b.Close(ctx)
}

func (l freshLeaser) Lease(ctx context.Context, app string, _ []string) (Lease, error) {
	b, err := l.rt.NewBrowser(ctx, browser.Options{})
	if err != nil {
		return nil, err
	}
	return freshLease{b}, nil
}

// countingReporter signals every Done on a channel.
type countingReporter struct{ done chan wire.JobOutcome }

func (r countingReporter) Working(context.Context, wire.JobProgress) error { return nil }
func (r countingReporter) Ready(context.Context, wire.JobProgress) (time.Duration, error) {
	return 0, nil
}
func (r countingReporter) Started(context.Context, wire.JobStarted) error { return nil }
func (r countingReporter) Done(_ context.Context, o wire.JobOutcome) error {
	r.done <- o
	return nil
}

// phases sums the attempts' timings (ms) of one mode.
type phases struct{ n, lease, navigate, capture, total int64 }

func (p *phases) add(t wire.JobTimings) {
	p.n++
	p.lease += t.LeaseMs
	p.navigate += t.NavigateMs
	p.capture += t.CaptureMs
	p.total += t.TotalMs
}

func (p *phases) report(b *testing.B, mode string) {
	n := float64(max(p.n, 1))
	b.ReportMetric(float64(p.lease)/n, mode+"-lease-ms")
	b.ReportMetric(float64(p.navigate)/n, mode+"-navigate-ms")
	b.ReportMetric(float64(p.capture)/n, mode+"-capture-ms")
	b.ReportMetric(float64(p.total)/n, mode+"-attempt-ms")
}

// runRenders pushes n PNG renders of url through e with every slot busy
// and returns how long they took.
func runRenders(b *testing.B, e *Executor, rep countingReporter, ph *phases, slots, n int, url, tag string) time.Duration {
	b.Helper()
	t0 := time.Now()
	next, running := 0, 0
	start := func() {
		run := wire.JobRun{ID: fmt.Sprintf("%s-%d", tag, next), Attempt: 1,
			Spec: wire.JobSpec{Kind: wire.JobRender, URL: url, Format: wire.FormatPNG, Width: 800, Height: 600}}
		if err := e.Start(run); err != nil {
			b.Fatal(err)
		}
		next++
		running++
	}
	for next < n && running < slots {
		start()
	}
	for running > 0 {
		o := <-rep.done
		running--
		if o.Err != "" || o.Status != 200 || len(o.Body) == 0 {
			b.Fatalf("render %s: err %q status %d, %d bytes", o.ID, o.Err, o.Status, len(o.Body))
		}
		if ph != nil {
			ph.add(o.Timings)
		}
		if next < n {
			start()
		}
	}
	return time.Since(t0)
}

// reuseLeaser leases from the general pool and gives browsers back for
// reuse: reset (chromium's Reset) and lent to the next job, as the
// worker's jobLeaser does.
type reuseLeaser struct{ m *pool.Manager }

type reuseLease struct{ *pool.Lease }

func (l reuseLease) Return() {
	l.Reuse(func(ctx context.Context, b browser.Browser) error {
		return b.(interface{ Reset(context.Context) error }).Reset(ctx)
	})
}

func (l reuseLeaser) Lease(ctx context.Context, app string, _ []string) (Lease, error) {
	pl, err := l.m.Lease(ctx, app, nil)
	if err != nil {
		return nil, err
	}
	return reuseLease{pl}, nil
}

// BenchmarkRenderReusedVsFresh: render throughput on one worker's
// executor (real Chromium, a small local page, PNG 800x600) with browsers
// of the general pool reused between jobs (reset after each, as the
// worker does) vs a new browser per job, closed after it. The pool keeps
// GeneralMin = the slots ready. Each iteration runs -jobs renders each
// way, alternating, so both see the same machine load. Metrics: jobs/s of
// each and reused/fresh (the throughput ratio), and each mode's mean
// attempt phases (lease, navigate, capture, whole attempt; ms).
//
//	go test ./worker/jobs -run '^$' -bench RenderReusedVsFresh -benchtime 3x
func BenchmarkRenderReusedVsFresh(b *testing.B) {
	testutil.NeedChromium(b)
	const slots, perMode = 2, 12
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><title>Bench</title><style>body{font:15px sans-serif;margin:2em}</style><h1>Render me</h1><p>A small page with <b>some</b> text.</p>`)
	}))
	defer site.Close()
	ctx := context.Background()
	rt, err := chromium.New(ctx, chromium.Config{Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close()
	m, err := pool.NewManager(pool.ManagerConfig{
		Types:   map[string]pool.BrowserType{pool.TypeChromium: {Factory: rt, Max: slots * 3, GeneralMin: slots}},
		Runner:  &seqrun.Runner{},
		Logger:  zerolog.Nop(),
		Options: func(string) (browser.Options, error) { return browser.Options{}, nil },
	})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close(context.Background())

	reusedRep := countingReporter{done: make(chan wire.JobOutcome, slots)}
	reused := New(Config{Slots: slots}, reuseLeaser{m}, reusedRep)
	defer reused.Close(context.Background())
	freshRep := countingReporter{done: make(chan wire.JobOutcome, slots)}
	fresh := New(Config{Slots: slots}, freshLeaser{rt}, freshRep)
	defer fresh.Close(context.Background())

	// Warm up both paths (the Chromium process, the pool's first browsers).
	runRenders(b, reused, reusedRep, nil, slots, slots, site.URL, "warm-reused")
	runRenders(b, fresh, freshRep, nil, slots, slots, site.URL, "warm-fresh")

	var tReused, tFresh time.Duration
	var phReused, phFresh phases
	jobs := 0
	i := 0
	for b.Loop() {
		tag := fmt.Sprint(i)
		tReused += runRenders(b, reused, reusedRep, &phReused, slots, perMode, site.URL, "reused-"+tag)
		tFresh += runRenders(b, fresh, freshRep, &phFresh, slots, perMode, site.URL, "fresh-"+tag)
		jobs += perMode
		i++
	}
	reusedRate := float64(jobs) / tReused.Seconds()
	freshRate := float64(jobs) / tFresh.Seconds()
	b.ReportMetric(reusedRate, "reused-jobs/s")
	b.ReportMetric(freshRate, "fresh-jobs/s")
	b.ReportMetric(reusedRate/freshRate, "reused/fresh")
	if st := m.Stats(); st.Reused == 0 {
		b.Fatalf("no browser was reused: %+v", st.Counters)
	}
	phReused.report(b, "reused")
	phFresh.report(b, "fresh")
}
