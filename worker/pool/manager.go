// Package pool implements application-specific browser pools on a worker,
// after the "Specific Browser Pool" document (docs/pools.md): a general
// pool for apps without a pool of their own, specific pools created on an
// app's first use with an initialization, back and touch session sequence,
// a global browser limit per browser type that both count toward, shifting
// of free general-pool browsers to specific pools at that limit, browser
// TTL with cookie transfer, idle refresh and idle destroy, and the
// document's error chains.
//
// What the worker calls:
//
//	m, err := pool.NewManager(pool.ManagerConfig{
//		Types:  map[string]pool.BrowserType{pool.TypeChromium: {Factory: runtime, Max: 20}},
//		Runner: &seqrun.Runner{Secrets: sequence.EnvSecrets("CB_SECRET_")},
//		Logger: log,
//	})
//	cfg.Validate("pool")                        // at deploy time; nil cfg = general pool
//	l, err := m.Lease(ctx, app, cfg)            // *LimitError → 503 page
//	use(l.Browser())
//	l.Return()                                  // back sequence (or destroy) in the background
//	m.Stats()                                   // per worker and per pool, JSON-ready
//	m.Remove(app)                               // app undeployed
//	m.Close(ctx)                                // destroys every browser, stops every timer
//
// Browsers are created through a Factory (a browser.Runtime) and
// sequences run through a Runner (a *seqrun.Runner); both, and the Clock,
// are interfaces so the state machine is tested with fakes.
package pool

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/internal/sequence"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// Factory makes browsers; a browser.Runtime is one.
type Factory interface {
	NewBrowser(ctx context.Context, opts browser.Options) (browser.Browser, error)
}

// Runner runs sequences; a *seqrun.Runner is one.
type Runner interface {
	Run(ctx context.Context, b browser.Browser, q sequence.Sequence) error
}

// BrowserType is one kind of browser the worker runs, with its limit.
type BrowserType struct {
	Factory Factory
	// Max is the global limit: browsers of this type in all pools of the
	// worker (specific pools and the general pool) never exceed it.
	Max int
	// GeneralMin browsers of this type are kept ready (blank) in the
	// general pool; 0 creates general-pool browsers only on demand.
	GeneralMin int
}

// ManagerConfig configures a Manager.
type ManagerConfig struct {
	// Types by name (TypeChromium); at least one.
	Types map[string]BrowserType
	// DefaultType is used by the general pool and by pools that name no
	// type ("" = TypeChromium, or the only type).
	DefaultType string
	// Runner runs the pools' sequences.
	Runner Runner
	// Clock is time for the pool: Now, and timers for the validation
	// intervals (default clock.Real; tests inject a fake one).
	Clock  clock.Clock
	Logger zerolog.Logger
	// Options returns the options of a new browser for app ("" for the
	// general pool); nil means zero Options. An error fails the creation
	// (the options own what they hold: an egress exit is closed by the
	// browser, or by NewBrowser when it fails).
	Options func(app string) (browser.Options, error)
	// CreateTimeout bounds making one browser (0 = 1m); SequenceTimeout
	// bounds one sequence run as a whole (0 = 5m; steps have their own).
	CreateTimeout, SequenceTimeout time.Duration
}

// closeTimeout bounds closing one browser.
const closeTimeout = 10 * time.Second

// Manager is a worker's set of browser pools. Its methods are safe for
// concurrent use.
type Manager struct {
	cfg   ManagerConfig
	log   zerolog.Logger
	clock clock.Clock
	ctx   context.Context // ends at Close: aborts creations and sequences
	stop  context.CancelFunc

	// mu guards everything below and all pool and entry state. Work that
	// blocks (browsers, sequences) never runs under it.
	mu      sync.Mutex
	closed  bool
	types   map[string]*typeState
	pools   map[string]*pool   // specific pools by app
	all     map[*pool]struct{} // every pool with entries, retired ones included
	total   Counters           // cumulative over all pools
	nextID  uint64
	running int           // background tasks
	idle    chan struct{} // closed when running drops to 0
}

type typeState struct {
	name    string
	bt      BrowserType
	count   int // browsers of this type in all pools (creating ones included)
	general *pool
}

// NewManager checks cfg and starts the general pools (GeneralMin browsers
// per type, in the background).
func NewManager(cfg ManagerConfig) (*Manager, error) {
	if len(cfg.Types) == 0 {
		return nil, errors.New("pool: no browser types")
	}
	if cfg.Runner == nil {
		return nil, errors.New("pool: no sequence runner")
	}
	if cfg.DefaultType == "" {
		cfg.DefaultType = TypeChromium
		if len(cfg.Types) == 1 {
			for name := range cfg.Types {
				cfg.DefaultType = name
			}
		}
	}
	if _, ok := cfg.Types[cfg.DefaultType]; !ok {
		return nil, fmt.Errorf("pool: default browser type %q is not configured", cfg.DefaultType)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real
	}
	config.OrDefault(&cfg.CreateTimeout, time.Minute)
	config.OrDefault(&cfg.SequenceTimeout, 5*time.Minute)
	m := &Manager{
		cfg:   cfg,
		log:   cfg.Logger.With().Str("component", "pool").Logger(),
		clock: cfg.Clock,
		types: map[string]*typeState{},
		pools: map[string]*pool{},
		all:   map[*pool]struct{}{},
		total: newCounters(),
	}
	for name, bt := range cfg.Types {
		switch {
		case bt.Factory == nil:
			return nil, fmt.Errorf("pool: browser type %q has no factory", name)
		case bt.Max < 1:
			return nil, fmt.Errorf("pool: browser type %q: Max must be at least 1", name)
		case bt.GeneralMin < 0 || bt.GeneralMin > bt.Max:
			return nil, fmt.Errorf("pool: browser type %q: GeneralMin must be within 0..Max", name)
		}
		m.types[name] = &typeState{name: name, bt: bt}
	}
	m.ctx, m.stop = context.WithCancel(context.Background())
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, ts := range m.types {
		ts.general = m.newPool("", ts, Config{MinSize: ts.bt.GeneralMin, MaxSize: ts.bt.Max})
		ts.general.fill(false)
	}
	return m, nil
}

// Lease returns a browser of app, locked for the caller until Return.
// With cfg nil or not Enabled it comes from the general pool (a blank
// browser; also for the extra browsers of an app that has a specific
// pool); otherwise from the app's specific pool, created at the first call
// and replaced when cfg changes (Remove drops it). It waits for a browser
// that is being created or prepared when the pool has one coming; it fails
// with a *LimitError when a limit allows no browser.
func (m *Manager) Lease(ctx context.Context, app string, cfg *Config) (*Lease, error) {
	start := m.clock.Now()
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, ErrClosed
	}
	p, err := m.poolFor(app, cfg)
	if err != nil {
		m.total.LeaseFailures[ReasonInvalid]++
		m.mu.Unlock()
		return nil, err
	}
	if len(p.waiters) == 0 {
		if e := p.takeFree(); e != nil {
			l := p.lease(e, start)
			m.mu.Unlock()
			return l, nil
		}
	}
	w := &waiter{ch: make(chan result, 1)}
	p.waiters = append(p.waiters, w)
	if len(p.waiters) > p.pending() {
		if err := p.grow(true); err != nil {
			p.removeWaiter(w)
			p.leaseFailed(reasonOf(err))
			m.mu.Unlock()
			return nil, err
		}
	}
	m.mu.Unlock()

	select {
	case r := <-w.ch:
		return m.served(p, r, start)
	case <-ctx.Done():
		m.mu.Lock()
		if p.removeWaiter(w) {
			p.leaseFailed(ReasonCanceled)
			m.mu.Unlock()
			return nil, ctx.Err()
		}
		m.mu.Unlock()
		// Served meanwhile: give the browser back untouched.
		r := <-w.ch
		m.mu.Lock()
		defer m.mu.Unlock()
		if r.e != nil && r.e.st == stLocked && r.e.lease == nil {
			p.release(r.e)
		}
		p.leaseFailed(ReasonCanceled)
		return nil, ctx.Err()
	}
}

// served completes a Lease that waited.
func (m *Manager) served(p *pool, r result, start time.Time) (*Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r.err != nil {
		p.leaseFailed(r.reason)
		return nil, r.err
	}
	if r.e.st != stLocked { // destroyed by Close or retirement since
		p.leaseFailed(ReasonClosed)
		return nil, ErrClosed
	}
	return p.lease(r.e, start), nil
}

func reasonOf(err error) string {
	var le *LimitError
	if errors.As(err, &le) {
		return le.Reason
	}
	return ReasonCreateFailed
}

// poolFor returns the pool of app for cfg, creating or replacing it.
func (m *Manager) poolFor(app string, cfg *Config) (*pool, error) {
	if cfg == nil || !cfg.Enabled {
		// Also how an app with a specific pool gets the extra browsers of
		// one execution (the document: they come from the general pool).
		return m.types[m.cfg.DefaultType].general, nil
	}
	if p := m.pools[app]; p != nil && reflect.DeepEqual(p.cfg, *cfg) {
		return p, nil
	}
	if app == "" {
		return nil, errors.New("pool: a specific pool needs an app name")
	}
	if err := cfg.Validate("pool"); err != nil {
		return nil, fmt.Errorf("pool of %s: %w", app, err)
	}
	ts := m.types[cmp.Or(cfg.BrowserType, m.cfg.DefaultType)]
	if ts == nil {
		return nil, fmt.Errorf("pool of %s: browser type %q is not available on this worker", app, cfg.BrowserType)
	}
	if old := m.pools[app]; old != nil {
		m.log.Info().Str("app", app).Msg("pool configuration changed: replacing the pool")
		m.retire(old)
	}
	p := m.newPool(app, ts, cfg.Clone())
	m.pools[app] = p
	p.fill(true)
	p.startTimers()
	m.log.Info().Str("app", app).Str("type", ts.name).Int("minSize", p.cfg.MinSize).
		Int("maxSize", p.cfg.MaxSize).Msg("specific pool created")
	return p, nil
}

// Remove retires the app's specific pool (the app was undeployed or its
// pool disabled): free browsers are destroyed now, leased ones when
// returned, waiting leases fail with ErrReconfigured.
func (m *Manager) Remove(app string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.pools[app]; p != nil {
		m.retire(p)
	}
}

func (m *Manager) retire(p *pool) {
	if m.pools[p.app] == p {
		delete(m.pools, p.app)
	}
	p.retire(ErrReconfigured, ReasonReconfigured)
}

// reserve takes a slot of the global limit of ts.
func (m *Manager) reserve(ts *typeState) bool {
	if ts.count >= ts.bt.Max {
		return false
	}
	ts.count++
	return true
}

// spawn runs f in a goroutine that Close waits for. Called with mu held.
func (m *Manager) spawn(f func()) {
	if m.running == 0 {
		m.idle = make(chan struct{})
	}
	m.running++
	go func() {
		defer func() {
			m.mu.Lock()
			m.running--
			if m.running == 0 {
				close(m.idle)
			}
			m.mu.Unlock()
		}()
		f()
	}()
}

// settle waits until no background task runs (tests).
func (m *Manager) settle(ctx context.Context) error {
	for {
		m.mu.Lock()
		if m.running == 0 {
			m.mu.Unlock()
			return nil
		}
		ch := m.idle
		m.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (m *Manager) options(app string) (browser.Options, error) {
	if m.cfg.Options == nil {
		return browser.Options{}, nil
	}
	return m.cfg.Options(app)
}

// newBrowser makes a browser of app's kind on ts.
func (m *Manager) newBrowser(ctx context.Context, ts *typeState, app string) (browser.Browser, error) {
	opts, err := m.options(app)
	if err != nil {
		return nil, fmt.Errorf("browser options: %w", err)
	}
	return ts.bt.Factory.NewBrowser(ctx, opts)
}

// Close destroys every browser (leased ones included: Return becomes a
// no-op), fails waiting leases with ErrClosed, stops every timer and waits
// for the background work to end or ctx.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	if !m.closed {
		m.closed = true
		for p := range m.all {
			p.retire(ErrClosed, ReasonClosed)
			for _, e := range slices.Clone(p.entries) {
				p.destroy(e, "manager closed")
			}
		}
		m.log.Info().Msg("pools closed")
	}
	m.mu.Unlock()
	m.stop()
	if err := m.settle(ctx); err != nil {
		return fmt.Errorf("pool: close: %w", err)
	}
	return nil
}

// Lease is a browser leased from a pool.
type Lease struct {
	m        *Manager
	e        *entry
	b        browser.Browser
	app      string
	specific bool
	returned bool // guarded by m.mu
}

// Browser is the leased browser; it stays valid until Return.
func (l *Lease) Browser() browser.Browser { return l.b }

// Specific reports whether the browser comes from the app's specific pool
// (false: the general pool).
func (l *Lease) Specific() bool { return l.specific }

// Return gives the browser back; it does not block. A specific pool with a
// back sequence runs it (then the TTL check) and unlocks the browser;
// otherwise the browser is destroyed and the pool refills to its minimum.
// A second Return, or one after Close, does nothing.
func (l *Lease) Return() {
	m := l.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := l.take(); e != nil {
		e.p.returned(e)
	}
}

// take ends the lease (m.mu held) and gives its browser's entry, nil
// after a first Return or Reuse, or when the browser was destroyed
// meanwhile (Close).
func (l *Lease) take() *entry {
	if l.returned {
		return nil
	}
	l.returned = true
	e := l.e
	if e.lease != l || e.st != stLocked {
		return nil
	}
	e.lease = nil
	return e
}
