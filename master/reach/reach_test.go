package reach

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock/clocktest"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/registry"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// workerServer answers /healthz as worker id would (X-CB-Worker), and
// counts the probes.
func workerServer(t *testing.T, id string) (addr string, hits *atomic.Int64) {
	hits = &atomic.Int64{}
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if id != "" {
			w.Header().Set("X-CB-Worker", id)
		}
		if r.URL.Path != "/healthz" || id == "" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, `{"status":"ok","worker":%q}`, id)
	}))
	t.Cleanup(s.Close)
	return s.Listener.Addr().String(), hits
}

// views is a settable worker list (what the registry reports).
type views struct {
	mu    sync.Mutex
	vs    []registry.WorkerView
	calls atomic.Int64 // scans
}

func (v *views) set(vs ...registry.WorkerView) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.vs = vs
}

func (v *views) get() []registry.WorkerView {
	v.calls.Add(1)
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]registry.WorkerView(nil), v.vs...)
}

// start runs a Prober that scans only when kicked (Scan is an hour), so
// the test decides when it looks.
func start(t *testing.T, cfg Config) *Prober {
	t.Helper()
	cfg.Scan = time.Hour
	p := New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return p
}

// waitResult waits for a result of worker id at addr.
func waitResult(t *testing.T, p *Prober, id, addr string) Result {
	t.Helper()
	var res Result
	testutil.Eventually(t, 30*time.Second, func() error {
		var ok bool
		if res, ok = p.Result(id, addr); !ok {
			p.Kick()
			return fmt.Errorf("no result for %s at %s yet", id, addr)
		}
		return nil
	})
	return res
}

// TestProbeOutcomes: a worker answering as itself is reachable; a refused
// port, an unroutable address (TEST-NET-1), another worker's port and a
// port of something else are unreachable, each with an error saying why.
func TestProbeOutcomes(t *testing.T) {
	good, _ := workerServer(t, "w-good")
	other, _ := workerServer(t, "w-other")
	notWorker, _ := workerServer(t, "")
	refused := testutil.RefusedAddr(t)
	const unroutable = "192.0.2.1:8000" // TEST-NET-1 (RFC 5737): never routed
	var v views
	v.set(
		registry.WorkerView{ID: "w-good", HTTPAddr: good},
		registry.WorkerView{ID: "w-refused", HTTPAddr: refused},
		registry.WorkerView{ID: "w-unroutable", HTTPAddr: unroutable},
		registry.WorkerView{ID: "w-sharing", HTTPAddr: other},
		registry.WorkerView{ID: "w-elsewhere", HTTPAddr: notWorker},
	)
	logs := &testutil.SyncBuffer{}
	// A short probe timeout: the unroutable address either fails at once
	// (no route) or never answers; this bounds the wait, it asserts nothing.
	p := start(t, Config{Workers: v.get, Timeout: time.Second, Logger: zerolog.New(logs)})

	for _, tc := range []struct {
		id, addr, state, err string
	}{
		{"w-good", good, StateReachable, ""},
		{"w-refused", refused, StateUnreachable, "connection refused"},
		{"w-unroutable", unroutable, StateUnreachable, unroutable},
		{"w-sharing", other, StateUnreachable, "answered by worker w-other, not w-sharing"},
		{"w-elsewhere", notWorker, StateUnreachable, "HTTP 404 from something that is not a CloudBrowser worker"},
	} {
		res := waitResult(t, p, tc.id, tc.addr)
		if res.State != tc.state || !strings.Contains(res.Error, tc.err) || (tc.err == "") != (res.Error == "") {
			t.Errorf("%s at %s: %+v, want %s with an error containing %q", tc.id, tc.addr, res, tc.state, tc.err)
		}
	}
	for _, id := range []string{"w-refused", "w-unroutable", "w-sharing", "w-elsewhere"} {
		if !logs.Contains(`"worker":"` + id + `"`) {
			t.Errorf("no warning logged for %s:\n%s", id, logs)
		}
	}
	if logs.Contains(`"worker":"w-good"`) {
		t.Errorf("a reachable worker was logged:\n%s", logs)
	}
}

// TestAddressChange: a worker registered again at another address is
// probed there, and the old address's result is not shown for it; coming
// back reachable is logged.
func TestAddressChange(t *testing.T) {
	good, _ := workerServer(t, "w-a")
	refused := testutil.RefusedAddr(t)
	var v views
	v.set(registry.WorkerView{ID: "w-a", HTTPAddr: refused, Incarnation: "1"})
	logs := &testutil.SyncBuffer{}
	p := start(t, Config{Workers: v.get, Logger: zerolog.New(logs)})
	if res := waitResult(t, p, "w-a", refused); res.State != StateUnreachable {
		t.Fatalf("at the refused address: %+v", res)
	}
	v.set(registry.WorkerView{ID: "w-a", HTTPAddr: good, Incarnation: "2"})
	if _, ok := p.Result("w-a", good); ok {
		t.Fatal("a result for the new address before any probe of it")
	}
	if res := waitResult(t, p, "w-a", good); res.State != StateReachable {
		t.Fatalf("at the new address: %+v", res)
	}
	if _, ok := p.Result("w-a", refused); ok {
		t.Error("the old address still has a result")
	}
	if !logs.Contains("worker reachable again") {
		t.Errorf("no recovery logged:\n%s", logs)
	}
}

// TestReprobeAndForget: a worker is probed again once Every has passed on
// the clock, not before; a worker gone from the list is forgotten.
func TestReprobeAndForget(t *testing.T) {
	addr, hits := workerServer(t, "w-a")
	clk := clocktest.New(time.Now())
	var v views
	v.set(registry.WorkerView{ID: "w-a", HTTPAddr: addr})
	p := start(t, Config{Workers: v.get, Every: time.Minute, Clock: clk})
	waitResult(t, p, "w-a", addr)
	if n := hits.Load(); n != 1 {
		t.Fatalf("%d probes, want 1", n)
	}
	// Scans before Every has passed start no probe. Two more scans than
	// now means the first of them is over (Run scans one at a time).
	c0 := v.calls.Load()
	testutil.Eventually(t, 30*time.Second, func() error {
		p.Kick()
		if v.calls.Load() < c0+2 {
			return fmt.Errorf("waiting for two scans")
		}
		return nil
	})
	p.mu.Lock()
	probing := p.entries["w-a"].probing
	p.mu.Unlock()
	if n := hits.Load(); n != 1 || probing {
		t.Fatalf("before a minute passed: %d probes (probing %v), want 1", n, probing)
	}
	clk.Advance(time.Minute)
	testutil.Eventually(t, 30*time.Second, func() error {
		p.Kick()
		if n := hits.Load(); n < 2 {
			return fmt.Errorf("%d probes, want a second one after a minute", n)
		}
		return nil
	})
	v.set()
	testutil.Eventually(t, 30*time.Second, func() error {
		p.Kick()
		if _, ok := p.Result("w-a", addr); ok {
			return fmt.Errorf("w-a is still known")
		}
		return nil
	})
}

// TestAnnotate: statuses get the result of their own address only; a
// connected worker without one asks for a scan; a nil Prober is a no-op.
func TestAnnotate(t *testing.T) {
	refused := testutil.RefusedAddr(t)
	var v views
	v.set(registry.WorkerView{ID: "w-a", HTTPAddr: refused})
	p := start(t, Config{Workers: v.get})
	ws := []wire.WorkerStatus{{WorkerInfo: wire.WorkerInfo{ID: "w-a", HTTPAddr: refused}, State: "connected"}}
	// No Kick here: Annotate alone must get the worker probed.
	testutil.Eventually(t, 30*time.Second, func() error {
		p.Annotate(ws)
		if ws[0].Reach == "" {
			return fmt.Errorf("not annotated yet")
		}
		return nil
	})
	if ws[0].Reach != StateUnreachable || !strings.Contains(ws[0].ReachError, "refused") || ws[0].ReachChecked.IsZero() {
		t.Errorf("annotated %+v", ws[0])
	}
	other := []wire.WorkerStatus{{WorkerInfo: wire.WorkerInfo{ID: "w-a", HTTPAddr: "127.0.0.1:9"}, State: "connected"}}
	p.Annotate(other)
	if other[0].Reach != "" {
		t.Errorf("another address's status got %q", other[0].Reach)
	}
	var none *Prober
	none.Annotate(ws) // must not panic
}
