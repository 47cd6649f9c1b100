// Package sessions is the master's side of automation sessions
// (docs/automation.md, "Sessions"): an app instance with one browser,
// placed like any instance, that an automation client (Playwright,
// Puppeteer, chromedp) drives over CDP at the worker's gate. The package
// records sessions in the master's state store, signs their CDP tickets
// (internal/cdpticket), ends them at their time and serves the sessions
// API. What it needs of the master (who a request is, the apps, placement,
// closing an instance, the public address) it asks through Host, so that
// it does not depend on package master.
package sessions

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/cdpticket"
	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
	"github.com/cloudbrowser-go/cloudbrowser/internal/metrics"
	"github.com/cloudbrowser-go/cloudbrowser/internal/session"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/auth"
	"github.com/cloudbrowser-go/cloudbrowser/master/state"
)

// Bucket is the state store's bucket of sessions: id -> Record.
const Bucket = "automation-sessions"

// Defaults and bounds of a session's times.
const (
	DefaultTimeout     = 15 * time.Minute
	DefaultIdleTimeout = 5 * time.Minute
	// MaxDuration bounds timeout, idleTimeout and keepAlive.
	MaxDuration = 24 * time.Hour
	// DefaultMaxPerPrincipal is the default of Config.MaxPerPrincipal.
	DefaultMaxPerPrincipal = 10
)

const (
	// closeTimeout bounds one attempt at closing a session's instance.
	closeTimeout = 30 * time.Second
	// placeTimeout bounds a session's placement (the placer bounds its
	// own steps; this is the backstop).
	placeTimeout = 2 * time.Minute
	// retryClose: an expired session whose worker could not be reached
	// is tried again after this long (its record stays until then).
	retryClose = time.Minute
)

// Reasons a session ends (the label of the ended metric).
const (
	ReasonTimeout        = "timeout"         // its time ran out: the master closed its instance
	ReasonDeleted        = "deleted"         // DELETE /api/v1/sessions/{id}
	ReasonInstanceClosed = "instance-closed" // its worker said the instance closed (the admin, its app removed, …)
	ReasonInstanceGone   = "instance-gone"   // the master no longer knows the instance (found on a read or a sweep)
)

// ErrInstanceGone is what Host.CloseInstance answers for an instance that
// no longer exists: the session ends all the same.
var ErrInstanceGone = errors.New("sessions: the instance no longer exists")

// ErrNotFound: no session of that id that the caller may see.
var ErrNotFound = errors.New("no such session")

// Host is what the sessions ask of the master. Its methods may be called
// once New has returned, from any goroutine.
type Host interface {
	// Check authenticates a request needing the role need (auth.Auth.Check).
	Check(r *http.Request, need auth.Role) (auth.Principal, *auth.Refusal)
	// AppExists reports whether an app is mounted at name.
	AppExists(name string) bool
	// MayUseApp reports whether p may open a session on the app.
	MayUseApp(p auth.Principal, name string) bool
	// Place places a new instance of req.App with req.User's browser in it
	// (the master's placer: balancer, quotas, epochs).
	Place(ctx context.Context, req wire.PlaceRequest) (wire.Placement, error)
	// CloseInstance closes an instance on its worker; ErrInstanceGone if
	// it no longer exists.
	CloseInstance(ctx context.Context, instanceID string) error
	// InstanceExists reports whether the master's instance table has it.
	InstanceExists(instanceID string) bool
	// PublicBase is the scheme and host users reach the cluster at, as
	// "http(s)://host[:port]", for a request that came to the public port
	// (public) or the admin listener.
	PublicBase(r *http.Request, public bool) string
}

// Config configures a Service.
type Config struct {
	// Store keeps the sessions (required).
	Store *state.Store
	Host  Host
	// Key signs the CDP tickets: session.Key(clusterSecret,
	// cdpticket.Purpose), which the workers get too (required).
	Key []byte
	// Clock ends sessions at their time (nil = clock.Real).
	Clock clock.Clock
	// MaxPerPrincipal bounds one principal's open sessions (0 = the default).
	MaxPerPrincipal int
	// QueueMax bounds the session requests waiting for a browser (0 =
	// DefaultQueueMax); QueueWait is how long one waits (0 =
	// DefaultQueueWait, negative: no waiting).
	QueueMax  int
	QueueWait time.Duration
	Logger    zerolog.Logger
}

// Viewport is the size a session's browser is asked for (recorded; the
// worker applies it).
type Viewport struct {
	Width  int `json:"width"`
	Height int `json:"height"`
}

// Request is what a session is opened with, checked (ParseRequest).
type Request struct {
	App                             string
	Timeout, IdleTimeout, KeepAlive time.Duration
	Viewport                        *Viewport
}

// Record is a session as the store keeps it. It holds no ticket: a ticket
// is derived from the record and the key, the same after a restart.
type Record struct {
	ID         string    `json:"id"`
	App        string    `json:"app"`
	InstanceID string    `json:"instanceId"`
	BrowserID  string    `json:"browserId"`
	WorkerID   string    `json:"workerId"`
	Owner      string    `json:"owner"`
	CreatedAt  time.Time `json:"createdAt"`
	ExpiresAt  time.Time `json:"expiresAt"`
	// IdleTimeoutMs and KeepAliveMs are recorded for the worker's CDP
	// endpoint, which enforces them.
	IdleTimeoutMs int64     `json:"idleTimeoutMs"`
	KeepAliveMs   int64     `json:"keepAliveMs"`
	Viewport      *Viewport `json:"viewport,omitempty"`
}

// Ticket is the CDP ticket of the session's browser, valid until it ends.
func (r Record) Ticket(key []byte) string {
	cl := cdpticket.Claims{Owner: r.Owner, Session: r.ID,
		Idle: time.Duration(r.IdleTimeoutMs) * time.Millisecond, KeepAlive: time.Duration(r.KeepAliveMs) * time.Millisecond}
	if r.Viewport != nil {
		cl.Width, cl.Height = r.Viewport.Width, r.Viewport.Height
	}
	return cdpticket.Issue(key, r.InstanceID, r.BrowserID, cl, r.CreatedAt, r.ExpiresAt)
}

// CDPPath is the session's CDP endpoint without scheme and host:
// "/<app>/a/<iid>/b/<bid>/cdp?ticket=…".
func (r Record) CDPPath(key []byte) string {
	return "/" + r.App + "/a/" + r.InstanceID + "/b/" + r.BrowserID + "/cdp?ticket=" + url.QueryEscape(r.Ticket(key))
}

// LimitError refuses a session over the principal's maximum.
type LimitError struct {
	Max int
	// RetryAfter is when the principal's first session ends.
	RetryAfter time.Duration
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("at most %d automation sessions may be open at once per principal; delete one (DELETE /api/v1/sessions/{id}) or wait until one ends", e.Max)
}

// Service keeps the sessions and serves their API.
type Service struct {
	st   *state.Store
	host Host
	key  []byte
	clk  clock.Clock
	max  int
	log  zerolog.Logger
	m    *serviceMetrics

	queue waitQueue // requests waiting for a browser (queue.go)

	mu       sync.Mutex
	sessions map[string]*entry
	pending  map[string]int // owner -> creations under way, counted against the maximum
	ctx      context.Context
	stopped  bool
	work     sync.WaitGroup // expiry closes under way
}

type entry struct {
	rec   Record
	timer clock.Timer // nil until Run arms it
}

// New loads the recorded sessions; Run ends them at their time.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil || cfg.Host == nil || len(cfg.Key) == 0 {
		return nil, errors.New("sessions: Store, Host and Key are required")
	}
	if cfg.MaxPerPrincipal < 0 {
		return nil, fmt.Errorf("sessions: MaxPerPrincipal must not be negative, got %d", cfg.MaxPerPrincipal)
	}
	if cfg.MaxPerPrincipal == 0 {
		cfg.MaxPerPrincipal = DefaultMaxPerPrincipal
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real
	}
	s := &Service{st: cfg.Store, host: cfg.Host, key: cfg.Key, clk: cfg.Clock, max: cfg.MaxPerPrincipal, log: cfg.Logger,
		sessions: map[string]*entry{}, pending: map[string]int{}}
	s.queue.max, s.queue.wait = cfg.QueueMax, cfg.QueueWait
	if s.queue.max <= 0 {
		s.queue.max = DefaultQueueMax
	}
	if s.queue.wait == 0 {
		s.queue.wait = DefaultQueueWait
	}
	err := state.Each(cfg.Store, Bucket, func(id string, rec Record) {
		if rec.ID != id || rec.InstanceID == "" || rec.BrowserID == "" {
			s.log.Warn().Str("session", id).Msg("a recorded automation session is incomplete: ignored")
			return
		}
		s.sessions[id] = &entry{rec: rec}
	})
	if err != nil {
		// One damaged record must not lose the others.
		s.log.Error().Err(err).Msg("some recorded automation sessions could not be read")
	}
	s.m = newServiceMetrics(s)
	return s, nil
}

// Run ends sessions at their time until ctx ends; then it waits for
// closes under way. It first drops the recorded sessions whose instance is
// gone, so start it once the master's instance table is loaded.
//
// Instances that end without their worker's word (the worker died and
// its instances could not be placed again) are not reported to the
// sessions: their records are dropped when read (Get, List, a creation by
// the same owner, the open gauge ignores them) or at their time.
func (s *Service) Run(ctx context.Context) {
	s.mu.Lock()
	s.ctx = ctx
	for id, e := range s.sessions {
		s.armLocked(id, e, e.rec.ExpiresAt.Sub(s.clk.Now()))
	}
	s.mu.Unlock()
	for _, rec := range s.all() {
		s.live(rec)
	}
	<-ctx.Done()
	s.mu.Lock()
	s.stopped = true
	for _, e := range s.sessions {
		if e.timer != nil {
			e.timer.Stop()
		}
	}
	s.mu.Unlock()
	s.work.Wait()
}

// armLocked (re)sets the timer that ends session id after d.
func (s *Service) armLocked(id string, e *entry, d time.Duration) {
	if s.ctx == nil || s.stopped {
		return
	}
	if e.timer != nil {
		e.timer.Stop()
	}
	e.timer = s.clk.AfterFunc(max(d, 0), func() { s.expire(id) })
}

// expire closes the instance of a session whose time ran out and ends it;
// a worker that cannot be reached now is tried again later.
func (s *Service) expire(id string) {
	s.mu.Lock()
	e, ok := s.sessions[id]
	if !ok || s.stopped {
		s.mu.Unlock()
		return
	}
	s.work.Add(1)
	ctx, rec := s.ctx, e.rec
	s.mu.Unlock()
	defer s.work.Done()
	cctx, cancel := context.WithTimeout(ctx, closeTimeout)
	err := s.host.CloseInstance(cctx, rec.InstanceID)
	cancel()
	if err != nil && !errors.Is(err, ErrInstanceGone) {
		if ctx.Err() != nil {
			return // the master stops: the next one ends it
		}
		s.log.Warn().Err(err).Str("session", id).Str("instance", rec.InstanceID).Dur("retry_in", retryClose).
			Msg("an expired automation session's instance could not be closed; trying again")
		s.mu.Lock()
		if e, ok := s.sessions[id]; ok {
			s.armLocked(id, e, retryClose)
		}
		s.mu.Unlock()
		return
	}
	s.end(id, ReasonTimeout)
}

// end forgets session id; false if it was not (or no longer) open.
func (s *Service) end(id, reason string) bool {
	s.mu.Lock()
	e, ok := s.sessions[id]
	if ok {
		delete(s.sessions, id)
		if e.timer != nil {
			e.timer.Stop()
		}
	}
	s.mu.Unlock()
	if !ok {
		return false
	}
	if err := s.st.Delete(Bucket, id); err != nil {
		// Read back after a restart, it ends again (expired or gone).
		s.log.Error().Err(err).Str("session", id).Msg("an ended automation session's record could not be deleted")
	}
	s.m.ended.WithLabelValues(reason).Inc()
	s.queue.wakeAll() // its browser may be free for a waiting request
	s.log.Info().Str("session", id).Str("owner", e.rec.Owner).Str("app", e.rec.App).Str("instance", e.rec.InstanceID).
		Str("reason", reason).Msg("automation session ended")
	return true
}

// InstanceClosed ends the sessions of an instance its worker closed for
// good (the master's hook on its workers' word).
func (s *Service) InstanceClosed(instanceID string) {
	for _, rec := range s.all() {
		if rec.InstanceID == instanceID {
			s.end(rec.ID, ReasonInstanceClosed)
		}
	}
}

// all is every open session.
func (s *Service) all() []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Record, 0, len(s.sessions))
	for _, e := range s.sessions {
		out = append(out, e.rec)
	}
	return out
}

// reserve counts a creation for owner against the maximum; release undoes it.
func (s *Service) reserve(owner string) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.pending[owner]
	first := time.Time{}
	for _, e := range s.sessions {
		if e.rec.Owner == owner {
			n++
			if first.IsZero() || e.rec.ExpiresAt.Before(first) {
				first = e.rec.ExpiresAt
			}
		}
	}
	if n >= s.max {
		wait := 5 * time.Second // only creations under way: they end soon
		if !first.IsZero() {
			wait = first.Sub(s.clk.Now())
		}
		return nil, &LimitError{Max: s.max, RetryAfter: max(wait, time.Second)}
	}
	s.pending[owner]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.pending[owner]--; s.pending[owner] <= 0 {
			delete(s.pending, owner)
		}
	}, nil
}

// Create places a session's instance for owner and records it.
func (s *Service) Create(ctx context.Context, owner string, req Request, clientIP string) (Record, error) {
	for _, rec := range s.all() {
		if rec.Owner == owner {
			s.live(rec) // a gone one must not count against the maximum
		}
	}
	release, err := s.reserve(owner)
	if err != nil {
		s.m.refused.WithLabelValues("max-sessions").Inc()
		return Record{}, err
	}
	defer release()
	id := session.NewID()
	// Not cut short by the client leaving: an instance placed for nobody
	// would stay open; recorded, it is listed and ends at its time.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), placeTimeout)
	defer cancel()
	pl, err := s.host.Place(pctx, wire.PlaceRequest{App: req.App, User: owner, New: true, RequestID: "session-" + id[:8], ClientIP: clientIP})
	if err != nil {
		return Record{}, fmt.Errorf("placing the session: %w", err)
	}
	now := s.clk.Now().UTC()
	rec := Record{ID: id, App: req.App, InstanceID: pl.InstanceID, BrowserID: pl.BrowserID, WorkerID: pl.WorkerID, Owner: owner,
		CreatedAt: now, ExpiresAt: now.Add(req.Timeout), IdleTimeoutMs: req.IdleTimeout.Milliseconds(),
		KeepAliveMs: req.KeepAlive.Milliseconds(), Viewport: req.Viewport}
	if err := s.st.Put(Bucket, id, rec); err != nil {
		// Unrecorded, nobody could end it: close it now.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		if cerr := s.host.CloseInstance(cctx, pl.InstanceID); cerr != nil && !errors.Is(cerr, ErrInstanceGone) {
			s.log.Error().Err(cerr).Str("instance", pl.InstanceID).Msg("the instance of an unrecorded automation session could not be closed")
		}
		return Record{}, fmt.Errorf("sessions: recording %s: %w", id, err)
	}
	s.mu.Lock()
	e := &entry{rec: rec}
	s.sessions[id] = e
	s.armLocked(id, e, req.Timeout)
	s.mu.Unlock()
	s.m.created.Inc()
	s.log.Info().Str("session", id).Str("owner", owner).Str("app", req.App).Str("instance", pl.InstanceID).
		Str("browser", pl.BrowserID).Str("worker", pl.WorkerID).Time("expires", rec.ExpiresAt).Msg("automation session opened")
	return rec, nil
}

// lookup returns session id if p may see it.
func (s *Service) lookup(p auth.Principal, id string) (Record, bool) {
	s.mu.Lock()
	e, ok := s.sessions[id]
	s.mu.Unlock()
	if !ok || !p.Sees(e.rec.Owner) {
		return Record{}, false
	}
	return e.rec, true
}

// live reports whether rec's instance still exists, ending the session
// if it does not: a worker's death without failover is not reported to
// the sessions, so reads check.
func (s *Service) live(rec Record) bool {
	if s.host.InstanceExists(rec.InstanceID) {
		return true
	}
	s.end(rec.ID, ReasonInstanceGone)
	return false
}

// Get returns session id if p may see it and its instance exists.
func (s *Service) Get(p auth.Principal, id string) (Record, error) {
	rec, ok := s.lookup(p, id)
	if !ok || !s.live(rec) {
		return Record{}, ErrNotFound
	}
	return rec, nil
}

// List returns the sessions p sees (the admin: all), of app if not "",
// oldest first.
func (s *Service) List(p auth.Principal, app string) []Record {
	out := slices.DeleteFunc(s.all(), func(rec Record) bool {
		return !p.Sees(rec.Owner) || (app != "" && rec.App != app) || !s.live(rec)
	})
	slices.SortFunc(out, func(a, b Record) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return out
}

// Delete closes session id's instance and ends it. An instance already
// gone ends it too; a worker that cannot be reached keeps it (the error).
func (s *Service) Delete(ctx context.Context, p auth.Principal, id string) error {
	return s.close(ctx, p, id, ReasonDeleted)
}

// close is Delete, ending the session for reason.
func (s *Service) close(ctx context.Context, p auth.Principal, id, reason string) error {
	rec, ok := s.lookup(p, id)
	if !ok {
		return ErrNotFound
	}
	if err := s.host.CloseInstance(ctx, rec.InstanceID); err != nil && !errors.Is(err, ErrInstanceGone) {
		return fmt.Errorf("closing the instance %s of session %s: %w", rec.InstanceID, id, err)
	}
	s.end(id, reason)
	return nil
}

// Open is how many sessions are open: recorded, with their instance.
func (s *Service) Open() int {
	n := 0
	for _, rec := range s.all() {
		if s.host.InstanceExists(rec.InstanceID) {
			n++
		}
	}
	return n
}

// serviceMetrics are the sessions' instruments.
type serviceMetrics struct {
	open    prometheus.Collector
	created prometheus.Counter
	ended   *prometheus.CounterVec
	refused *prometheus.CounterVec
	// cdpOpens counts the one-step CDP URL's requests (cdp.go), by result.
	cdpOpens *prometheus.CounterVec
}

func newServiceMetrics(s *Service) *serviceMetrics {
	m := &serviceMetrics{
		open: metrics.One("cloudbrowser_master_automation_sessions", "Automation sessions open.", prometheus.GaugeValue,
			func() float64 { return float64(s.Open()) }),
		created: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cloudbrowser_master_automation_sessions_created_total",
			Help: "Automation sessions opened.",
		}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cloudbrowser_master_automation_sessions_ended_total",
			Help: "Automation sessions ended, by reason (timeout, deleted, instance-closed, instance-gone, unconnected).",
		}, []string{"reason"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cloudbrowser_master_automation_sessions_refused_total",
			Help: "Automation sessions refused, by limit (max-sessions, quota, unavailable, queue-full, queue-timeout).",
		}, []string{"limit"}),
		cdpOpens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cloudbrowser_master_automation_cdp_opens_total",
			Help: "One-step CDP connections (/cdp?app=…) asking for a session, by result (opened, refused).",
		}, []string{"result"}),
	}
	// Known label values start at 0, so rate() and alerts see them at once.
	for _, r := range []string{ReasonTimeout, ReasonDeleted, ReasonInstanceClosed, ReasonInstanceGone, ReasonUnconnected} {
		m.ended.WithLabelValues(r)
	}
	for _, l := range []string{"max-sessions", "quota", "unavailable", "queue-full", "queue-timeout"} {
		m.refused.WithLabelValues(l)
	}
	for _, r := range []string{"opened", "refused"} {
		m.cdpOpens.WithLabelValues(r)
	}
	return m
}

// Collectors are the sessions' metrics, for the master's /metrics.
func (s *Service) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.m.open, s.m.created, s.m.ended, s.m.refused, s.m.cdpOpens}
}
