package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/egress"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/jobs"
	"github.com/cloudbrowser-go/cloudbrowser/worker/pool"
)

// Jobs: the master pushes attempts through the Application
// Manager's RunJob; worker/jobs runs them in pooled browsers and reports
// to the master's JobQueue.

// RunJob takes one job attempt if a job slot is free (RMI, from the
// master). It answers at once; the attempt reports Working and Done to the
// master's wire.ObjJobQueue.
func (a *AppManager) RunJob(ctx context.Context, run wire.JobRun) error {
	if err := a.w.jobs.Start(run); err != nil {
		return fmt.Errorf("worker %s: %w", a.w.id, err)
	}
	return nil
}

// CancelJob stops a running attempt (RMI, from the master); no Done follows.
func (a *AppManager) CancelJob(ctx context.Context, id string, attempt int) error {
	return a.w.jobs.Cancel(id, attempt)
}

// jobLeaser lends the executor browsers the way instances get them: the
// app's specific pool when it has one, else a blank general browser given
// the app's egress rules and navigation policy.
type jobLeaser struct {
	w *Worker
	// reused counts general-pool browsers reset after a job for the next
	// one (cloudbrowser_jobs_browsers_reused_total).
	reused prometheus.Counter
}

func (l jobLeaser) Lease(ctx context.Context, app string, allow []string) (jobs.Lease, error) {
	w := l.w
	var policy func(string) bool
	if app != "" {
		a, ok := w.catalog.app(app)
		if !ok {
			return nil, fmt.Errorf("app %q is not deployed on this worker: %w", app, jobs.ErrPermanent)
		}
		policy = w.navigationPolicy(a)
	}
	pc := w.catalog.poolConfig(app)
	if app == "" {
		pc = nil
	}
	t0 := time.Now()
	lease, err := w.pools.Lease(ctx, app, pc)
	outcome := "ok"
	if err != nil {
		outcome = "failed"
	}
	w.leaseSeconds.WithLabelValues("job", outcome).Observe(time.Since(t0).Seconds())
	if err != nil {
		return nil, err
	}
	b := lease.Browser()
	e, _ := b.Egress().(*egress.Endpoint)
	if e != nil {
		// The job's own rules (the master's --jobs-allow) on top of the
		// app's, for this job only.
		e.Assign(jobTenant(w.tenant(app), allow))
	}
	if !lease.Specific() {
		if err := b.SetPolicy(ctx, policy); err != nil {
			lease.Return()
			return nil, fmt.Errorf("navigation policy: %w", err)
		}
		if w.cfg.NoJobReuse {
			return lease, nil
		}
		return reusedLease{Lease: lease, reset: l.reset}, nil
	}
	if e == nil {
		return lease, nil
	}
	// An app's pooled browser goes back to its users with the app's own
	// rules only.
	return restoredLease{Lease: lease, restore: func() { e.Assign(w.tenant(app)) }}, nil
}

// resetter is a browser that can be made blank again (chromium's).
type resetter interface {
	Reset(ctx context.Context) error
}

// reset makes a general-pool browser a job returns as blank as a new one
// for the pool to lend again (docs/jobs.md, "Browser reuse"): the
// browser's own reset (cookies, storage, cache, permissions, pages,
// navigation policy, viewport), then the egress tenant of a blank browser
// instead of the job's rules.
func (l jobLeaser) reset(ctx context.Context, b browser.Browser) error {
	r, ok := b.(resetter)
	if !ok {
		return errors.New("browser cannot be reset")
	}
	if err := r.Reset(ctx); err != nil {
		return err
	}
	if e, ok := b.Egress().(*egress.Endpoint); ok {
		e.Assign(l.w.tenant(""))
	}
	l.reused.Inc()
	return nil
}

// reusedLease gives a general-pool browser back for reuse (pool's
// Lease.Reuse) instead of closing it.
type reusedLease struct {
	*pool.Lease
	reset pool.ResetFunc
}

func (l reusedLease) Return() { l.Lease.Reuse(l.reset) }

// jobTenant is t with a job's egress rules added; a rule that does not
// parse is skipped (the master checked them at start).
func jobTenant(t *egress.Tenant, allow []string) *egress.Tenant {
	for _, s := range allow {
		if r, err := egress.ParseRule(s); err == nil {
			t.Allow = append(t.Allow, r)
		}
	}
	return t
}

// restoredLease gives an app's pooled browser its own egress rules back
// as it returns.
type restoredLease struct {
	*pool.Lease
	restore func()
}

func (l restoredLease) Return() {
	l.restore()
	l.Lease.Return()
}

// jobReporter sends the executor's reports over the master connection.
type jobReporter struct{ w *Worker }

var errNoMaster = errors.New("not connected to the master")

func (r jobReporter) Working(ctx context.Context, p wire.JobProgress) error {
	if r.w.client == nil {
		return errNoMaster
	}
	return contract.JobQueueClient{C: r.w.client}.Working(ctx, p)
}

func (r jobReporter) Ready(ctx context.Context, p wire.JobProgress) (time.Duration, error) {
	if r.w.client == nil {
		return 0, errNoMaster
	}
	g, err := contract.JobQueueClient{C: r.w.client}.Ready(ctx, p)
	if err != nil {
		return 0, err
	}
	return time.Duration(g.WaitMs) * time.Millisecond, nil
}

func (r jobReporter) Started(ctx context.Context, s wire.JobStarted) error {
	if r.w.client == nil {
		return errNoMaster
	}
	return contract.JobQueueClient{C: r.w.client}.Started(ctx, s)
}

func (r jobReporter) Done(ctx context.Context, o wire.JobOutcome) error {
	if r.w.client == nil {
		return errNoMaster
	}
	return contract.JobQueueClient{C: r.w.client}.Done(ctx, o)
}

// newJobs makes the worker's executor and its metrics.
func (w *Worker) newJobs(slots int) (*jobs.Executor, []prometheus.Collector) {
	config.OrDefault(&slots, jobs.SlotsFor(w.cfg.MaxBrowsers))
	total := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cloudbrowser_worker_jobs_total",
		Help: "Job attempts this worker ended, by kind (render, check) and result (ok, changed, unavailable, error, done, failed, cancelled).",
	}, []string{"kind", "result"})
	reused := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cloudbrowser_jobs_browsers_reused_total",
		Help: "General-pool browsers reset after a job and lent to the next one instead of being closed.",
	})
	e := jobs.New(jobs.Config{
		Slots:  slots,
		Logger: w.log,
		OnEnd:  func(kind, result string) { total.WithLabelValues(kind, result).Inc() },
	}, pacedLeaser{jobLeaser{w: w, reused: reused}, w}, jobReporter{w})
	slotsDesc := prometheus.NewDesc("cloudbrowser_worker_job_slots", "Job slots of this worker, by state (used, free).", []string{"state"}, nil)
	return e, []prometheus.Collector{total, reused, slotCollector{e, slotsDesc}}
}

// slotCollector exports the executor's slots.
type slotCollector struct {
	e    *jobs.Executor
	desc *prometheus.Desc
}

func (c slotCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c slotCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.e.Stats()
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(s.Used), "used")
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(s.Free), "free")
}
