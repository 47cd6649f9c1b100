package jobs

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock/clocktest"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/state"
)

func newClock() *clocktest.Clock { return clocktest.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)) }

// runner is a fake Runner: it records runs and cancels, and refuses for
// the workers in refuse.
type runner struct {
	mu      sync.Mutex
	runs    []launch
	cancels []cancelNote
	refuse  map[string]bool
	onRun   func(worker string, run wire.JobRun)
}

func (r *runner) Run(_ context.Context, worker string, run wire.JobRun) error {
	r.mu.Lock()
	if r.refuse[worker] {
		r.mu.Unlock()
		return errors.New("no free slot")
	}
	r.runs = append(r.runs, launch{worker: worker, run: run})
	f := r.onRun
	r.mu.Unlock()
	if f != nil {
		f(worker, run)
	}
	return nil
}

func (r *runner) Cancel(_ context.Context, worker, id string, attempt int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cancels = append(r.cancels, cancelNote{worker, id, attempt})
	return nil
}

// take returns and forgets the runs recorded so far.
func (r *runner) take() []launch {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.runs
	r.runs = nil
	return out
}

func (r *runner) setRefuse(worker string, v bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refuse == nil {
		r.refuse = map[string]bool{}
	}
	r.refuse[worker] = v
}

// env is a queue with a fake clock, runner, DNS and robots.txt.
type env struct {
	t      *testing.T
	q      *Queue
	clock  *clocktest.Clock
	runner *runner
	st     *state.Store
	dns    map[string][]netip.Addr
	robots map[string]robotsAnswer
	mu     sync.Mutex
	fetch  map[string]int
}

type robotsAnswer struct {
	body   string
	status int
	err    error
}

// newEnv makes an env; mod changes the config first. Hosts *.test resolve
// to 93.184.216.<n> unless dns says otherwise.
func newEnv(t *testing.T, mod func(*Config)) *env {
	return newEnvOn(t, "", mod)
}

func newEnvOn(t *testing.T, path string, mod func(*Config)) *env {
	t.Helper()
	st, err := state.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, clock: newClock(), runner: &runner{}, st: st,
		dns:    map[string][]netip.Addr{},
		robots: map[string]robotsAnswer{}, fetch: map[string]int{}}
	e.q = e.open(mod)
	t.Cleanup(func() { st.Close() })
	return e
}

func (e *env) open(mod func(*Config)) *Queue {
	e.t.Helper()
	cfg := DefaultConfig()
	cfg.Clock = e.clock
	cfg.Runner = e.runner
	cfg.Defaults = Limits{Concurrent: 100}
	cfg.Resolver = func(_ context.Context, host string) ([]netip.Addr, error) {
		e.mu.Lock()
		defer e.mu.Unlock()
		if a, ok := e.dns[host]; ok {
			return a, nil
		}
		// Every other name gets an address of its own.
		a := netip.AddrFrom4([4]byte{93, 184, 216, byte(len(e.dns) + 1)})
		e.dns[host] = []netip.Addr{a}
		return e.dns[host], nil
	}
	cfg.Robots = func(_ context.Context, scheme, hostport string) ([]byte, int, error) {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.fetch[scheme+"://"+hostport]++
		a, ok := e.robots[hostport]
		if !ok {
			return nil, 404, nil
		}
		return []byte(a.body), a.status, a.err
	}
	if mod != nil {
		mod(&cfg)
	}
	q, err := New(cfg, e.st)
	if err != nil {
		e.t.Fatal(err)
	}
	return q
}

func (e *env) submit(spec wire.JobSpec) Job {
	e.t.Helper()
	if spec.Kind == "" {
		spec.Kind = wire.JobCheck
	}
	j, err := e.q.Submit(context.Background(), admit(e.t, spec))
	if err != nil {
		e.t.Fatalf("submit %s: %v", spec.URL, err)
	}
	return j
}

// admit is Admit of a spec the test means to be valid.
func admit(tb testing.TB, spec wire.JobSpec, opts ...AdmitOption) Spec {
	tb.Helper()
	s, err := Admit(spec, opts...)
	if err != nil {
		tb.Fatalf("admit %+v: %v", spec, err)
	}
	return s
}

func admitAll(tb testing.TB, specs []wire.JobSpec) []Spec {
	tb.Helper()
	out, err := AdmitBatch(specs)
	if err != nil {
		tb.Fatalf("admit batch: %v", err)
	}
	return out
}

func monitorSpec(tb testing.TB, spec wire.JobSpec) Spec {
	tb.Helper()
	return admit(tb, spec, AsMonitor())
}

func (e *env) check(url string) Job { return e.submit(wire.JobSpec{Kind: wire.JobCheck, URL: url}) }

func (e *env) pump() []launch {
	e.q.Pump(context.Background())
	return e.runner.take()
}

func (e *env) tick() []launch {
	e.q.Tick(context.Background())
	return e.runner.take()
}

func (e *env) done(l launch, o wire.JobOutcome) error {
	o.ID, o.Attempt = l.run.ID, l.run.Attempt
	return e.q.Workers().Done(context.Background(), l.worker, o)
}

func (e *env) state(id string) string {
	e.t.Helper()
	j, err := e.q.Get(id)
	if err != nil {
		e.t.Fatal(err)
	}
	return j.State
}

func urls(ls []launch) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l.run.Spec.URL)
	}
	return out
}

func workersOf(ls []launch) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l.worker)
	}
	return out
}

func freeSlots(q *Queue, worker string) int {
	for _, w := range q.Stats().Workers {
		if w.ID == worker {
			return w.Free
		}
	}
	return -1
}

func hostURL(host string, n int) string { return fmt.Sprintf("http://%s/%d", host, n) }

func openMem(t *testing.T) (*state.Store, error) {
	t.Helper()
	st, err := state.Open("")
	if err != nil {
		t.Fatal(err)
	}
	return st, nil
}
