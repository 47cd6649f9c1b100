package master

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/bundle"
	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/auth"
	"github.com/cloudbrowser-go/cloudbrowser/master/jobs"
	"github.com/cloudbrowser-go/cloudbrowser/master/jobsapi"
	"github.com/cloudbrowser-go/cloudbrowser/master/registry"
)

// The master's side of jobs (docs/jobs.md): master/jobsapi holds the queue
// and the render cache and serves the API; this file gives it the workers
// that run the attempts, the apps' rules, and the workers' reports.

// startJobs creates the queue and the cache on the master's store.
func (m *Master) startJobs() error {
	cfg := m.cfg.Jobs
	cfg.Runner = jobRunner{m}
	// m.apps is made after the queue.
	cfg.Policy = func(spec wire.JobSpec) (bool, string) { return m.apps.jobPolicy(spec) }
	cfg.MasterID = m.id
	cfg.Logger = m.log.With().Str("component", "jobs").Logger()
	ccfg := m.cfg.RenderCache
	ccfg.Logger = m.log.With().Str("component", "render-cache").Logger()
	js, err := jobsapi.New(jobsapi.Config{Jobs: cfg, Cache: ccfg, Store: m.state, Host: jobsHost{m}, Logger: m.log})
	if err != nil {
		return err
	}
	m.jobs = js
	m.metrics.reg.MustRegister(js.Queue().Collectors()...)
	m.metrics.reg.MustRegister(js.Cache().Collectors()...)
	m.wg.Go(func() { js.Run(m.ctx) })
	return nil
}

// jobsHost answers the jobs API (jobsapi.Host), which asks through an
// interface so that it need not import this package.
type jobsHost struct{ m *Master }

func (h jobsHost) Check(r *http.Request, need auth.Role) (auth.Principal, *auth.Refusal) {
	return h.m.access.Check(r, need)
}

func (h jobsHost) AppExists(name string) bool {
	_, ok := h.m.apps.Get(name)
	return ok
}

func (h jobsHost) MayUseApp(p auth.Principal, name string) bool { return h.m.apps.mayUseApp(p, name) }

func (h jobsHost) PooledLogin(name string) bool { return h.m.apps.pooledLogin(name) }

// jobSlots passes the registry's word on the workers' job slots to the
// job queue, which starts after the registry.
type jobSlots struct{ m *Master }

func (j jobSlots) Set(id string, slots int) { j.m.jobs.Queue().Workers().Set(id, slots) }

func (j jobSlots) Remove(ctx context.Context, id string) { j.m.jobs.Queue().Workers().Remove(ctx, id) }

// jobRunner starts and cancels attempts on workers.
type jobRunner struct{ m *Master }

func (r jobRunner) Run(ctx context.Context, workerID string, run wire.JobRun) error {
	ref := r.m.workers.RefOf(workerID)
	if ref == nil {
		return wire.Err(wire.CodeUnknownWorker, "worker "+workerID+" is not connected")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return contract.WorkerAppsClient{R: ref}.RunJob(ctx, run)
}

func (r jobRunner) Cancel(ctx context.Context, workerID, id string, attempt int) error {
	ref := r.m.workers.RefOf(workerID)
	if ref == nil {
		return nil // gone: nothing runs there any more
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return contract.WorkerAppsClient{R: ref}.CancelJob(ctx, id, attempt)
}

// jobPolicy applies the named app's rules: it must exist, be enabled, the
// job's submitter must be allowed to use its pool, and its navigation
// policy must allow the URL. It runs for every job a monitor submits too,
// so a revoked grant stops a monitor's next job.
func (a *AppManager) jobPolicy(spec wire.JobSpec) (bool, string) {
	if spec.App == "" {
		return true, ""
	}
	app, ok := a.Get(spec.App)
	if !ok {
		return false, fmt.Sprintf("no application %q", spec.App)
	}
	if app.Disabled {
		return false, fmt.Sprintf("the application %q is disabled", spec.App)
	}
	if !a.userMayUseApp(spec.User, spec.App) {
		return false, jobsapi.AppRefusal(spec.User, spec.App)
	}
	man, err := bundle.ParseManifest(app.Manifest)
	if err != nil || man == nil {
		return true, ""
	}
	if allow := man.NavigationPolicy(appOrigin(app.MountPoint)); allow != nil && !allow(spec.URL) {
		return false, fmt.Sprintf("the navigation policy of %q does not allow %s", spec.App, spec.URL)
	}
	return true, ""
}

// appOrigin is an app's internal origin, as the worker serves it.
func appOrigin(mount string) string { return "http://" + mount + ".app.cloudbrowser.internal" }

// pooledLogin reports whether renders of app come from a pool that logs
// in (its results are then per user).
func (a *AppManager) pooledLogin(appName string) bool {
	if appName == "" {
		return false
	}
	app, ok := a.Get(appName)
	if !ok {
		return false
	}
	man, err := bundle.ParseManifest(app.Manifest)
	if err != nil || man == nil || len(man.Pool) == 0 {
		return false
	}
	pc, err := bundle.ParsePool(man.Pool)
	return err == nil && pc != nil && pc.Enabled && len(pc.Init) > 0
}

// jobQueueService is registered as wire.ObjJobQueue: workers' reports.
type jobQueueService struct{ m *Master }

var _ contract.JobQueue = jobQueueService{}

// Working renews the lease of an attempt the calling worker runs.
func (s jobQueueService) Working(ctx context.Context, p wire.JobProgress) error {
	return s.report(ctx, func(wid string) error { return s.m.jobs.Queue().Workers().Working(wid, p) })
}

// Ready is the start gate: whether the calling worker may load the page
// of its attempt now (jobs.Workers.Ready).
func (s jobQueueService) Ready(ctx context.Context, p wire.JobProgress) (wire.JobGo, error) {
	wid, err := registry.PeerFrom(ctx).Caller()
	if err != nil {
		return wire.JobGo{}, err
	}
	wait, err := s.m.jobs.Queue().Workers().Ready(wid, p)
	if errors.Is(err, jobs.ErrStaleReport) {
		return wire.JobGo{}, wire.Err(wire.CodeInvalid, "attempt "+strconv.Itoa(p.Attempt)+" of job "+p.ID+" is not current")
	}
	if err != nil {
		return wire.JobGo{}, err
	}
	if wait <= 0 {
		return wire.JobGo{}, nil
	}
	return wire.JobGo{WaitMs: max(1, (wait + time.Millisecond - 1).Milliseconds())}, nil
}

// Request holds one request of a job browser to its host's budget
// (jobs.Workers.Request).
func (s jobQueueService) Request(ctx context.Context, r wire.JobRequest) (wire.JobGo, error) {
	wid, err := registry.PeerFrom(ctx).Caller()
	if err != nil {
		return wire.JobGo{}, err
	}
	wait, err := s.m.jobs.Queue().Workers().Request(wid, r)
	if errors.Is(err, jobs.ErrStaleReport) {
		return wire.JobGo{}, wire.Err(wire.CodeInvalid, "attempt "+strconv.Itoa(r.Attempt)+" of job "+r.ID+" is not current")
	}
	if err != nil || wait <= 0 {
		return wire.JobGo{}, err
	}
	return wire.JobGo{WaitMs: max(1, (wait + time.Millisecond - 1).Milliseconds())}, nil
}

// Started is when the request of a go'd attempt left (jobs.Workers.Started).
func (s jobQueueService) Started(ctx context.Context, st wire.JobStarted) error {
	return s.report(ctx, func(wid string) error { return s.m.jobs.Queue().Workers().Started(wid, st) })
}

// Done ends an attempt the calling worker ran.
func (s jobQueueService) Done(ctx context.Context, o wire.JobOutcome) error {
	return s.report(ctx, func(wid string) error { return s.m.jobs.Queue().Workers().Done(ctx, wid, o) })
}

// report runs fn for the worker calling over this connection; a report of
// an attempt that is no longer current is not the worker's error.
func (s jobQueueService) report(ctx context.Context, fn func(workerID string) error) error {
	wid, err := registry.PeerFrom(ctx).Caller()
	if err != nil {
		return err
	}
	if err := fn(wid); err != nil && !errors.Is(err, jobs.ErrStaleReport) {
		return err
	}
	return nil
}
