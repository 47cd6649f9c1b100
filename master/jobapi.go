package master

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/bundle"
	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/auth"
	"github.com/cloudbrowser-go/cloudbrowser/master/jobs"
	"github.com/cloudbrowser-go/cloudbrowser/master/rendercache"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// The master's side of jobs (docs/jobs.md): the queue (master/jobs) hands
// attempts to workers over RMI, the render cache (master/rendercache) holds
// results, and this file joins them and serves the API.

// jobsSide is the master's jobs state.
type jobsSide struct {
	q     *jobs.Queue
	cache *rendercache.Cache

	// leaders maps a cache reservation's holder to the job rendering it, so
	// a request for a render being generated is told which job it is.
	mu      sync.Mutex
	leaders map[string]string
}

// startJobs creates the queue and the cache on the master's store.
func (m *Master) startJobs() error {
	cfg := m.cfg.Jobs
	cfg.Runner = jobRunner{m}
	cfg.Policy = m.jobPolicy
	cfg.MasterID = m.id
	cfg.Logger = m.log.With().Str("component", "jobs").Logger()
	js := &jobsSide{leaders: map[string]string{}}
	cfg.OnFinish = func(j jobs.Job, body []byte) { m.jobFinished(js, j, body) }
	cfg.OnMonitorChange = func(old, cur jobs.Monitor) { m.monitorChanged(js, old, cur) }
	q, err := jobs.New(cfg, m.state)
	if err != nil {
		return fmt.Errorf("master: jobs: %w", err)
	}
	ccfg := m.cfg.RenderCache
	ccfg.Store = m.state
	ccfg.Logger = m.log.With().Str("component", "render-cache").Logger()
	cache, err := rendercache.New(ccfg)
	if err != nil {
		return fmt.Errorf("master: render cache: %w", err)
	}
	js.q, js.cache = q, cache
	m.jobs = js
	m.metrics.reg.MustRegister(q.Collectors()...)
	m.metrics.reg.MustRegister(cache.Collectors()...)
	m.reconcileReservations()
	m.wg.Add(2)
	go func() {
		defer m.wg.Done()
		_ = q.Run(m.ctx)
	}()
	go func() {
		defer m.wg.Done()
		cache.Run(m.ctx, 10*time.Minute)
	}()
	return nil
}

// reconcileReservations ends the cache reservations whose render job no
// longer exists or already ended (a master restart between the two).
func (m *Master) reconcileReservations() {
	res, err := m.jobs.cache.Reservations()
	if err != nil {
		m.log.Warn().Err(err).Msg("render cache reservations unreadable")
	}
	live := map[string]string{} // holder -> job id
	for _, j := range m.jobs.q.ListAll(wire.JobQueued, wire.JobWorking) {
		if j.Spec.CacheHolder != "" {
			live[j.Spec.CacheHolder] = j.ID
		}
	}
	for _, r := range res {
		if id, ok := live[r.Holder]; ok {
			m.jobs.leaders[r.Holder] = id
			continue
		}
		_ = m.jobs.cache.Fail(r.Sig, r.Holder, errors.New("the render was lost in a master restart"))
	}
}

// jobSlots passes the registry's word on the workers' job slots to the
// job queue, which starts after the registry.
type jobSlots struct{ m *Master }

func (j jobSlots) Set(id string, slots int) { j.m.jobs.q.Workers().Set(id, slots) }

func (j jobSlots) Remove(ctx context.Context, id string) { j.m.jobs.q.Workers().Remove(ctx, id) }

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
func (m *Master) jobPolicy(spec wire.JobSpec) (bool, string) {
	if spec.App == "" {
		return true, ""
	}
	app, ok := m.apps.Get(spec.App)
	if !ok {
		return false, fmt.Sprintf("no application %q", spec.App)
	}
	if app.Disabled {
		return false, fmt.Sprintf("the application %q is disabled", spec.App)
	}
	if !m.apps.userMayUseApp(spec.User, spec.App) {
		return false, appRefusal(spec.User, spec.App)
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
func (m *Master) pooledLogin(appName string) bool {
	if appName == "" {
		return false
	}
	app, ok := m.apps.Get(appName)
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

// jobFinished fills (or fails) the cache reservation a render job held.
func (m *Master) jobFinished(js *jobsSide, j jobs.Job, body []byte) {
	sig, holder := j.Spec.CacheSig, j.Spec.CacheHolder
	if sig == "" || holder == "" {
		return
	}
	js.mu.Lock()
	delete(js.leaders, holder)
	js.mu.Unlock()
	if j.State == wire.JobDone {
		ctype := ""
		if j.Result != nil {
			ctype = j.Result.ContentType
		}
		if _, _, err := js.cache.Complete(sig, holder, rendercache.Render{ContentType: ctype, Body: body}); err != nil {
			m.log.Warn().Err(err).Str("job", j.ID).Msg("render result not cached")
		}
		return
	}
	reason := j.Reason
	if reason == "" {
		reason = j.State
	}
	if err := js.cache.Fail(sig, holder, &jobEndError{state: j.State, reason: reason}); err != nil && !errors.Is(err, rendercache.ErrNotHolder) {
		m.log.Warn().Err(err).Str("job", j.ID).Msg("ending a render reservation")
	}
}

// jobEndError is why a render job did not produce a result.
type jobEndError struct{ state, reason string }

func (e *jobEndError) Error() string { return e.state + ": " + e.reason }

// monitorChanged marks cached renders of a URL stale when its monitor saw
// the content (or state) change.
func (m *Master) monitorChanged(js *jobsSide, old, cur jobs.Monitor) {
	if old.Hash == cur.Hash && old.State == cur.State {
		return
	}
	// Only the monitor's owner's renders: what one principal's monitor saw
	// (perhaps logged in) says nothing about another's partition.
	if n, err := js.cache.MarkStaleFor(cur.Spec.URL, cur.Spec.User); err != nil {
		m.log.Warn().Err(err).Str("url", cur.Spec.URL).Msg("marking cached renders stale")
	} else if n > 0 {
		m.log.Info().Str("url", cur.Spec.URL).Int("renders", n).Msg("monitor saw a change: cached renders marked stale")
	}
}

// jobQueueService is registered as wire.ObjJobQueue: workers' reports.
type jobQueueService struct{ m *Master }

var _ contract.JobQueue = jobQueueService{}

// Working renews the lease of an attempt the calling worker runs.
func (s jobQueueService) Working(ctx context.Context, p wire.JobProgress) error {
	return s.report(ctx, func(wid string) error { return s.m.jobs.q.Workers().Working(wid, p) })
}

// Ready is the start gate: whether the calling worker may load the page
// of its attempt now (jobs.Workers.Ready).
func (s jobQueueService) Ready(ctx context.Context, p wire.JobProgress) (wire.JobGo, error) {
	wid, err := s.m.workers.Gate.Caller(rmi.ConnFrom(ctx))
	if err != nil {
		return wire.JobGo{}, err
	}
	wait, err := s.m.jobs.q.Workers().Ready(wid, p)
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

// Started is when the request of a go'd attempt left (jobs.Workers.Started).
func (s jobQueueService) Started(ctx context.Context, st wire.JobStarted) error {
	return s.report(ctx, func(wid string) error { return s.m.jobs.q.Workers().Started(wid, st) })
}

// Done ends an attempt the calling worker ran.
func (s jobQueueService) Done(ctx context.Context, o wire.JobOutcome) error {
	return s.report(ctx, func(wid string) error { return s.m.jobs.q.Workers().Done(ctx, wid, o) })
}

// report runs fn for the worker calling over this connection; a report of
// an attempt that is no longer current is not the worker's error.
func (s jobQueueService) report(ctx context.Context, fn func(workerID string) error) error {
	wid, err := s.m.workers.Gate.Caller(rmi.ConnFrom(ctx))
	if err != nil {
		return err
	}
	if err := fn(wid); err != nil && !errors.Is(err, jobs.ErrStaleReport) {
		return err
	}
	return nil
}

// ---- HTTP API

func (m *Master) jobRoutes(mux *http.ServeMux) {
	mux.Handle("POST /api/v1/jobs", m.auth(auth.RoleJobs, m.submitJobs))
	mux.Handle("GET /api/v1/jobs", m.auth(auth.RoleJobs, m.listJobs))
	mux.Handle("GET /api/v1/jobs/{id}", m.auth(auth.RoleJobs, m.showJob))
	mux.Handle("GET /api/v1/jobs/{id}/result", m.auth(auth.RoleJobs, m.jobResult))
	mux.Handle("DELETE /api/v1/jobs/{id}", m.auth(auth.RoleJobs, m.cancelJob))
	mux.Handle("GET /api/v1/render", m.auth(auth.RoleJobs, m.renderSync))
	mux.Handle("POST /api/v1/cache/purge", m.auth(auth.RoleJobs, m.purgeCache))
	mux.Handle("POST /api/v1/monitors", m.auth(auth.RoleJobs, m.addMonitor))
	mux.Handle("GET /api/v1/monitors", m.auth(auth.RoleJobs, m.listMonitors))
	mux.Handle("GET /api/v1/monitors/{id}", m.auth(auth.RoleJobs, m.showMonitor))
	mux.Handle("DELETE /api/v1/monitors/{id}", m.auth(auth.RoleJobs, m.removeMonitor))
}

// fieldError answers 400 with msg and the field it is about.
func fieldError(w http.ResponseWriter, field, msg string) {
	writeJSON(w, http.StatusBadRequest, map[string]any{"status": 400, "error": msg, "field": field})
}

// jobError answers err with its status: 400 naming the field, 429 with
// Retry-After, 404, 409.
func jobError(w http.ResponseWriter, err error) {
	var fe *jobs.FieldError
	var qf *jobs.QueueFullError
	switch {
	case errors.As(err, &fe):
		fieldError(w, fe.Field, fe.Error())
	case errors.As(err, &qf):
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(qf.RetryAfter.Round(time.Second)/time.Second))))
		apiError(w, http.StatusTooManyRequests, err.Error())
	case errors.Is(err, jobs.ErrNotFound):
		apiError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, jobs.ErrFinished), errors.Is(err, jobs.ErrNoResult):
		apiError(w, http.StatusConflict, err.Error())
	default:
		apiError(w, http.StatusInternalServerError, err.Error())
	}
}

// cleanSpec drops what only the master may set and names the submitter:
// the job, its result and its cache entries are that principal's. (The
// cache fields are dropped by jobs.Admit, which alone may set them.)
func cleanSpec(r *http.Request, s wire.JobSpec) wire.JobSpec {
	s.PrevHash, s.MaxBytes = "", 0
	s.User = auth.PrincipalOf(r).Name
	return s
}

// cacheKey has jobs.Admit compute a render's cache signature (which needs
// to know whether the app's pool logs in).
func (m *Master) cacheKey() jobs.AdmitOption {
	return jobs.CacheKey(func(s wire.JobSpec) (string, string, error) { return m.jobs.cache.Key(s, m.pooledLogin(s.App)) })
}

// appRefusal says why user may not name app in a job.
func appRefusal(user, app string) string {
	return fmt.Sprintf("%q may not use the pool of the application %q: only its owner, the admin and the principals its owner granted (PUT /api/v1/apps/%s/job-users/%s) may", user, app, app, user)
}

// appAllowed answers 403 naming field unless the request's principal may
// name app in a job (appRefusal). An unknown app passes: the job is then
// DISALLOWED by jobPolicy, which checks again for every job.
func (m *Master) appAllowed(w http.ResponseWriter, r *http.Request, field, app string) bool {
	if app == "" {
		return true
	}
	if _, ok := m.apps.Get(app); !ok {
		return true
	}
	p := auth.PrincipalOf(r)
	if m.apps.mayUseApp(p, app) {
		return true
	}
	writeJSON(w, http.StatusForbidden, map[string]any{"status": http.StatusForbidden, "error": field + ": " + appRefusal(p.Name, app), "field": field})
	return false
}

// userFilter is the submitter a list shows: the caller's own, or for the
// admin everyone's or the one ?user= names. A non-admin naming another
// principal is answered 403; ok is false then.
func userFilter(w http.ResponseWriter, r *http.Request) (user string, ok bool) {
	p, want := auth.PrincipalOf(r), r.URL.Query().Get("user")
	if p.Admin {
		return want, true
	}
	if want != "" && want != p.Name {
		writeJSON(w, http.StatusForbidden, map[string]any{"status": http.StatusForbidden,
			"error": "user: only the admin may list another principal's jobs and monitors", "field": "user"})
		return "", false
	}
	return p.Name, true
}

// ownJob returns the job id names if the request's principal sees it;
// otherwise (and for an unknown id) it answers 404 alike.
func (m *Master) ownJob(w http.ResponseWriter, r *http.Request) (jobs.Job, bool) {
	j, err := m.jobs.q.Get(r.PathValue("id"))
	if err == nil && !auth.PrincipalOf(r).Sees(j.Spec.User) {
		err = jobs.ErrNotFound
	}
	if err != nil {
		jobError(w, err)
		return jobs.Job{}, false
	}
	return j, true
}

func (m *Master) submitJobs(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 4<<20)
	var raw []byte
	raw, err := readAll(r)
	if err != nil {
		apiError(w, http.StatusBadRequest, "body: "+err.Error())
		return
	}
	specs, batch, err := decodeSpecs(raw)
	if err != nil {
		fieldError(w, "body", err.Error())
		return
	}
	for i := range specs {
		specs[i] = cleanSpec(r, specs[i])
		field := "app"
		if batch {
			field = fmt.Sprintf("jobs[%d].app", i)
		}
		if !m.appAllowed(w, r, field, specs[i].App) {
			return
		}
	}
	if !batch {
		m.submitOne(w, r, specs[0])
		return
	}
	// Admitted after the app checks, so a 403 comes before a 400.
	admitted, err := jobs.AdmitBatch(specs)
	if err != nil {
		jobError(w, err)
		return
	}
	out, err := m.jobs.q.SubmitBatch(r.Context(), admitted)
	if err != nil {
		jobError(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"jobs": out})
}

// submitOne queues one job; a render goes through the cache first: a fresh
// result answers at once (200, X-Cache: HIT), a render being generated is
// joined (202 with the job making it and since when), and otherwise this
// job reserves the signature.
func (m *Master) submitOne(w http.ResponseWriter, r *http.Request, raw wire.JobSpec) {
	var opts []jobs.AdmitOption
	if raw.Kind == wire.JobRender && !raw.NoCache {
		opts = append(opts, m.cacheKey())
	}
	spec, err := jobs.Admit(raw, opts...)
	if err != nil {
		jobError(w, err)
		return
	}
	if spec.Signature() == "" {
		j, err := m.jobs.q.Submit(r.Context(), spec)
		if err != nil {
			jobError(w, err)
			return
		}
		writeJSON(w, http.StatusAccepted, j)
		return
	}
	sig, ws := spec.Signature(), spec.Wire()
	holder := rendercache.NewHolder()
	res, err := m.jobs.cache.ReserveFor(ws.User, sig, spec.CanonicalURL(), holder, time.Duration(ws.MaxAgeMs)*time.Millisecond)
	if err != nil {
		jobError(w, err)
		return
	}
	switch res.Status {
	case rendercache.Hit:
		e := res.Entry
		j, err := m.jobs.q.Record(r.Context(), spec, wire.JobOutcome{FinalURL: e.URL, Hash: e.Hash, Body: e.Body, ContentType: e.ContentType})
		if err != nil {
			jobError(w, err)
			return
		}
		w.Header().Set("X-Cache", "HIT")
		w.Header().Set("Age", strconv.Itoa(int(e.Age(time.Now())/time.Second)))
		writeJSON(w, http.StatusOK, j)
		return
	case rendercache.Generating:
		m.jobs.mu.Lock()
		leader := m.jobs.leaders[res.Holder]
		m.jobs.mu.Unlock()
		var body struct {
			jobs.Job
			GeneratingSince time.Time `json:"generatingSince"`
		}
		if leader != "" {
			// The signature includes the user, so the leader is the
			// caller's own job; checked all the same.
			if j, err := m.jobs.q.Get(leader); err == nil && auth.PrincipalOf(r).Sees(j.Spec.User) {
				body.Job = j
			}
		}
		body.GeneratingSince = res.Since
		w.Header().Set("X-Cache", "GENERATING")
		writeJSON(w, http.StatusAccepted, body)
		return
	}
	j, err := m.jobs.q.Submit(r.Context(), spec.WithHolder(holder))
	if err != nil {
		_ = m.jobs.cache.Fail(sig, holder, err)
		jobError(w, err)
		return
	}
	m.jobs.mu.Lock()
	if !j.Ended() {
		m.jobs.leaders[holder] = j.ID
	}
	m.jobs.mu.Unlock()
	if j.Ended() { // disallowed at once: OnFinish may have run before Spec had the holder
		m.jobFinished(m.jobs, j, nil)
	}
	w.Header().Set("X-Cache", "MISS")
	writeJSON(w, http.StatusAccepted, j)
}

func (m *Master) listJobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	st := q.Get("state")
	if st != "" && !validJobState(st) {
		fieldError(w, "state", "state: unknown job state "+strconv.Quote(st))
		return
	}
	limit := 0
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 1000 {
			fieldError(w, "limit", "limit: must be 1..1000")
			return
		}
		limit = n
	}
	user, ok := userFilter(w, r)
	if !ok {
		return
	}
	list, next := m.jobs.q.List(jobs.ListOptions{State: st, User: user, Limit: limit, After: q.Get("after")})
	if list == nil {
		list = []jobs.Job{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"jobs": list, "next": next})
}

func validJobState(s string) bool {
	switch s {
	case wire.JobQueued, wire.JobWorking, wire.JobDone, wire.JobFailed, wire.JobDisallowed, wire.JobCancelled:
		return true
	}
	return false
}

// answer writes v as JSON, or err with its status.
func answer[T any](w http.ResponseWriter, v T, err error) {
	if err != nil {
		jobError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (m *Master) showJob(w http.ResponseWriter, r *http.Request) {
	if j, ok := m.ownJob(w, r); ok {
		writeJSON(w, http.StatusOK, j)
	}
}

func (m *Master) jobResult(w http.ResponseWriter, r *http.Request) {
	j, ok := m.ownJob(w, r)
	if !ok {
		return
	}
	if j.State != wire.JobDone {
		writeJSON(w, http.StatusConflict, map[string]any{"status": 409, "error": "the job is " + j.State + ", not done", "state": j.State, "reason": j.Reason})
		return
	}
	if j.Spec.Kind == wire.JobCheck {
		writeJSON(w, http.StatusOK, j.Result)
		return
	}
	body, ctype, err := m.jobs.q.Result(j.ID)
	if err != nil {
		jobError(w, err)
		return
	}
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(body)
}

func (m *Master) cancelJob(w http.ResponseWriter, r *http.Request) {
	own, ok := m.ownJob(w, r)
	if !ok {
		return
	}
	j, err := m.jobs.q.Cancel(r.Context(), own.ID)
	answer(w, j, err)
}

// renderSync is GET /api/v1/render: it waits and answers the bytes. N
// identical concurrent requests cause one render (the cache's single
// flight); the others wait for it.
func (m *Master) renderSync(w http.ResponseWriter, r *http.Request) {
	raw, err := specFromQuery(r)
	if err != nil {
		jobError(w, err)
		return
	}
	raw = cleanSpec(r, raw)
	if !m.appAllowed(w, r, "app", raw.App) {
		return
	}
	spec, err := jobs.Admit(raw, m.cacheKey())
	if err != nil {
		jobError(w, err)
		return
	}
	ws := spec.Wire()
	maxAge := time.Duration(ws.MaxAgeMs) * time.Millisecond
	if ws.NoCache {
		maxAge = rendercache.NoCache
	}
	// The timeout as requested, not Admit's default: an omitted one
	// waits one minute, as it always has.
	timeout := time.Duration(raw.TimeoutMs)*time.Millisecond*time.Duration(m.cfg.Jobs.MaxAttempts+1) + time.Minute
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	var queueErr error
	entry, status, err := m.jobs.cache.Get(ctx, spec.Signature(), spec.CanonicalURL(), rendercache.GetOptions{MaxAge: maxAge, Owner: ws.User}, func(ctx context.Context, holder string) error {
		j, err := m.jobs.q.Submit(ctx, spec.WithHolder(holder))
		if err != nil {
			queueErr = err
			return err
		}
		m.jobs.mu.Lock()
		m.jobs.leaders[holder] = j.ID
		m.jobs.mu.Unlock()
		if j.Ended() {
			m.jobFinished(m.jobs, j, nil)
		}
		return nil
	})
	if err != nil {
		if queueErr != nil {
			jobError(w, queueErr)
			return
		}
		renderError(w, err)
		return
	}
	cacheHdr := "MISS"
	switch status {
	case rendercache.Hit:
		cacheHdr = "HIT"
	case rendercache.Stale:
		cacheHdr = "STALE"
	}
	w.Header().Set("X-Cache", cacheHdr)
	w.Header().Set("Age", strconv.Itoa(int(entry.Age(time.Now())/time.Second)))
	if entry.Hash != "" {
		w.Header().Set("ETag", `"`+entry.Hash+`"`)
	}
	ctype := entry.ContentType
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Content-Length", strconv.Itoa(len(entry.Body)))
	_, _ = w.Write(entry.Body)
}

// renderError maps a failed render: disallowed 403, timed out 504, else 502.
func renderError(w http.ResponseWriter, err error) {
	var je *jobEndError
	switch {
	case errors.As(err, &je) && je.state == wire.JobDisallowed:
		apiError(w, http.StatusForbidden, "disallowed: "+je.reason)
	case errors.As(err, &je) && je.state == wire.JobCancelled:
		apiError(w, http.StatusConflict, "cancelled: "+je.reason)
	case errors.Is(err, context.DeadlineExceeded):
		apiError(w, http.StatusGatewayTimeout, "the render did not finish in time")
	case errors.As(err, &je):
		apiError(w, http.StatusBadGateway, "render failed: "+je.reason)
	default:
		apiError(w, http.StatusBadGateway, "render failed: "+err.Error())
	}
}

// specFromQuery reads a render's options from the query string.
func specFromQuery(r *http.Request) (wire.JobSpec, error) {
	q := r.URL.Query()
	s := wire.JobSpec{Kind: wire.JobRender, URL: q.Get("url"), App: q.Get("app"), Format: q.Get("format"),
		WaitSelector: q.Get("waitSelector")}
	var err error
	field := func(e error) {
		if err == nil {
			err = e
		}
	}
	const isInt, isMs, isBool = "must be an integer", "must be an integer (milliseconds)", "must be true or false"
	ms := func(v string) (int64, error) { return strconv.ParseInt(v, 10, 64) }
	field(queryField(q, "width", &s.Width, strconv.Atoi, isInt))
	field(queryField(q, "height", &s.Height, strconv.Atoi, isInt))
	field(queryField(q, "quality", &s.Quality, strconv.Atoi, isInt))
	field(queryField(q, "waitDelayMs", &s.WaitDelayMs, ms, isMs))
	field(queryField(q, "timeoutMs", &s.TimeoutMs, ms, isMs))
	field(queryField(q, "maxAgeMs", &s.MaxAgeMs, ms, isMs))
	field(queryField(q, "fullPage", &s.FullPage, strconv.ParseBool, isBool))
	field(queryField(q, "waitNetworkIdle", &s.WaitNetworkIdle, strconv.ParseBool, isBool))
	field(queryField(q, "noCache", &s.NoCache, strconv.ParseBool, isBool))
	field(queryField(q, "ignoreRobots", &s.IgnoreRobots, strconv.ParseBool, isBool))
	return s, err
}

// queryField sets *dst from query parameter name when it is given; a value
// parse refuses is a field error worded by msg.
func queryField[T any](q url.Values, name string, dst *T, parse func(string) (T, error), msg string) error {
	v := q.Get(name)
	if v == "" {
		return nil
	}
	x, err := parse(v)
	if err != nil {
		return &jobs.FieldError{Field: name, Msg: msg}
	}
	*dst = x
	return nil
}

func (m *Master) purgeCache(w http.ResponseWriter, r *http.Request) {
	var f struct {
		URL string `json:"url"`
	}
	if !decodeJSON(w, r, &f) {
		return
	}
	if strings.TrimSpace(f.URL) == "" {
		fieldError(w, "url", "url: required")
		return
	}
	// An admin purges every principal's renders of the URL; anyone else
	// only their own partition.
	owner := ""
	if p := auth.PrincipalOf(r); !p.Admin {
		owner = p.Name
	}
	n, err := m.jobs.cache.PurgeFor(f.URL, owner)
	if err != nil {
		fieldError(w, "url", "url: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]int{"purged": n})
}

func (m *Master) addMonitor(w http.ResponseWriter, r *http.Request) {
	var f struct {
		wire.JobSpec
		Interval string `json:"interval"`
	}
	if !decodeJSON(w, r, &f) {
		return
	}
	every, err := time.ParseDuration(f.Interval)
	if err != nil {
		fieldError(w, "interval", "interval: a duration such as 5m is required")
		return
	}
	raw := cleanSpec(r, f.JobSpec)
	if raw.Kind == "" {
		raw.Kind = wire.JobCheck
	}
	if !m.appAllowed(w, r, "app", raw.App) {
		return
	}
	spec, err := jobs.Admit(raw, jobs.AsMonitor())
	if err != nil {
		jobError(w, err)
		return
	}
	mon, err := m.jobs.q.Monitors().Add(r.Context(), spec, every)
	if err != nil {
		jobError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, mon)
}

func (m *Master) listMonitors(w http.ResponseWriter, r *http.Request) {
	user, ok := userFilter(w, r)
	if !ok {
		return
	}
	list := slices.DeleteFunc(m.jobs.q.Monitors().List(r.URL.Query().Get("state")), func(mon jobs.Monitor) bool {
		return user != "" && mon.Spec.User != user
	})
	if list == nil {
		list = []jobs.Monitor{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"monitors": list})
}

// ownMonitor returns the monitor id names if the request's principal sees
// it; otherwise (and for an unknown id) it answers 404 alike.
func (m *Master) ownMonitor(w http.ResponseWriter, r *http.Request) (jobs.Monitor, bool) {
	mon, err := m.jobs.q.Monitors().Get(r.PathValue("id"))
	if err == nil && !auth.PrincipalOf(r).Sees(mon.Spec.User) {
		err = jobs.ErrNotFound
	}
	if err != nil {
		jobError(w, err)
		return jobs.Monitor{}, false
	}
	return mon, true
}

func (m *Master) showMonitor(w http.ResponseWriter, r *http.Request) {
	if mon, ok := m.ownMonitor(w, r); ok {
		writeJSON(w, http.StatusOK, mon)
	}
}

func (m *Master) removeMonitor(w http.ResponseWriter, r *http.Request) {
	mon, ok := m.ownMonitor(w, r)
	if !ok {
		return
	}
	if err := m.jobs.q.Monitors().Remove(mon.ID); err != nil {
		jobError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// jobsStatus is the jobs part of the cluster status.
func (m *Master) jobsStatus() *wire.JobsStatus {
	if m.jobs == nil {
		return nil
	}
	qs := m.jobs.q.Stats()
	st := &wire.JobsStatus{Queued: qs.Queued, Working: qs.Working, Outcomes: qs.Outcomes, Monitors: map[string]int{}}
	for _, w := range qs.Workers {
		st.Workers = append(st.Workers, wire.JobSlots{Worker: w.ID, Slots: w.Slots, Used: w.Used, Free: w.Free})
	}
	for _, mon := range m.jobs.q.Monitors().List("") {
		st.Monitors[mon.State]++
	}
	changes := m.jobs.q.Monitors().StateChanges()
	for i := len(changes) - 1; i >= 0 && len(st.Changes) < 20; i-- {
		c := changes[i]
		st.Changes = append(st.Changes, wire.MonitorChange{Monitor: c.Monitor, URL: c.URL, From: c.From, To: c.To, Reason: c.Reason, At: c.At.UTC().Format(time.RFC3339)})
	}
	st.Wait, st.Run = m.jobs.q.Histograms()
	cs := m.jobs.cache.Stats()
	st.Cache = wire.CacheStatus{Entries: cs.Entries, Bytes: cs.Bytes, Hits: cs.Hits, Misses: cs.Misses, Evictions: cs.Evictions}
	return st
}

func readAll(r *http.Request) ([]byte, error) {
	var b strings.Builder
	if _, err := io.Copy(&b, r.Body); err != nil {
		return nil, err
	}
	return []byte(b.String()), nil
}

// decodeSpecs reads one job, an array of jobs, or {"jobs": [...]}.
// Unknown fields are refused, so a misspelt option is not silently
// ignored.
func decodeSpecs(raw []byte) ([]wire.JobSpec, bool, error) {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 {
		return nil, false, errors.New("body: a job (JSON object) or a batch (JSON array) is required")
	}
	strict := func(b []byte, v any) error {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			return fmt.Errorf("body: %w", err)
		}
		return nil
	}
	if trimmed[0] == '[' {
		var specs []wire.JobSpec
		if err := strict(trimmed, &specs); err != nil {
			return nil, true, err
		}
		return specs, true, nil
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &probe); err != nil {
		return nil, false, fmt.Errorf("body: %w", err)
	}
	if list, ok := probe["jobs"]; ok && len(probe) == 1 {
		var specs []wire.JobSpec
		if err := strict(list, &specs); err != nil {
			return nil, true, err
		}
		return specs, true, nil
	}
	var spec wire.JobSpec
	if err := strict(trimmed, &spec); err != nil {
		return nil, false, err
	}
	return []wire.JobSpec{spec}, false, nil
}
