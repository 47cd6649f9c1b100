package master

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock/clocktest"
	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/ids"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/balance"
	"github.com/cloudbrowser-go/cloudbrowser/master/registry"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

func TestMain(m *testing.M) { testutil.Main(m) }

const testSecret = "0123456789abcdef0123456789abcdef"

var testApps = []wire.App{
	{Name: "Hello", MountPoint: "hello", Entry: "https://example.test/", Strategy: wire.SingleAppInstance, Public: true},
	{Name: "Notes", MountPoint: "notes", Entry: "https://example.test/", Strategy: wire.SingleInstancePerUser, Public: true},
	{Name: "Multi", MountPoint: "multi", Entry: "https://example.test/", Strategy: wire.MultiInstance, Public: false},
}

// testDeadAfter is the tests' DeadAfter. It passes on the master's fake
// clock only when a test advances it (clockOf), however slow the machine.
const testDeadAfter = 10 * time.Second

// testConfig is a test master's configuration: testApps, strategy, and a
// fake clock, so no dead-after timer, failover retry, placement wait or
// ping timeout fires unless the test advances it. The clock starts at the
// real time, so what the master stamps with it reads as now.
func testConfig(strategy balance.Strategy) Config {
	return Config{Secret: testSecret, AdminToken: "tok", Apps: testApps, Balancer: strategy,
		DeadAfter: testDeadAfter, Clock: clocktest.New(time.Now()), Logger: zerolog.Nop()}
}

// clockOf is the fake clock m runs on (testConfig's, or a test's own).
func clockOf(m *Master) *clocktest.Clock { return m.cfg.Clock.(*clocktest.Clock) }

// armed waits until n timers are pending on m's clock: the master is
// waiting on its clock (a dead-after countdown, a placement's wait, a
// ping), so an advance now reaches it.
func armed(t *testing.T, m *Master, n int, what string) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, testutil.Cond(what, func() bool { return clockOf(m).Active() == n }))
}

// stillArmed fails the test unless n timers are still pending on m's
// clock: an advance just short of a deadline fired none of them.
func stillArmed(t *testing.T, m *Master, n int, when string) {
	t.Helper()
	if got := clockOf(m).Active(); got != n {
		t.Fatalf("%s: %d timers pending, want %d", when, got, n)
	}
}

// startMaster starts a master with testConfig, closed when the test ends.
func startMaster(t *testing.T, strategy balance.Strategy) *Master {
	t.Helper()
	return startConfig(t, testConfig(strategy))
}

// startConfig starts a master with cfg, closed when the test ends.
func startConfig(t *testing.T, cfg Config) *Master {
	t.Helper()
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// fakeWorker is a worker's Application Manager reached over real RMI.
type fakeWorker struct {
	id       string
	node     *rmi.Node
	conn     *rmi.Conn
	creates  atomic.Int64
	fail     atomic.Bool
	failAdd  atomic.Bool // AddApplication fails
	mu       sync.Mutex
	apps     map[string]wire.App
	released []wire.FencedInstance
	frozen   atomic.Bool       // Ping does not answer
	epochs   map[string]uint64 // instance -> epoch it was created under
	gate     chan struct{}     // non-nil: CreateInstance waits for it
	failOnce atomic.Bool       // the next CreateInstance fails
	// snapshots counts SnapshotInstance calls.
	snapshots atomic.Int64
	resumes   atomic.Int64 // ResumeInstance calls
	closeAsks []string     // instances CloseInstance was asked for, under mu
}

func (f *fakeWorker) Ping(ctx context.Context) error {
	if f.frozen.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (f *fakeWorker) AddApplication(ctx context.Context, app wire.App) error {
	if f.failAdd.Load() {
		return errors.New("disk full")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.apps[app.MountPoint] = app
	return nil
}

func (f *fakeWorker) RemoveApplication(ctx context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.apps, name)
	return nil
}

func (f *fakeWorker) CreateInstance(ctx context.Context, req wire.CreateInstance) error {
	f.creates.Add(1)
	f.mu.Lock()
	gate := f.gate
	f.mu.Unlock()
	if gate != nil {
		<-gate
	}
	if f.fail.Load() || f.failOnce.Swap(false) {
		return errors.New("out of browsers")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.epochs == nil {
		f.epochs = map[string]uint64{}
	}
	f.epochs[req.InstanceID] = max(f.epochs[req.InstanceID], req.Epoch) // as a worker does: the newest placement
	return nil
}

// epoch is the epoch f created iid under (0: never).
func (f *fakeWorker) epoch(iid string) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.epochs[iid]
}

func (f *fakeWorker) CloseInstance(ctx context.Context, c wire.ClosedInstance) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closeAsks = append(f.closeAsks, c.ID)
	return nil
}

// SnapshotInstance counts the snapshots a migration asked for (a real
// worker holds the browsers' input from then until the move).
func (f *fakeWorker) SnapshotInstance(ctx context.Context, iid string) error {
	f.snapshots.Add(1)
	return nil
}

// ResumeInstance counts the holds given back after a failed migration.
func (f *fakeWorker) ResumeInstance(ctx context.Context, iid string) error {
	f.resumes.Add(1)
	return nil
}

func (f *fakeWorker) ReleaseInstance(ctx context.Context, r wire.FencedInstance) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, r)
	return nil
}

func (f *fakeWorker) OpenBrowserFor(ctx context.Context, req wire.OpenBrowser) (string, error) {
	return "b" + req.User, nil
}

func (f *fakeWorker) hasApp(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.apps[name]
	return ok
}

func addWorker(t *testing.T, m *Master, id string, insts ...wire.InstanceInfo) *fakeWorker {
	t.Helper()
	return addWorkerAt(t, m, id, "127.0.0.1:1", insts...)
}

// addWorkerAt registers a fake worker that advertises addr.
func addWorkerAt(t *testing.T, m *Master, id, addr string, insts ...wire.InstanceInfo) *fakeWorker {
	t.Helper()
	f := &fakeWorker{id: id, apps: map[string]wire.App{}}
	node, err := rmi.New(rmi.Config{Name: id, Secret: []byte(testSecret)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close() })
	f.node = node
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := node.Dial(ctx, m.RMIAddr())
	if err != nil {
		t.Fatal(err)
	}
	f.conn = c
	info := wire.WorkerInfo{ID: id, HTTPAddr: addr, Gossip: id + ".g1"}
	rep, err := contract.WorkerManagerClient{C: c}.Register(ctx, info, insts, rmi.Export(f))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range rep.Apps {
		f.apps[a.MountPoint] = a
	}
	return f
}

func (f *fakeWorker) place(t *testing.T, app, user string) (wire.Placement, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return contract.WorkerManagerClient{C: f.conn}.Place(ctx, wire.PlaceRequest{App: app, User: user})
}

// placed is a placement's answer.
type placed struct {
	p   wire.Placement
	err error
}

// placeAsync asks for user's instance of app from f; the answer comes on
// the channel.
func (f *fakeWorker) placeAsync(t *testing.T, app, user string) <-chan placed {
	got := make(chan placed, 1)
	go func() {
		p, err := f.place(t, app, user)
		got <- placed{p, err}
	}()
	return got
}

// stillWaiting fails the test if the placement has answered.
func stillWaiting(t *testing.T, got <-chan placed, when string) {
	t.Helper()
	select {
	case r := <-got:
		t.Fatalf("%s: the placement answered %+v %v, want it waiting", when, r.p, r.err)
	default:
	}
}

func (f *fakeWorker) route(t *testing.T, kind, app, iid string) (wire.RouteReply, error) {
	t.Helper()
	return contract.RouterClient{C: f.conn}.Route(context.Background(), wire.RouteRequest{Kind: kind, App: app, InstanceID: iid})
}

func code(err error) string {
	var re *rmi.RemoteError
	if errors.As(err, &re) {
		return re.Code
	}
	var local interface{ RMICode() string } // an in-process call
	if errors.As(err, &local) {
		return local.RMICode()
	}
	if err != nil {
		return "error: " + err.Error()
	}
	return ""
}

func TestRegisterPushesApps(t *testing.T) {
	m := startMaster(t, balance.LeastLoad)
	w := addWorker(t, m, "w-a")
	if !w.hasApp("hello") || !w.hasApp("multi") {
		t.Fatalf("registration did not hand over the apps: %v", w.apps)
	}
	extra := wire.App{Name: "Extra", MountPoint: "extra", Entry: "index.html", Files: map[string][]byte{"index.html": []byte("hi")}}
	if err := (contract.AppManagerClient{C: w.conn}).Add(context.Background(), extra); err != nil {
		t.Fatal(err)
	}
	if !w.hasApp("extra") {
		t.Fatal("Add was not pushed to the worker")
	}
	if err := (contract.AppManagerClient{C: w.conn}).Remove(context.Background(), "extra"); err != nil {
		t.Fatal(err)
	}
	if w.hasApp("extra") {
		t.Fatal("Remove was not pushed to the worker")
	}
	bad := wire.App{Name: "Bad", MountPoint: "admin", Entry: "ftp://x"}
	err := contract.AppManagerClient{C: w.conn}.Add(context.Background(), bad)
	if code(err) != wire.CodeInvalid {
		t.Fatalf("reserved mount point and ftp entry accepted: %v", err)
	}
}

func TestPlacementStrategies(t *testing.T) {
	m := startMaster(t, balance.LeastLoad)
	a := addWorker(t, m, "w-a")
	addWorker(t, m, "w-b")

	tests := []struct {
		name      string
		app       string
		users     []string
		instances int
	}{
		{"single app instance: one for everyone", "hello", []string{"u1", "u2", "u1"}, 1},
		{"single instance per user", "notes", []string{"u1", "u2", "u1", "u2", "u3"}, 3},
		{"multi instance: a new one each time", "multi", []string{"u1", "u1", "u1"}, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			seen := map[string]bool{}
			for _, u := range tc.users {
				p, err := a.place(t, tc.app, u)
				if err != nil {
					t.Fatal(err)
				}
				wid, _ := ids.WorkerOf(p.InstanceID)
				if wid != p.WorkerID {
					t.Fatalf("instance id %s does not encode worker %s", p.InstanceID, p.WorkerID)
				}
				seen[p.InstanceID] = true
			}
			if len(seen) != tc.instances {
				t.Fatalf("%d instances, want %d", len(seen), tc.instances)
			}
		})
	}
	if _, err := a.place(t, "nope", "u1"); code(err) != wire.CodeUnknownApp {
		t.Fatalf("unknown app: %v", err)
	}
}

// Twenty concurrent first requests of one user create one instance. The
// creation is held until it has begun, so the requests that come
// meanwhile find no instance yet and must share it.
func TestConcurrentFirstRequests(t *testing.T) {
	m := startMaster(t, balance.LeastLoad)
	a := addWorker(t, m, "w-a")
	b := addWorker(t, m, "w-b")
	gate := make(chan struct{})
	for _, f := range []*fakeWorker{a, b} {
		f.mu.Lock()
		f.gate = gate
		f.mu.Unlock()
	}
	var wg sync.WaitGroup
	got := make([]string, 20)
	errs := make([]error, 20)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := a.place(t, "notes", "alice")
			got[i], errs[i] = p.InstanceID, err
		}()
	}
	testutil.Eventually(t, 5*time.Second, testutil.Cond("the creation", func() bool { return a.creates.Load()+b.creates.Load() > 0 }))
	close(gate)
	wg.Wait()
	for i := range got {
		if errs[i] != nil || got[i] != got[0] {
			t.Fatalf("request %d: %q %v, want %q", i, got[i], errs[i], got[0])
		}
	}
	if n := a.creates.Load() + b.creates.Load(); n != 1 {
		t.Fatalf("%d CreateInstance calls, want 1", n)
	}
}

func TestFailedCreationTriesAnotherWorker(t *testing.T) {
	m := startMaster(t, balance.RoundRobin)
	a := addWorker(t, m, "w-a")
	b := addWorker(t, m, "w-b")
	a.fail.Store(true)
	for i := 0; i < 4; i++ {
		p, err := a.place(t, "multi", "u")
		if err != nil {
			t.Fatal(err)
		}
		if p.WorkerID != "w-b" {
			t.Fatalf("placed on failing worker %s", p.WorkerID)
		}
	}
	b.fail.Store(true)
	if _, err := a.place(t, "multi", "u"); err == nil {
		t.Fatal("placement succeeded with every worker failing")
	}
}

func TestNoWorkersAndDraining(t *testing.T) {
	m := startMaster(t, balance.LeastLoad)
	// A proxy-like caller with no workers registered.
	node, _ := rmi.New(rmi.Config{Name: "p", Secret: []byte(testSecret)})
	defer node.Close()
	c, err := node.Dial(context.Background(), m.RMIAddr())
	if err != nil {
		t.Fatal(err)
	}
	var r wire.RouteReply
	err = c.Call(context.Background(), wire.ObjRouter, "Route", &r, wire.RouteRequest{Kind: wire.RouteApp, App: "hello"})
	if code(err) != wire.CodeStarting {
		t.Fatalf("route before any worker registered: %v, want %s", err, wire.CodeStarting)
	}
	a := addWorker(t, m, "w-a")
	addWorker(t, m, "w-b")
	// Once a worker has registered, no live worker is "no workers", not
	// "starting".
	for _, id := range []string{"w-a", "w-b"} {
		_ = m.workers.SetDraining(id, true)
	}
	err = c.Call(context.Background(), wire.ObjRouter, "Route", &r, wire.RouteRequest{Kind: wire.RouteApp, App: "hello"})
	if code(err) != wire.CodeNoWorkers {
		t.Fatalf("route with every worker draining: %v, want %s", err, wire.CodeNoWorkers)
	}
	_ = m.workers.SetDraining("w-a", false)
	if err := m.workers.SetDraining("w-b", true); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		p, err := a.place(t, "multi", "u")
		if err != nil || p.WorkerID != "w-a" {
			t.Fatalf("placement %d: %+v %v (w-b is draining)", i, p, err)
		}
		r, err := a.route(t, wire.RouteApp, "hello", "")
		if err != nil || r.WorkerID != "w-a" {
			t.Fatalf("app route to a draining worker: %+v %v", r, err)
		}
	}
	if err := m.workers.SetDraining("w-nope", true); code(err) == "" {
		t.Fatal("draining an unknown worker succeeded")
	}
}

func TestRoutesAndDeadWorkers(t *testing.T) {
	m := startMaster(t, balance.RoundRobin)
	a := addWorker(t, m, "w-a")
	b := addWorker(t, m, "w-b")
	var onB wire.Placement
	for onB.WorkerID != "w-b" {
		p, err := a.place(t, "multi", "u")
		if err != nil {
			t.Fatal(err)
		}
		onB = p
	}
	r, err := a.route(t, wire.RouteInstance, "multi", onB.InstanceID)
	if err != nil || r.WorkerID != "w-b" || r.Addr != "127.0.0.1:1" {
		t.Fatalf("route: %+v %v", r, err)
	}
	for _, tc := range []struct{ app, iid, code string }{
		{"hello", onB.InstanceID, wire.CodeUnknownInstance}, // wrong app
		{"multi", "w-b.doesnotexist", wire.CodeUnknownInstance},
	} {
		if _, err := a.route(t, wire.RouteInstance, tc.app, tc.iid); code(err) != tc.code {
			t.Errorf("route %s/%s: %v, want %s", tc.app, tc.iid, err, tc.code)
		}
	}

	// A late gossip verdict about an earlier incarnation changes nothing.
	m.workers.DeadMember("w-b", "w-b.old", "gossip: failed")
	if _, err := a.route(t, wire.RouteInstance, "multi", onB.InstanceID); err != nil {
		t.Fatalf("stale verdict removed the worker: %v", err)
	}

	// The connection drops: no placements on w-b, routes kept until
	// DeadAfter passes on the master's clock, then the instance moves to
	// the live worker (same id).
	b.conn.Close()
	testutil.Eventually(t, 5*time.Second, testutil.Cond("w-b disconnected", func() bool { return workerState(m, "w-b") == "disconnected" }))
	clk := clockOf(m)
	for _, advance := range []time.Duration{0, testDeadAfter - time.Nanosecond} {
		clk.Advance(advance)
		if r, err := a.route(t, wire.RouteInstance, "multi", onB.InstanceID); err != nil || r.WorkerID != "w-b" {
			t.Fatalf("route %v after the disconnection: %+v %v, want w-b until DeadAfter", advance, r, err)
		}
		if p, err := a.place(t, "multi", "u"); err != nil || p.WorkerID == "w-b" {
			t.Fatalf("placement while w-b is disconnected: %+v %v", p, err)
		}
	}
	clk.Advance(time.Nanosecond)
	if state := workerState(m, "w-b"); state != "" {
		t.Fatalf("w-b %s at DeadAfter, want it removed", state)
	}
	testutil.Eventually(t, 5*time.Second, func() error {
		r, err := a.route(t, wire.RouteInstance, "multi", onB.InstanceID)
		if err == nil && r.WorkerID == "w-a" {
			return nil
		}
		if err != nil && code(err) != wire.CodeInstanceMoving {
			t.Fatalf("unexpected route error while w-b's instance moves: %v", err)
		}
		return fmt.Errorf("the instance of the dead worker has not moved: %+v %v", r, err)
	})
}

// workerState is worker id's state in m's status ("": not listed).
func workerState(m *Master, id string) string {
	for _, w := range m.Status().Workers {
		if w.ID == id {
			return w.State
		}
	}
	return ""
}

// After a master restart, workers re-register with their instances and the
// strategies find them again.
func TestRegisterRebuildsTable(t *testing.T) {
	m := startMaster(t, balance.LeastLoad)
	iid := "w-a." + ids.Random(12)
	a := addWorker(t, m, "w-a",
		wire.InstanceInfo{ID: iid, App: "notes", Owner: "alice", Worker: "w-a", Created: clockOf(m).Now()},
		wire.InstanceInfo{ID: "w-zzz.abc", App: "notes", Owner: "bob", Worker: "w-zzz"}, // not theirs: ignored
	)
	p, err := a.place(t, "notes", "alice")
	if err != nil || p.InstanceID != iid || p.Created {
		t.Fatalf("alice's instance not found after re-registration: %+v %v", p, err)
	}
	if a.creates.Load() != 0 {
		t.Fatal("a new instance was created")
	}
	if _, err := a.route(t, wire.RouteInstance, "notes", "w-zzz.abc"); code(err) != wire.CodeUnknownInstance {
		t.Fatalf("foreign instance adopted: %v", err)
	}
}

func TestRegisterValidation(t *testing.T) {
	m := startMaster(t, balance.LeastLoad)
	for _, info := range []wire.WorkerInfo{
		{ID: "BAD", HTTPAddr: "127.0.0.1:1"},
		{ID: "w-ok"},
	} {
		c := dialAs(t, m, info.ID) // the peer name matches: only the info is wrong
		_, err := contract.WorkerManagerClient{C: c}.Register(context.Background(), info, nil, rmi.Export(&fakeWorker{}))
		if code(err) != wire.CodeInvalid {
			t.Errorf("register %+v: %v, want invalid", info, err)
		}
	}
}

// dialAs connects to m's RMI port as a peer named name (the cluster secret:
// every object is callable, so only the identity checks stand in the way).
func dialAs(t *testing.T, m *Master, name string) *rmi.Conn {
	t.Helper()
	node, err := rmi.New(rmi.Config{Name: name, Secret: []byte(testSecret)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := node.Dial(ctx, m.RMIAddr())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestInstanceClosedInvalidatesProxies(t *testing.T) {
	m := startMaster(t, balance.LeastLoad)
	a := addWorker(t, m, "w-a")
	// A proxy subscribes over its own connection.
	inv := &recorder{}
	pnode, _ := rmi.New(rmi.Config{Name: "proxy-1", Secret: []byte(testSecret)})
	defer pnode.Close()
	if err := pnode.Register(wire.ObjProxy, inv); err != nil {
		t.Fatal(err)
	}
	pc, err := pnode.Dial(context.Background(), m.RMIAddr())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (contract.RouterClient{C: pc}).Subscribe(context.Background(), "proxy-1"); err != nil {
		t.Fatal(err)
	}
	p, err := a.place(t, "multi", "u")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.closed(p.InstanceID); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, testutil.Cond("the instance's invalidation", func() bool { return inv.has(p.InstanceID) }))
	if _, err := a.route(t, wire.RouteInstance, "multi", p.InstanceID); code(err) != wire.CodeUnknownInstance {
		t.Fatalf("closed instance still routed: %v", err)
	}
	m.workers.Dead("w-a", "test")
	testutil.Eventually(t, 5*time.Second, testutil.Cond("the worker's invalidation", func() bool { return inv.has("worker:w-a") }))
}

type recorder struct {
	mu  sync.Mutex
	got []string
}

func (r *recorder) Invalidate(ctx context.Context, iids []string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, iids...)
	return nil
}

func (r *recorder) InvalidateWorker(ctx context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, "worker:"+id)
	return nil
}

func (r *recorder) has(s string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range r.got {
		if g == s {
			return true
		}
	}
	return false
}

// TestSharedInstancesListed: grants to named users reach the master (by the
// worker's InstanceShared call, or in the instance list at registration) and
// put the instance on those users' landing pages.
func TestSharedInstancesListed(t *testing.T) {
	m := startMaster(t, balance.LeastLoad)
	adopted := "w-a." + ids.Random(12)
	a := addWorker(t, m, "w-a", wire.InstanceInfo{ID: adopted, App: "multi", Owner: "alice", Worker: "w-a",
		Created: clockOf(m).Now(), Shared: map[string]string{"carol": "reader"}})
	clockOf(m).Advance(time.Second) // lists go by creation: the adopted one first
	p, err := a.place(t, "multi", "alice")
	if err != nil {
		t.Fatal(err)
	}
	b := addWorker(t, m, "w-b") // after the placement: it is on w-a
	// by is worker id's WorkerManager (a's: the current connection).
	by := func(id string) contract.WorkerManagerClient {
		if id == "w-b" {
			return contract.WorkerManagerClient{C: b.conn}
		}
		return contract.WorkerManagerClient{C: a.conn}
	}
	listed := func(user string) []string {
		insts, err := by("w-a").Instances(context.Background(), "multi", user)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, in := range insts {
			out = append(out, in.ID+"="+in.Shared[user])
		}
		return out
	}
	steps := []struct {
		name                   string
		worker, iid, who, role string
		wantErr                string
		user                   string
		want                   []string
	}{
		{"adopted at registration", "", "", "", "", "", "carol", []string{adopted + "=reader"}},
		{"not shared yet", "", "", "", "", "", "bob", nil},
		{"shared with bob", "w-a", p.InstanceID, "bob", "reader-writer", "", "bob", []string{p.InstanceID + "=reader-writer"}},
		{"owner still sees both", "", "", "", "", "", "alice", []string{adopted + "=", p.InstanceID + "="}},
		{"another worker cannot share it", "w-b", p.InstanceID, "dave", "reader", wire.CodeUnknownInstance, "dave", nil},
		{"unknown instance", "w-a", "w-a.nope", "dave", "reader", wire.CodeUnknownInstance, "dave", nil},
		{"revoked", "w-a", p.InstanceID, "bob", "none", "", "bob", nil},
	}
	for _, s := range steps {
		if s.worker != "" {
			err := by(s.worker).InstanceShared(context.Background(), wire.InstanceShare{Instance: s.iid, Principal: s.who, Role: s.role})
			if code(err) != s.wantErr {
				t.Fatalf("%s: InstanceShared: %v, want code %q", s.name, err, s.wantErr)
			}
		}
		if got := listed(s.user); !slices.Equal(got, s.want) {
			t.Fatalf("%s: %s's instances = %v, want %v", s.name, s.user, got, s.want)
		}
	}
	// A closed instance leaves its owner's and its sharers' lists; one
	// re-registered with other grants is listed by the new ones.
	if err := by("w-a").InstanceShared(context.Background(), wire.InstanceShare{Instance: p.InstanceID, Principal: "bob", Role: "reader"}); err != nil {
		t.Fatal(err)
	}
	if err := by("w-a").InstanceClosed(context.Background(), wire.ClosedInstance{ID: p.InstanceID, Epoch: a.epoch(p.InstanceID)}); err != nil {
		t.Fatal(err)
	}
	if got := listed("bob"); got != nil {
		t.Fatalf("bob's list after the close: %v", got)
	}
	if got := listed("alice"); !slices.Equal(got, []string{adopted + "="}) {
		t.Fatalf("alice's list after the close: %v", got)
	}
	a = addWorker(t, m, "w-a", wire.InstanceInfo{ID: adopted, App: "multi", Owner: "alice", Worker: "w-a",
		Created: clockOf(m).Now(), Shared: map[string]string{"dave": "reader"}}) // by and listed use the new connection
	if got := listed("carol"); got != nil {
		t.Fatalf("carol's grant was dropped at re-registration, still listed: %v", got)
	}
	if got := listed("dave"); !slices.Equal(got, []string{adopted + "=reader"}) {
		t.Fatalf("dave's list after re-registration: %v", got)
	}
}

// TestGossipFailureCheckedOverRMI: gossip's "failed" removes a worker only
// if it does not answer over its RMI connection either (UDP probes miss on
// an overloaded machine); one whose connection is gone is removed at once,
// a frozen one when the ping's timeout passes on the master's clock.
func TestGossipFailureCheckedOverRMI(t *testing.T) {
	m := startMaster(t, balance.LeastLoad)
	busy := addWorker(t, m, "w-busy")
	frozen := addWorker(t, m, "w-frozen")
	gone := addWorker(t, m, "w-gone")
	frozen.frozen.Store(true)
	gone.conn.Close()
	for _, w := range []*fakeWorker{busy, frozen, gone} {
		m.workers.SuspectMember(w.id, w.id+".g1", "gossip: failed")
	}
	listed := func(want ...string) error {
		var ids []string
		for _, w := range m.Status().Workers {
			ids = append(ids, w.ID)
		}
		slices.Sort(ids)
		if !slices.Equal(ids, want) {
			return fmt.Errorf("workers %v, want %v", ids, want)
		}
		return nil
	}
	clk := clockOf(m)
	testutil.Eventually(t, 10*time.Second, func() error {
		if err := listed("w-busy", "w-frozen"); err != nil {
			return err
		}
		if n := clk.Active(); n != 1 {
			return fmt.Errorf("%d timers pending, want 1 (the frozen worker's ping)", n)
		}
		return nil
	})
	clk.Advance(registry.PingTimeout - time.Nanosecond)
	stillArmed(t, m, 1, "before the ping's timeout")
	if err := listed("w-busy", "w-frozen"); err != nil {
		t.Fatalf("before the ping's timeout: %v", err)
	}
	clk.Advance(time.Nanosecond)
	testutil.Eventually(t, 10*time.Second, func() error { return listed("w-busy") })
}
