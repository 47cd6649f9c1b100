// Package jobsapi is the master's side of jobs (docs/jobs.md) above the
// queue: it creates the queue (master/jobs) and the render cache
// (master/rendercache), joins them (a render job fills the cache
// reservation it was queued for, a monitor's change marks renders stale)
// and serves the jobs HTTP API. What it needs of the master (who a request
// is, the apps and who may use their pools) it asks through Host, so that
// it does not depend on package master.
package jobsapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/auth"
	"github.com/cloudbrowser-go/cloudbrowser/master/jobs"
	"github.com/cloudbrowser-go/cloudbrowser/master/rendercache"
	"github.com/cloudbrowser-go/cloudbrowser/master/state"
)

// Host is what the jobs API asks of the master. Its methods may be called
// once New has returned, from any goroutine.
type Host interface {
	// Check authenticates a request needing at least the role need
	// (auth.Auth.Check).
	Check(r *http.Request, need auth.Role) (auth.Principal, *auth.Refusal)
	// AppExists reports whether an app is mounted at name.
	AppExists(name string) bool
	// MayUseApp reports whether p may name the app in a job: its owner,
	// the admin, or a principal its owner granted.
	MayUseApp(p auth.Principal, name string) bool
	// PooledLogin reports whether renders of the app come from a pool that
	// logs in: its results are then per user, which the cache key says.
	PooledLogin(name string) bool
}

// Config configures a Service.
type Config struct {
	// Jobs configures the queue; OnFinish and OnMonitorChange are the
	// Service's own.
	Jobs jobs.Config
	// Cache configures the render cache; Store is Config.Store.
	Cache rendercache.Config
	// Store keeps the queue and the cache (required).
	Store *state.Store
	Host  Host
	// Logger gets what goes wrong between the queue and the cache.
	Logger zerolog.Logger
}

// Service is the queue, the render cache and the API joining them.
type Service struct {
	q           *jobs.Queue
	cache       *rendercache.Cache
	host        Host
	log         zerolog.Logger
	maxAttempts int

	// leaders maps a cache reservation's holder to the job rendering it, so
	// a request for a render being generated is told which job it is.
	mu      sync.Mutex
	leaders map[string]string
}

// New creates the queue and the cache on cfg.Store and ends the cache
// reservations a previous run left without a job; Run runs them.
func New(cfg Config) (*Service, error) {
	s := &Service{host: cfg.Host, log: cfg.Logger, maxAttempts: cfg.Jobs.MaxAttempts, leaders: map[string]string{}}
	jcfg := cfg.Jobs
	jcfg.OnFinish = s.finished
	jcfg.OnMonitorChange = s.monitorChanged
	jcfg.MonitorCache = &jobs.MonitorCache{
		Key:     s.key,
		Reserve: s.reserveForMonitor,
		Release: func(spec jobs.Spec, holder string, cause error) { _ = s.cache.Fail(spec.Signature(), holder, cause) },
	}
	q, err := jobs.New(jcfg, cfg.Store)
	if err != nil {
		return nil, fmt.Errorf("master: jobs: %w", err)
	}
	ccfg := cfg.Cache
	ccfg.Store = cfg.Store
	cache, err := rendercache.New(ccfg)
	if err != nil {
		return nil, fmt.Errorf("master: render cache: %w", err)
	}
	s.q, s.cache = q, cache
	s.reconcileReservations()
	return s, nil
}

// Queue is the job queue (for the workers' reports and slots).
func (s *Service) Queue() *jobs.Queue { return s.q }

// Cache is the render cache.
func (s *Service) Cache() *rendercache.Cache { return s.cache }

// Run runs the queue and the cache's expiry until ctx ends.
func (s *Service) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.cache.Run(ctx, 10*time.Minute)
	}()
	_ = s.q.Run(ctx)
	wg.Wait()
}

// reconcileReservations ends the cache reservations whose render job no
// longer exists or already ended (a master restart between the two).
func (s *Service) reconcileReservations() {
	res, err := s.cache.Reservations()
	if err != nil {
		s.log.Warn().Err(err).Msg("render cache reservations unreadable")
	}
	live := map[string]string{} // holder -> job id
	for _, j := range s.q.ListAll(wire.JobQueued, wire.JobWorking) {
		if j.Spec.CacheHolder != "" {
			live[j.Spec.CacheHolder] = j.ID
		}
	}
	for _, r := range res {
		if id, ok := live[r.Holder]; ok {
			s.leaders[r.Holder] = id
			continue
		}
		_ = s.cache.Fail(r.Sig, r.Holder, errors.New("the render was lost in a master restart"))
	}
}

// reserveForMonitor takes a scheduled render's cache reservation whatever
// is cached (the monitor runs on schedule), unless another render of the
// same signature is being made.
func (s *Service) reserveForMonitor(spec jobs.Spec) string {
	holder := rendercache.NewHolder()
	res, err := s.cache.ReserveFor(spec.Wire().User, spec.Signature(), spec.CanonicalURL(), holder, rendercache.NoCache)
	if err != nil {
		s.log.Warn().Err(err).Str("url", spec.Wire().URL).Msg("scheduled render not reserved in the cache")
		return ""
	}
	if res.Status != rendercache.Reserved {
		return ""
	}
	return holder
}

// finished fills (or fails) the cache reservation a render job held.
func (s *Service) finished(j jobs.Job, body []byte) {
	sig, holder := j.Spec.CacheSig, j.Spec.CacheHolder
	if sig == "" || holder == "" {
		return
	}
	s.mu.Lock()
	delete(s.leaders, holder)
	s.mu.Unlock()
	if j.State == wire.JobDone {
		ctype := ""
		if j.Result != nil {
			ctype = j.Result.ContentType
		}
		if _, _, err := s.cache.Complete(sig, holder, rendercache.Render{ContentType: ctype, Body: body}); err != nil {
			s.log.Warn().Err(err).Str("job", j.ID).Msg("render result not cached")
		}
		return
	}
	reason := j.Reason
	if reason == "" {
		reason = j.State
	}
	if err := s.cache.Fail(sig, holder, &jobEndError{state: j.State, reason: reason}); err != nil && !errors.Is(err, rendercache.ErrNotHolder) {
		s.log.Warn().Err(err).Str("job", j.ID).Msg("ending a render reservation")
	}
}

// jobEndError is why a render job did not produce a result.
type jobEndError struct{ state, reason string }

func (e *jobEndError) Error() string { return e.state + ": " + e.reason }

// monitorChanged marks cached renders of a URL stale when its monitor saw
// the content (or state) change.
func (s *Service) monitorChanged(old, cur jobs.Monitor) {
	if old.Hash == cur.Hash && old.State == cur.State {
		return
	}
	// Only the monitor's owner's renders: what one principal's monitor saw
	// (perhaps logged in) says nothing about another's partition. A render
	// monitor's own render, just cached, is the new content: it stays.
	var keep []string
	if sig := cur.CachedSig(); sig != "" {
		keep = append(keep, sig)
	}
	if n, err := s.cache.MarkStaleFor(cur.Spec.URL, cur.Spec.User, keep...); err != nil {
		s.log.Warn().Err(err).Str("url", cur.Spec.URL).Msg("marking cached renders stale")
	} else if n > 0 {
		s.log.Info().Str("url", cur.Spec.URL).Int("renders", n).Msg("monitor saw a change: cached renders marked stale")
	}
}

// Status is the jobs part of the cluster status.
func (s *Service) Status() *wire.JobsStatus {
	qs := s.q.Stats()
	st := &wire.JobsStatus{Queued: qs.Queued, Working: qs.Working, Outcomes: qs.Outcomes, Monitors: map[string]int{}, Polite: qs.Polite}
	for _, w := range qs.Workers {
		st.Workers = append(st.Workers, wire.JobSlots{Worker: w.ID, Slots: w.Slots, Used: w.Used, Free: w.Free})
	}
	for _, mon := range s.q.Monitors().List("") {
		st.Monitors[mon.State]++
	}
	changes := s.q.Monitors().StateChanges()
	for i := len(changes) - 1; i >= 0 && len(st.Changes) < 20; i-- {
		c := changes[i]
		st.Changes = append(st.Changes, wire.MonitorChange{Monitor: c.Monitor, URL: c.URL, From: c.From, To: c.To, Reason: c.Reason, At: c.At.UTC().Format(time.RFC3339)})
	}
	st.Wait, st.Run = s.q.Histograms()
	cs := s.cache.Stats()
	st.Cache = wire.CacheStatus{Entries: cs.Entries, Bytes: cs.Bytes, Hits: cs.Hits, Misses: cs.Misses, Evictions: cs.Evictions}
	return st
}
