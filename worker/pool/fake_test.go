package pool

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock/clocktest"
	"github.com/cloudbrowser-go/cloudbrowser/internal/sequence"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/seqrun"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// fakeFactory makes browser.Null browsers, numbered from 1, and fails on
// demand.
type fakeFactory struct {
	browser.Null
	mu    sync.Mutex
	ids   map[browser.Browser]int
	all   []browser.Browser
	fails int // the next n creations fail
}

func newFactory() *fakeFactory { return &fakeFactory{ids: map[browser.Browser]int{}} }

func (f *fakeFactory) NewBrowser(ctx context.Context, opts browser.Options) (browser.Browser, error) {
	f.mu.Lock()
	if f.fails > 0 {
		f.fails--
		f.mu.Unlock()
		return nil, errors.New("fake: no more browsers")
	}
	f.mu.Unlock()
	b, err := f.Null.NewBrowser(ctx, opts)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.all = append(f.all, b)
	f.ids[b] = len(f.all)
	f.mu.Unlock()
	return b, nil
}

func (f *fakeFactory) id(b browser.Browser) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ids[b]
}

func (f *fakeFactory) browser(id int) browser.Browser {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.all[id-1]
}

func (f *fakeFactory) open() int {
	s, _ := f.Null.Stats(context.Background())
	return s.Browsers
}

func closed(b browser.Browser) bool {
	select {
	case <-b.Done():
		return true
	default:
		return false
	}
}

// Test sequences are one eval step whose text names them; fakeRunner
// recognizes them by it.
var (
	seqInit  = sequence.Sequence{sequence.Eval("init")}
	seqBack  = sequence.Sequence{sequence.Eval("back")}
	seqTouch = sequence.Sequence{sequence.Eval("touch")}
)

const searchURL = "http://app.test/search"

// fakeRunner records runs as "label#browser" and plays their effect on the
// Null browser: init logs in (cookie sid=<browser id>) and opens the search
// page, back opens the search page, a navigate step loads its URL.
type fakeRunner struct {
	f     *fakeFactory
	mu    sync.Mutex
	runs  []string
	fails map[string]int           // label → failures to come (-1 = always)
	gates map[string]chan struct{} // label → run waits until closed
}

func (r *fakeRunner) Run(ctx context.Context, b browser.Browser, q sequence.Sequence) error {
	label := "?"
	if len(q) > 0 {
		switch q[0].Kind {
		case sequence.KindEval:
			label = q[0].JS
		case sequence.KindNavigate:
			label = "nav"
		}
	}
	id := r.f.id(b)
	r.mu.Lock()
	r.runs = append(r.runs, fmt.Sprintf("%s#%d", label, id))
	gate := r.gates[label]
	fail := r.fails[label]
	if fail > 0 {
		r.fails[label]--
	}
	r.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if fail != 0 {
		return &seqrun.StepError{Index: 0, Kind: sequence.KindEval, Step: label, Err: errors.New("fake failure")}
	}
	switch label {
	case "init":
		if err := b.SetCookies(ctx, []browser.Cookie{{Name: "sid", Value: fmt.Sprint(id), Domain: "app.test", Path: "/"}}); err != nil {
			return err
		}
		return b.Navigate(ctx, searchURL)
	case "back":
		return b.Navigate(ctx, searchURL)
	case "nav":
		return b.Navigate(ctx, q[0].URL)
	}
	if closed(b) {
		return browser.ErrClosed
	}
	return nil
}

func (r *fakeRunner) count(prefix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.runs {
		if strings.HasPrefix(s, prefix) {
			n++
		}
	}
	return n
}

func (r *fakeRunner) setFails(label string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fails[label] = n
}

func (r *fakeRunner) gate(label string) (open func()) {
	ch := make(chan struct{})
	r.mu.Lock()
	r.gates[label] = ch
	r.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			delete(r.gates, label)
			r.mu.Unlock()
			close(ch)
		})
	}
}

// env is a Manager over fakes.
type env struct {
	t     *testing.T
	clock *clocktest.Clock
	f     *fakeFactory
	r     *fakeRunner
	m     *Manager
	logs  *testutil.SyncBuffer
}

type envOpt func(*ManagerConfig)

// newEnv makes a manager with one chromium type of global limit max and
// generalMin warm general-pool browsers, settled.
func newEnv(t *testing.T, max, generalMin int, opts ...envOpt) *env {
	t.Helper()
	e := &env{t: t, clock: clocktest.New(time.Date(2026, 11, 1, 10, 0, 0, 0, time.UTC)), f: newFactory(), logs: &testutil.SyncBuffer{}}
	e.r = &fakeRunner{f: e.f, fails: map[string]int{}, gates: map[string]chan struct{}{}}
	cfg := ManagerConfig{
		Types:  map[string]BrowserType{TypeChromium: {Factory: e.f, Max: max, GeneralMin: generalMin}},
		Runner: e.r,
		Clock:  e.clock,
		Logger: zerolog.New(e.logs).Level(zerolog.DebugLevel),
	}
	for _, o := range opts {
		o(&cfg)
	}
	m, err := NewManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.m = m
	e.clock.OnFire(e.settle)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
		if n := e.f.open(); n != 0 {
			t.Errorf("%d browsers left open after Close", n)
		}
		if n := e.clock.Active(); n != 0 {
			t.Errorf("%d timers left after Close", n)
		}
	})
	e.settle()
	return e
}

func (e *env) settle() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.m.settle(ctx); err != nil {
		e.t.Fatal("background work did not settle:", err)
	}
}

// lease leases and settles; it fails the test on error.
func (e *env) lease(app string, cfg *Config) *Lease {
	e.t.Helper()
	l, err := e.m.Lease(context.Background(), app, cfg)
	if err != nil {
		e.t.Fatalf("lease %s: %v", app, err)
	}
	e.settle()
	return l
}

func (e *env) ret(l *Lease) {
	l.Return()
	e.settle()
}

func (e *env) id(l *Lease) int { return e.f.id(l.Browser()) }

// pool returns the stats of app's pool ("" = the general pool).
func (e *env) pool(app string) Stats {
	e.t.Helper()
	for _, p := range e.m.Stats().Pools {
		if p.App == app {
			return p
		}
	}
	e.t.Fatalf("no pool %q", app)
	return Stats{}
}

// cfg is an enabled pool with the test init and back sequences.
func cfg(min, max int) *Config {
	return &Config{Enabled: true, MinSize: min, MaxSize: max, Init: seqInit, Back: seqBack}
}
