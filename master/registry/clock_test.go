package registry

import (
	"context"
	"errors"
	"maps"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock/clocktest"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/balance"
	"github.com/cloudbrowser-go/cloudbrowser/master/state"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// The registry's liveness and failover timing on a fake clock: each test
// advances clocktest past a deadline instead of waiting for it.

var clockSecret = []byte("0123456789abcdef-cluster-secret")

// clockApps: "multi" makes a new instance per placement, "notes" one per
// user.
var clockApps = AppsFunc(func(name string) (wire.App, bool) {
	switch name {
	case "multi":
		return wire.App{MountPoint: name, Strategy: wire.MultiInstance}, true
	case "notes":
		return wire.App{MountPoint: name, Strategy: wire.SingleInstancePerUser}, true
	}
	return wire.App{}, false
})

// clockRig is a registry on a fake clock and the RMI node it reaches
// workers with.
type clockRig struct {
	r    *Registry
	clk  *clocktest.Clock
	node *rmi.Node
}

func newClockRig(t *testing.T, cfg Config) *clockRig {
	t.Helper()
	testutil.NoLeaks(t)
	node, err := rmi.New(rmi.Config{Name: "master", Secret: clockSecret, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close() })
	clk := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg.Logger, cfg.Clock, cfg.Apps = testutil.Logger(t), clk, clockApps
	cfg.Balancer = balance.New(balance.Options{Strategy: balance.RoundRobin})
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close) // before the nodes close: it waits for its calls
	return &clockRig{r: r, clk: clk, node: node}
}

// clockWorker is a worker's Application Manager over real RMI.
type clockWorker struct {
	id      string
	conn    *rmi.Conn // the registry's end
	ref     *rmi.Ref
	creates atomic.Int64
	fail    atomic.Int64 // CreateInstance fails this many more times
	frozen  atomic.Bool  // Ping does not answer
}

func (f *clockWorker) CreateInstance(ctx context.Context, req wire.CreateInstance) error {
	f.creates.Add(1)
	if f.fail.Add(-1) >= 0 {
		return errors.New("out of memory")
	}
	return nil
}

func (f *clockWorker) CloseInstance(ctx context.Context, c wire.ClosedInstance) error { return nil }

func (f *clockWorker) Ping(ctx context.Context) error {
	if f.frozen.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

// worker starts worker id and registers it with insts.
func (g *clockRig) worker(t *testing.T, id string, insts ...wire.InstanceInfo) *clockWorker {
	t.Helper()
	f := &clockWorker{id: id}
	node, err := rmi.New(rmi.Config{Name: id, Secret: clockSecret, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := node.Register("apps", f); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = node.Serve(ctx, ln)
	}()
	t.Cleanup(func() {
		cancel()
		node.Close()
		<-served
	})
	if f.conn, err = g.node.Dial(ctx, ln.Addr().String()); err != nil {
		t.Fatal(err)
	}
	f.ref = f.conn.Object("apps")
	g.register(t, f, insts...)
	return f
}

func (g *clockRig) register(t *testing.T, f *clockWorker, insts ...wire.InstanceInfo) {
	t.Helper()
	if _, err := g.r.Register(wire.WorkerInfo{ID: f.id, HTTPAddr: "127.0.0.1:1", Gossip: f.id + ".g1"}, insts, f.ref); err != nil {
		t.Fatal(err)
	}
}

// instance puts an instance of app on worker wid, as a placement does.
func (g *clockRig) instance(t *testing.T, wid, app, owner string) string {
	t.Helper()
	epoch, err := g.r.epochs.next()
	if err != nil {
		t.Fatal(err)
	}
	iid := wid + ".inst" + owner
	g.r.mu.Lock()
	g.r.addInstanceLocked(wire.InstanceInfo{ID: iid, App: app, Owner: owner, Worker: wid, Created: g.clk.Now(), Epoch: epoch}, "", "", false)
	g.r.mu.Unlock()
	return iid
}

func (g *clockRig) alive(id string) bool {
	g.r.mu.Lock()
	defer g.r.mu.Unlock()
	_, ok := g.r.workers[id]
	return ok
}

func (g *clockRig) orphans() int {
	g.r.mu.Lock()
	defer g.r.mu.Unlock()
	return len(g.r.Moves.orphans)
}

// routeOf is the worker instance iid routes to, or the error's code.
func (g *clockRig) routeOf(iid string) string {
	rep, err := g.r.Route(wire.RouteRequest{Kind: wire.RouteInstance, InstanceID: iid})
	if err != nil {
		return codeOf(err)
	}
	return rep.WorkerID
}

func codeOf(err error) string {
	var c interface{ RMICode() string }
	if errors.As(err, &c) {
		return c.RMICode()
	}
	return "error: " + err.Error()
}

// armed waits until n timers are pending on the rig's clock: a goroutine
// of the registry is waiting on its clock, so an advance now reaches it.
func (g *clockRig) armed(t *testing.T, n int, what string) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, testutil.Cond(what, func() bool { return g.clk.Active() == n }))
}

// TestDeadAfter: a worker whose connection dropped is declared dead when
// DeadAfter passes without it registering again (its instance then moves
// to another worker); coming back, or a verdict of the gossip layer, ends
// the countdown.
func TestDeadAfter(t *testing.T) {
	const deadAfter = 10 * time.Second
	for _, tc := range []struct {
		name string
		// meanwhile runs DeadAfter/2 after the disconnection.
		meanwhile func(g *clockRig, a *clockWorker)
		dead      bool // w-a gone once DeadAfter has passed
	}{
		{"silent: dead", func(*clockRig, *clockWorker) {}, true},
		{"back in time: kept", func(g *clockRig, a *clockWorker) { g.register(t, a) }, false},
		{"gossip said dead first", func(g *clockRig, a *clockWorker) { g.r.Dead(a.id, "gossip: failed") }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newClockRig(t, Config{DeadAfter: deadAfter})
			a := g.worker(t, "w-a")
			g.worker(t, "w-b")
			iid := g.instance(t, "w-a", "multi", "alice")
			g.r.Disconnected("w-a", a.conn)
			if got := g.routeOf(iid); got != "w-a" {
				t.Fatalf("disconnected: routes to %s, want w-a (routes kept until dead)", got)
			}
			g.clk.Advance(deadAfter / 2)
			tc.meanwhile(g, a)
			g.clk.Advance(deadAfter/2 - time.Nanosecond)
			if !tc.dead && !g.alive("w-a") {
				t.Fatal("declared dead before DeadAfter")
			}
			g.clk.Advance(time.Nanosecond)
			if alive := g.alive("w-a"); alive == tc.dead {
				t.Fatalf("after DeadAfter: alive %v, want %v", alive, !tc.dead)
			}
			if n := g.clk.Active(); n != 0 {
				t.Fatalf("%d timers left", n)
			}
			want := "w-a"
			if tc.dead {
				want = "w-b" // failover
			}
			testutil.Eventually(t, 10*time.Second, func() error {
				if got := g.routeOf(iid); got != want {
					return errors.New("routes to " + got + ", want " + want)
				}
				return nil
			})
		})
	}
}

// TestFailoverRetry: a re-placement that fails is tried again a second
// later on the registry's clock; meanwhile the instance answers "moving".
func TestFailoverRetry(t *testing.T) {
	g := newClockRig(t, Config{})
	g.worker(t, "w-a")
	b := g.worker(t, "w-b")
	b.fail.Store(1)
	iid := g.instance(t, "w-a", "multi", "alice")
	g.r.Dead("w-a", "test")
	g.armed(t, 1, "the retry's timer")
	if n := b.creates.Load(); n != 1 {
		t.Fatalf("%d restores tried, want 1", n)
	}
	if got := g.routeOf(iid); got != wire.CodeInstanceMoving {
		t.Fatalf("while retrying: %s, want %s", got, wire.CodeInstanceMoving)
	}
	g.clk.Advance(time.Second - time.Nanosecond)
	if n := b.creates.Load(); n != 1 {
		t.Fatalf("retried early: %d restores", n)
	}
	g.clk.Advance(time.Nanosecond)
	testutil.Eventually(t, 10*time.Second, testutil.Cond("the instance placed on w-b", func() bool { return g.routeOf(iid) == "w-b" }))
	if n := b.creates.Load(); n != 2 {
		t.Fatalf("%d restores, want 2", n)
	}
}

// TestSuspectPing: a worker gossip says failed is asked over RMI first; it
// is removed only if it does not answer within PingTimeout.
func TestSuspectPing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		frozen bool
	}{
		{"answers: kept", false},
		{"frozen: dead after PingTimeout", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newClockRig(t, Config{})
			a := g.worker(t, "w-a")
			a.frozen.Store(tc.frozen)
			g.r.SuspectMember("w-a", "w-a.g1", "gossip: failed")
			pinging := func() bool {
				g.r.mu.Lock()
				defer g.r.mu.Unlock()
				return g.r.workers["w-a"].pinging
			}
			if !tc.frozen {
				testutil.Eventually(t, 10*time.Second, testutil.Cond("the ping's answer", func() bool { return !pinging() }))
				if !g.alive("w-a") || g.clk.Active() != 0 {
					t.Fatalf("an answering worker: alive %v, %d timers", g.alive("w-a"), g.clk.Active())
				}
				return
			}
			g.armed(t, 1, "the ping's timeout")
			g.clk.Advance(PingTimeout - time.Nanosecond)
			if !g.alive("w-a") || !pinging() {
				t.Fatal("the ping gave up early")
			}
			g.clk.Advance(time.Nanosecond)
			testutil.Eventually(t, 10*time.Second, testutil.Cond("w-a removed", func() bool { return !g.alive("w-a") }))
		})
	}
}

// TestHolderWaitOnClock: a placement for a user whose instance is on an
// unreachable (not yet dead) worker waits for it HolderWait on the clock,
// then answers "moving"; it never makes a second instance.
func TestHolderWaitOnClock(t *testing.T) {
	g := newClockRig(t, Config{DeadAfter: time.Hour})
	a := g.worker(t, "w-a")
	b := g.worker(t, "w-b")
	g.instance(t, "w-a", "notes", "alice")
	g.r.Disconnected("w-a", a.conn)
	done := make(chan error, 1)
	go func() {
		_, err := g.r.Placer.Place(context.Background(), wire.PlaceRequest{App: "notes", User: "alice", NoBrowser: true})
		done <- err
	}()
	g.armed(t, 2, "the dead-after timer and the placement's wait")
	g.clk.Advance(HolderWait - time.Nanosecond)
	select {
	case err := <-done:
		t.Fatalf("the placement gave up early: %v", err)
	default:
	}
	g.clk.Advance(time.Nanosecond)
	if err := <-done; codeOf(err) != wire.CodeInstanceMoving {
		t.Fatalf("after HolderWait: %v, want %s", err, wire.CodeInstanceMoving)
	}
	if n := b.creates.Load(); n != 0 {
		t.Fatalf("%d instances created elsewhere", n)
	}
}

// TestStartingGrace: with no worker yet, a master says "starting" for
// startingGrace after its start, then "no workers".
func TestStartingGrace(t *testing.T) {
	g := newClockRig(t, Config{})
	for _, tc := range []struct {
		advance time.Duration
		want    string
	}{
		{0, wire.CodeStarting},
		{startingGrace - time.Nanosecond, wire.CodeStarting},
		{time.Nanosecond, wire.CodeNoWorkers},
	} {
		g.clk.Advance(tc.advance)
		_, err := g.r.Route(wire.RouteRequest{Kind: wire.RouteApp, App: "multi"})
		if got := codeOf(err); got != tc.want {
			t.Fatalf("%v after the start: %s, want %s", g.clk.Now().Sub(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), got, tc.want)
		}
	}
}

// TestStaleReports: a worker whose load reports stopped for staleReports
// periods on the clock is not offered for Application URLs while another
// reports, and the status calls it silent; when all are stale, all are
// offered.
func TestStaleReports(t *testing.T) {
	const period = time.Second
	g := newClockRig(t, Config{ReportPeriod: period})
	g.worker(t, "w-a")
	g.worker(t, "w-b")
	offered := func() []string {
		seen := map[string]bool{}
		for range 4 { // round-robin goes through every candidate
			rep, err := g.r.Route(wire.RouteRequest{Kind: wire.RouteApp, App: "multi"})
			if err != nil {
				t.Fatal(err)
			}
			seen[rep.WorkerID] = true
		}
		return slices.Sorted(maps.Keys(seen))
	}
	silent := func() []string {
		var st wire.ClusterStatus
		g.r.Status(&st)
		var ids []string
		for _, w := range st.Workers {
			if w.Silent {
				ids = append(ids, w.ID)
			}
		}
		return ids
	}
	for _, tc := range []struct {
		name            string
		step            func()
		offered, silent []string
	}{
		{"both fresh", func() {}, []string{"w-a", "w-b"}, nil},
		{"w-b reports just within w-a's time", func() {
			g.clk.Advance(staleReports*period - time.Nanosecond)
			if err := g.r.Report("w-b", wire.Load{}); err != nil {
				t.Fatal(err)
			}
		}, []string{"w-a", "w-b"}, nil},
		{"w-a stale", func() { g.clk.Advance(time.Nanosecond) }, []string{"w-b"}, []string{"w-a"}},
		{"both stale", func() { g.clk.Advance(staleReports * period) }, []string{"w-a", "w-b"}, []string{"w-a", "w-b"}},
	} {
		tc.step()
		if got := offered(); !slices.Equal(got, tc.offered) {
			t.Fatalf("%s: offered %v, want %v", tc.name, got, tc.offered)
		}
		if got := silent(); !slices.Equal(got, tc.silent) {
			t.Fatalf("%s: silent %v, want %v", tc.name, got, tc.silent)
		}
	}
}

// TestRecoveredInstancesWait: instances loaded from the store at a master
// start wait DeadAfter on the clock for their worker to report them, then
// are placed again.
func TestRecoveredInstancesWait(t *testing.T) {
	const deadAfter = 10 * time.Second
	st, err := state.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	before := newClockRig(t, Config{Store: st})
	before.instance(t, "w-a", "multi", "alice")
	if err := before.r.journal.sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	before.r.Close()

	g := newClockRig(t, Config{Store: st, DeadAfter: deadAfter})
	if n, err := g.r.RecoverInstances(); n != 1 || err != nil {
		t.Fatalf("recovered %d, %v; want 1", n, err)
	}
	g.clk.Advance(deadAfter - time.Nanosecond)
	if n := g.orphans(); n != 0 {
		t.Fatalf("%d orphans before DeadAfter", n)
	}
	g.clk.Advance(time.Nanosecond)
	// No worker to take it: it waits as an orphan.
	testutil.Eventually(t, 10*time.Second, testutil.Cond("the instance orphaned", func() bool { return g.orphans() == 1 }))
}
