package jobsapi

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
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/apijson"
	"github.com/cloudbrowser-go/cloudbrowser/master/auth"
	"github.com/cloudbrowser-go/cloudbrowser/master/jobs"
	"github.com/cloudbrowser-go/cloudbrowser/master/rendercache"
)

// The jobs HTTP API: jobs, the synchronous render, the cache's purge and
// monitors. A job, its result, its cache entries and its monitors are its
// submitter's: another principal (but the admin) is answered as if they
// did not exist.

// Routes adds the jobs API to mux (the master's admin API).
func (s *Service) Routes(mux *http.ServeMux) {
	mux.Handle("POST /api/v1/jobs", s.guard(s.submitJobs))
	mux.Handle("GET /api/v1/jobs", s.guard(s.listJobs))
	mux.Handle("GET /api/v1/jobs/{id}", s.guard(s.showJob))
	mux.Handle("GET /api/v1/jobs/{id}/result", s.guard(s.jobResult))
	mux.Handle("DELETE /api/v1/jobs/{id}", s.guard(s.cancelJob))
	mux.Handle("GET /api/v1/render", s.guard(s.renderSync))
	mux.Handle("POST /api/v1/cache/purge", s.guard(s.purgeCache))
	mux.Handle("POST /api/v1/monitors", s.guard(s.addMonitor))
	mux.Handle("GET /api/v1/monitors", s.guard(s.listMonitors))
	mux.Handle("GET /api/v1/monitors/{id}", s.guard(s.showMonitor))
	mux.Handle("DELETE /api/v1/monitors/{id}", s.guard(s.removeMonitor))
}

// guard lets through to h the requests of principals with at least the
// jobs role, as the master's other endpoints do (apijson.Guard).
func (s *Service) guard(h http.HandlerFunc) http.Handler {
	return apijson.Guard(s.host.Check, auth.RoleJobs, h)
}

// fieldError answers 400 with msg and the field it is about.
func fieldError(w http.ResponseWriter, field, msg string) {
	apijson.Write(w, http.StatusBadRequest, map[string]any{"status": 400, "error": msg, "field": field})
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
		apijson.Error(w, http.StatusTooManyRequests, err.Error())
	case errors.Is(err, jobs.ErrNotFound):
		apijson.Error(w, http.StatusNotFound, err.Error())
	case errors.Is(err, jobs.ErrFinished), errors.Is(err, jobs.ErrNoResult):
		apijson.Error(w, http.StatusConflict, err.Error())
	default:
		apijson.Error(w, http.StatusInternalServerError, err.Error())
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
func (s *Service) cacheKey() jobs.AdmitOption { return jobs.CacheKey(s.key) }

// key is a render's cache signature and canonical URL.
func (s *Service) key(spec wire.JobSpec) (string, string, error) {
	return s.cache.Key(spec, s.host.PooledLogin(spec.App))
}

// AppRefusal says why user may not name app in a job; the master's job
// policy says it too, when it refuses a job at run time.
func AppRefusal(user, app string) string {
	return fmt.Sprintf("%q may not use the pool of the application %q: only its owner, the admin and the principals its owner granted (PUT /api/v1/apps/%s/job-users/%s) may", user, app, app, user)
}

// appAllowed answers 403 naming field unless the request's principal may
// name app in a job (appRefusal). An unknown app passes: the job is then
// DISALLOWED by the queue's policy, which checks again for every job.
func (s *Service) appAllowed(w http.ResponseWriter, r *http.Request, field, app string) bool {
	if app == "" {
		return true
	}
	if !s.host.AppExists(app) {
		return true
	}
	p := auth.PrincipalOf(r)
	if s.host.MayUseApp(p, app) {
		return true
	}
	apijson.Write(w, http.StatusForbidden, map[string]any{"status": http.StatusForbidden, "error": field + ": " + AppRefusal(p.Name, app), "field": field})
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
		apijson.Write(w, http.StatusForbidden, map[string]any{"status": http.StatusForbidden,
			"error": "user: only the admin may list another principal's jobs and monitors", "field": "user"})
		return "", false
	}
	return p.Name, true
}

// ownJob returns the job id names if the request's principal sees it;
// otherwise (and for an unknown id) it answers 404 alike.
func (s *Service) ownJob(w http.ResponseWriter, r *http.Request) (jobs.Job, bool) {
	j, err := s.q.Get(r.PathValue("id"))
	if err == nil && !auth.PrincipalOf(r).Sees(j.Spec.User) {
		err = jobs.ErrNotFound
	}
	if err != nil {
		jobError(w, err)
		return jobs.Job{}, false
	}
	return j, true
}

func (s *Service) submitJobs(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 4<<20)
	var raw []byte
	raw, err := readAll(r)
	if err != nil {
		apijson.Error(w, http.StatusBadRequest, "body: "+err.Error())
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
		if !s.appAllowed(w, r, field, specs[i].App) {
			return
		}
	}
	if !batch {
		s.submitOne(w, r, specs[0])
		return
	}
	// Admitted after the app checks, so a 403 comes before a 400.
	admitted, err := jobs.AdmitBatch(specs)
	if err != nil {
		jobError(w, err)
		return
	}
	out, err := s.q.SubmitBatch(r.Context(), admitted)
	if err != nil {
		jobError(w, err)
		return
	}
	apijson.Write(w, http.StatusAccepted, map[string]any{"jobs": out})
}

// submitOne queues one job; a render goes through the cache first: a fresh
// result answers at once (200, X-Cache: HIT), a render being generated is
// joined (202 with the job making it and since when), and otherwise this
// job reserves the signature.
func (s *Service) submitOne(w http.ResponseWriter, r *http.Request, raw wire.JobSpec) {
	var opts []jobs.AdmitOption
	if raw.Kind == wire.JobRender && !raw.NoCache {
		opts = append(opts, s.cacheKey())
	}
	spec, err := jobs.Admit(raw, opts...)
	if err != nil {
		jobError(w, err)
		return
	}
	if spec.Signature() == "" {
		j, err := s.q.Submit(r.Context(), spec)
		if err != nil {
			jobError(w, err)
			return
		}
		apijson.Write(w, http.StatusAccepted, j)
		return
	}
	sig, ws := spec.Signature(), spec.Wire()
	holder := rendercache.NewHolder()
	res, err := s.cache.ReserveFor(ws.User, sig, spec.CanonicalURL(), holder, time.Duration(ws.MaxAgeMs)*time.Millisecond)
	if err != nil {
		jobError(w, err)
		return
	}
	switch res.Status {
	case rendercache.Hit:
		e := res.Entry
		j, err := s.q.Record(r.Context(), spec, wire.JobOutcome{FinalURL: e.URL, Hash: e.Hash, Body: e.Body, ContentType: e.ContentType})
		if err != nil {
			jobError(w, err)
			return
		}
		w.Header().Set("X-Cache", "HIT")
		w.Header().Set("Age", strconv.Itoa(int(e.Age(time.Now())/time.Second)))
		apijson.Write(w, http.StatusOK, j)
		return
	case rendercache.Generating:
		s.mu.Lock()
		leader := s.leaders[res.Holder]
		s.mu.Unlock()
		var body struct {
			jobs.Job
			GeneratingSince time.Time `json:"generatingSince"`
		}
		if leader != "" {
			// The signature includes the user, so the leader is the
			// caller's own job; checked all the same.
			if j, err := s.q.Get(leader); err == nil && auth.PrincipalOf(r).Sees(j.Spec.User) {
				body.Job = j
			}
		}
		body.GeneratingSince = res.Since
		w.Header().Set("X-Cache", "GENERATING")
		apijson.Write(w, http.StatusAccepted, body)
		return
	}
	j, err := s.q.Submit(r.Context(), spec.WithHolder(holder))
	if err != nil {
		_ = s.cache.Fail(sig, holder, err)
		jobError(w, err)
		return
	}
	s.mu.Lock()
	if !j.Ended() {
		s.leaders[holder] = j.ID
	}
	s.mu.Unlock()
	if j.Ended() { // disallowed at once: OnFinish may have run before Spec had the holder
		s.finished(j, nil)
	}
	w.Header().Set("X-Cache", "MISS")
	apijson.Write(w, http.StatusAccepted, j)
}

func (s *Service) listJobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	st := q.Get("state")
	if st != "" && !validJobState(st) {
		fieldError(w, "state", "state: unknown job state "+strconv.Quote(st))
		return
	}
	limit := 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
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
	list, next := s.q.List(jobs.ListOptions{State: st, User: user, Limit: limit, After: q.Get("after")})
	if list == nil {
		list = []jobs.Job{}
	}
	apijson.Write(w, http.StatusOK, map[string]any{"jobs": list, "next": next})
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
	apijson.Write(w, http.StatusOK, v)
}

func (s *Service) showJob(w http.ResponseWriter, r *http.Request) {
	if j, ok := s.ownJob(w, r); ok {
		apijson.Write(w, http.StatusOK, j)
	}
}

func (s *Service) jobResult(w http.ResponseWriter, r *http.Request) {
	j, ok := s.ownJob(w, r)
	if !ok {
		return
	}
	if j.State != wire.JobDone {
		apijson.Write(w, http.StatusConflict, map[string]any{"status": 409, "error": "the job is " + j.State + ", not done", "state": j.State, "reason": j.Reason})
		return
	}
	if j.Spec.Kind == wire.JobCheck {
		apijson.Write(w, http.StatusOK, j.Result)
		return
	}
	body, ctype, err := s.q.Result(j.ID)
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

func (s *Service) cancelJob(w http.ResponseWriter, r *http.Request) {
	own, ok := s.ownJob(w, r)
	if !ok {
		return
	}
	j, err := s.q.Cancel(r.Context(), own.ID)
	answer(w, j, err)
}

// renderSync is GET /api/v1/render: it waits and answers the bytes. N
// identical concurrent requests cause one render (the cache's single
// flight); the others wait for it.
func (s *Service) renderSync(w http.ResponseWriter, r *http.Request) {
	raw, err := specFromQuery(r)
	if err != nil {
		jobError(w, err)
		return
	}
	raw = cleanSpec(r, raw)
	if !s.appAllowed(w, r, "app", raw.App) {
		return
	}
	spec, err := jobs.Admit(raw, s.cacheKey())
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
	timeout := time.Duration(raw.TimeoutMs)*time.Millisecond*time.Duration(s.maxAttempts+1) + time.Minute
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	var queueErr error
	entry, status, err := s.cache.Get(ctx, spec.Signature(), spec.CanonicalURL(), rendercache.GetOptions{MaxAge: maxAge, Owner: ws.User}, func(ctx context.Context, holder string) error {
		j, err := s.q.Submit(ctx, spec.WithHolder(holder))
		if err != nil {
			queueErr = err
			return err
		}
		s.mu.Lock()
		s.leaders[holder] = j.ID
		s.mu.Unlock()
		if j.Ended() {
			s.finished(j, nil)
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
		apijson.Error(w, http.StatusForbidden, "disallowed: "+je.reason)
	case errors.As(err, &je) && je.state == wire.JobCancelled:
		apijson.Error(w, http.StatusConflict, "cancelled: "+je.reason)
	case errors.Is(err, context.DeadlineExceeded):
		apijson.Error(w, http.StatusGatewayTimeout, "the render did not finish in time")
	case errors.As(err, &je):
		apijson.Error(w, http.StatusBadGateway, "render failed: "+je.reason)
	default:
		apijson.Error(w, http.StatusBadGateway, "render failed: "+err.Error())
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

func (s *Service) purgeCache(w http.ResponseWriter, r *http.Request) {
	var f struct {
		URL string `json:"url"`
	}
	if !apijson.Decode(w, r, &f) {
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
	n, err := s.cache.PurgeFor(f.URL, owner)
	if err != nil {
		fieldError(w, "url", "url: "+err.Error())
		return
	}
	apijson.Write(w, http.StatusOK, map[string]int{"purged": n})
}

func (s *Service) addMonitor(w http.ResponseWriter, r *http.Request) {
	var f struct {
		wire.JobSpec
		Interval string `json:"interval"`
	}
	if !apijson.Decode(w, r, &f) {
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
	if !s.appAllowed(w, r, "app", raw.App) {
		return
	}
	spec, err := jobs.Admit(raw, jobs.AsMonitor())
	if err != nil {
		jobError(w, err)
		return
	}
	mon, err := s.q.Monitors().Add(r.Context(), spec, every)
	if err != nil {
		jobError(w, err)
		return
	}
	apijson.Write(w, http.StatusCreated, mon)
}

func (s *Service) listMonitors(w http.ResponseWriter, r *http.Request) {
	user, ok := userFilter(w, r)
	if !ok {
		return
	}
	f, err := monitorFilterOf(r.URL.Query(), time.Now())
	if err != nil {
		var fe *jobs.FieldError
		if errors.As(err, &fe) {
			fieldError(w, fe.Field, fe.Error())
			return
		}
		jobError(w, err)
		return
	}
	list := slices.DeleteFunc(s.q.Monitors().List(r.URL.Query().Get("state")), func(mon jobs.Monitor) bool {
		return (user != "" && mon.Spec.User != user) || !f.keeps(mon)
	})
	f.sort(list)
	if list == nil {
		list = []jobs.Monitor{}
	}
	apijson.Write(w, http.StatusOK, map[string]any{"monitors": list})
}

// monitorFilter is the monitor list's ranges of last check and last state
// change (the url-checker's ListURLs by LastCheck and LastStateChange),
// and its order.
type monitorFilter struct {
	checked, changed [2]time.Time // after, before; zero = open
	by               string       // "", "lastCheck" or "lastStateChange" (newest first)
}

// monitorFilterOf reads checkedAfter, checkedBefore, changedAfter,
// changedBefore (RFC 3339, or a duration: that long ago) and sort.
func monitorFilterOf(q url.Values, now time.Time) (monitorFilter, error) {
	var f monitorFilter
	for _, b := range []struct {
		name string
		to   *time.Time
	}{{"checkedAfter", &f.checked[0]}, {"checkedBefore", &f.checked[1]}, {"changedAfter", &f.changed[0]}, {"changedBefore", &f.changed[1]}} {
		v := q.Get(b.name)
		if v == "" {
			continue
		}
		if t, err := time.Parse(time.RFC3339, v); err == nil {
			*b.to = t
		} else if d, err := time.ParseDuration(v); err == nil && d >= 0 {
			*b.to = now.Add(-d)
		} else {
			return f, &jobs.FieldError{Field: b.name, Msg: fmt.Sprintf("%q is neither an RFC 3339 time nor a duration ago (like 1h)", v)}
		}
	}
	switch f.by = q.Get("sort"); f.by {
	case "", "lastCheck", "lastStateChange":
	default:
		return f, &jobs.FieldError{Field: "sort", Msg: fmt.Sprintf("must be lastCheck or lastStateChange, not %q", f.by)}
	}
	return f, nil
}

// keeps: a bound excludes monitors never checked (or never changed).
func (f monitorFilter) keeps(m jobs.Monitor) bool {
	in := func(t time.Time, r [2]time.Time) bool {
		if r[0].IsZero() && r[1].IsZero() {
			return true
		}
		return !t.IsZero() && (r[0].IsZero() || !t.Before(r[0])) && (r[1].IsZero() || t.Before(r[1]))
	}
	return in(m.LastCheck, f.checked) && in(m.LastStateChange, f.changed)
}

func (f monitorFilter) sort(list []jobs.Monitor) {
	key := func(m jobs.Monitor) time.Time { return m.LastCheck }
	switch f.by {
	case "":
		return
	case "lastStateChange":
		key = func(m jobs.Monitor) time.Time { return m.LastStateChange }
	}
	slices.SortStableFunc(list, func(a, b jobs.Monitor) int { return key(b).Compare(key(a)) })
}

// ownMonitor returns the monitor id names if the request's principal sees
// it; otherwise (and for an unknown id) it answers 404 alike.
func (s *Service) ownMonitor(w http.ResponseWriter, r *http.Request) (jobs.Monitor, bool) {
	mon, err := s.q.Monitors().Get(r.PathValue("id"))
	if err == nil && !auth.PrincipalOf(r).Sees(mon.Spec.User) {
		err = jobs.ErrNotFound
	}
	if err != nil {
		jobError(w, err)
		return jobs.Monitor{}, false
	}
	return mon, true
}

func (s *Service) showMonitor(w http.ResponseWriter, r *http.Request) {
	if mon, ok := s.ownMonitor(w, r); ok {
		apijson.Write(w, http.StatusOK, mon)
	}
}

func (s *Service) removeMonitor(w http.ResponseWriter, r *http.Request) {
	mon, ok := s.ownMonitor(w, r)
	if !ok {
		return
	}
	if err := s.q.Monitors().Remove(mon.ID); err != nil {
		jobError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
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
