package master

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/balance"
	"github.com/cloudbrowser-go/cloudbrowser/master/state"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// startDurable starts a master on data directory dir (testConfig: a fake
// clock of its own).
func startDurable(t *testing.T, dir string) *Master {
	t.Helper()
	cfg := testConfig(balance.RoundRobin)
	cfg.DataDir = dir
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return m
}

// registerInc (re)registers f as a process of incarnation inc.
func (f *fakeWorker) registerInc(t *testing.T, m *Master, inc string, insts ...wire.InstanceInfo) wire.RegisterReply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := f.node.Dial(ctx, m.RMIAddr())
	if err != nil {
		t.Fatal(err)
	}
	f.conn = c
	info := wire.WorkerInfo{ID: f.id, HTTPAddr: "127.0.0.1:1", Gossip: f.id + "." + inc, Incarnation: inc}
	rep, err := contract.WorkerManagerClient{C: c}.Register(ctx, info, insts, rmi.Export(f))
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestDoubleFault: a worker and the master die together. The restarted
// master knows the dead worker's instances from its store: their URLs say
// "moving" (never "does not exist"), a returning user of a per-user app
// waits for their instance instead of getting a new one, and once the grace
// period (DeadAfter, on the master's clock) passes without the worker, each
// is placed again on a live worker under its id, with its state (a
// restore).
func TestDoubleFault(t *testing.T) {
	dir := t.TempDir()
	m := startDurable(t, dir)
	a := addWorker(t, m, "w-a")
	p, err := a.place(t, "notes", "alice")
	if err != nil || p.WorkerID != "w-a" {
		t.Fatalf("placement: %+v %v", p, err)
	}
	iid := p.InstanceID
	m.Close() // w-a is gone with it: it never registers again
	a.node.Close()

	m = startDurable(t, dir)
	defer m.Close()
	b := addWorker(t, m, "w-b")
	if _, err := b.route(t, wire.RouteInstance, "notes", iid); code(err) != wire.CodeInstanceMoving {
		t.Fatalf("route of the dead worker's instance after the restart: %v, want %s", err, wire.CodeInstanceMoving)
	}
	// Alice comes back: she gets her instance, once it is placed again.
	pending := b.placeAsync(t, "notes", "alice")
	armed(t, m, 2, "the restarted master's grace and alice's placement waiting")
	clockOf(m).Advance(testDeadAfter - time.Nanosecond)
	stillArmed(t, m, 2, "before the grace period passed")
	stillWaiting(t, pending, "before the grace period passed")
	if n := b.creates.Load(); n != 0 {
		t.Fatalf("%d creations on w-b before the grace period passed", n)
	}
	clockOf(m).Advance(time.Nanosecond)
	r := <-pending
	if back, err := r.p, r.err; err != nil || back.InstanceID != iid || back.Created {
		t.Fatalf("alice after the double fault: %+v %v, want her instance %s", back, err, iid)
	}
	waitRoute(t, b, iid, "w-b")
	if b.epoch(iid) == 0 {
		t.Fatal("w-b never restored the instance")
	}
}

// TestMasterRestartKeepsLiveWorkers: after a master restart, a worker that
// comes back reports its instances and keeps them; one it does not report
// (lost meanwhile) is placed again at once.
func TestMasterRestartKeepsLiveWorkers(t *testing.T) {
	dir := t.TempDir()
	m := startDurable(t, dir)
	a := addWorker(t, m, "w-a")
	kept, err := a.place(t, "notes", "alice")
	if err != nil {
		t.Fatal(err)
	}
	gone, err := a.place(t, "notes", "bob")
	if err != nil {
		t.Fatal(err)
	}
	infos := instanceInfos(t, m)
	m.Close()

	m = startDurable(t, dir)
	defer m.Close()
	creates := a.creates.Load()
	a.register(t, m, infos[kept.InstanceID]) // bob's instance is not reported
	waitRoute(t, a, kept.InstanceID, "w-a")
	waitRoute(t, a, gone.InstanceID, "w-a") // placed again on the only worker
	if got := a.creates.Load() - creates; got != 1 {
		t.Fatalf("%d creations after the restart, want 1 (bob's lost instance only)", got)
	}
	if a.epoch(gone.InstanceID) <= infos[gone.InstanceID].Epoch {
		t.Fatal("bob's instance was not placed again under a new epoch")
	}
}

// TestQuickRestartFailsOver: a worker process restarted under the same id
// before anyone declared it dead registers with no instances: the table's
// instances for it fail over at once instead of routing to it for minutes.
func TestQuickRestartFailsOver(t *testing.T) {
	m := startMaster(t, balance.RoundRobin)
	a := addWorker(t, m, "w-a")
	a.registerInc(t, m, "first")
	p, err := a.place(t, "notes", "alice")
	if err != nil {
		t.Fatal(err)
	}
	old := instanceInfos(t, m)[p.InstanceID].Epoch
	creates := a.creates.Load()
	// The same process reconnecting keeps its instances as they are.
	a.registerInc(t, m, "first")
	if a.creates.Load() != creates {
		t.Fatal("a reconnection of the same process moved its instances")
	}
	// A new process under the same id has lost them.
	a.registerInc(t, m, "second")
	testutil.Eventually(t, 10*time.Second, testutil.Cond("alice's instance placed again", func() bool {
		in, ok := instanceInfos(t, m)[p.InstanceID]
		return ok && in.Epoch > old && a.epoch(p.InstanceID) == in.Epoch
	}))
}

// TestStalledWorkerNotOffered: a worker whose load reports stopped (a
// stall, a cut) while time passed on the master's clock is not offered for
// Application URLs while another worker reports; when every worker is
// stale, they are offered as before.
func TestStalledWorkerNotOffered(t *testing.T) {
	m := startMaster(t, balance.RoundRobin)
	a := addWorker(t, m, "w-a")
	addWorker(t, m, "w-b")
	silence := time.Hour // many report periods
	clockOf(m).Advance(silence)
	if err := (contract.WorkerManagerClient{C: a.conn}).Report(context.Background(), wire.Load{}); err != nil {
		t.Fatal(err)
	}
	for _, w := range m.Status().Workers {
		if w.Silent != (w.ID == "w-b") {
			t.Fatalf("status of %s: silent %v", w.ID, w.Silent)
		}
	}
	for range 6 {
		r, err := a.route(t, wire.RouteApp, "notes", "")
		if err != nil || r.WorkerID != "w-a" {
			t.Fatalf("app route with w-b silent: %+v %v, want w-a", r, err)
		}
	}
	clockOf(m).Advance(silence) // w-a falls silent too
	for _, w := range m.Status().Workers {
		if !w.Silent {
			t.Fatalf("status of %s: not silent", w.ID)
		}
	}
	seen := map[string]bool{}
	for range 6 {
		r, err := a.route(t, wire.RouteApp, "notes", "")
		if err != nil {
			t.Fatal(err)
		}
		seen[r.WorkerID] = true
	}
	if !seen["w-a"] && !seen["w-b"] {
		t.Fatalf("no worker offered when all are stale: %v", seen)
	}
}

// TestMasterRestartAfterMigration: the master dies right after a migration,
// before its stored table has the switch (the record still names the old
// worker and epoch). The worker the instance moved to reports it under
// the newer epoch and keeps it, whether it registers before or after the
// old worker (which no longer has it); nothing is placed a third time.
func TestMasterRestartAfterMigration(t *testing.T) {
	for _, order := range []string{"new host first", "old host first"} {
		t.Run(order, func(t *testing.T) {
			dir := t.TempDir()
			m := startDurable(t, dir)
			a := addWorker(t, m, "w-a")
			p, err := a.place(t, "notes", "alice")
			if err != nil {
				t.Fatal(err)
			}
			b := addWorker(t, m, "w-b")
			before := instanceInfos(t, m)[p.InstanceID]
			if to, err := m.workers.Moves.MigrateOne(context.Background(), "w-a", p.InstanceID); err != nil || to != "w-b" {
				t.Fatalf("migration: %q %v", to, err)
			}
			after := instanceInfos(t, m)[p.InstanceID]
			m.Close()
			// The journal had not written the switch yet.
			st, err := state.Open(filepath.Join(dir, state.FileName))
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Put("instances", p.InstanceID, before); err != nil {
				t.Fatal(err)
			}
			st.Close()

			m = startDurable(t, dir)
			defer m.Close()
			creates := a.creates.Load() + b.creates.Load()
			var fenced []wire.FencedInstance
			if order == "new host first" {
				fenced = b.register(t, m, after).Fenced
				a.register(t, m)
			} else {
				a.register(t, m)
				fenced = b.register(t, m, after).Fenced
			}
			if order == "old host first" {
				// The old host's silence made it an orphan: a race between
				// its restore and the new host's report. Either way one
				// copy goes on under the instance's id.
				testutil.Eventually(t, 10*time.Second, func() error {
					r, err := b.route(t, wire.RouteInstance, "notes", p.InstanceID)
					if err != nil {
						return err
					}
					if len(fenced) == 0 && r.WorkerID != "w-b" {
						return fmt.Errorf("the new host kept its copy, but the route says %s", r.WorkerID)
					}
					return nil
				})
				return
			}
			if len(fenced) != 0 {
				t.Fatalf("the migrated copy was fenced: %+v", fenced)
			}
			waitRoute(t, b, p.InstanceID, "w-b")
			if got := instanceInfos(t, m)[p.InstanceID].Epoch; got != after.Epoch {
				t.Fatalf("epoch %d, want the migration's %d", got, after.Epoch)
			}
			if n := a.creates.Load() + b.creates.Load() - creates; n != 0 {
				t.Fatalf("%d placements after the restart", n)
			}
		})
	}
}

// TestMigrationWithoutTarget: with no other worker to move to, a
// migration fails before it asks the worker for its last snapshot, which
// would hold the browsers' input for nothing.
func TestMigrationWithoutTarget(t *testing.T) {
	m := startMaster(t, balance.RoundRobin)
	a := addWorker(t, m, "w-a")
	p, err := a.place(t, "notes", "alice")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.workers.Moves.MigrateOne(context.Background(), "w-a", p.InstanceID); err == nil {
		t.Fatal("migrated with no other worker")
	}
	if n := a.snapshots.Load(); n != 0 {
		t.Fatalf("%d snapshots (input holds) for a migration with nowhere to go", n)
	}
	addWorker(t, m, "w-b")
	if to, err := m.workers.Moves.MigrateOne(context.Background(), "w-a", p.InstanceID); err != nil || to != "w-b" {
		t.Fatalf("with a target: %q %v", to, err)
	}
	if n := a.snapshots.Load(); n != 1 {
		t.Fatalf("%d snapshots before the move, want 1", n)
	}
}

// TestFailedMigrationResumesInput: a restore that fails on the target
// leaves the instance where it was, and the old worker is told at once to
// give its users' held input back (not after the hold's 20 s bound).
func TestFailedMigrationResumesInput(t *testing.T) {
	m := startMaster(t, balance.RoundRobin)
	a := addWorker(t, m, "w-a")
	p, err := a.place(t, "notes", "alice")
	if err != nil {
		t.Fatal(err)
	}
	b := addWorker(t, m, "w-b")
	b.failOnce.Store(true)
	if _, err := m.workers.Moves.MigrateOne(context.Background(), "w-a", p.InstanceID); err == nil {
		t.Fatal("a failed restore reported as a migration")
	}
	if s, r := a.snapshots.Load(), a.resumes.Load(); s != 1 || r != 1 {
		t.Fatalf("old worker: %d snapshots, %d resumes; want 1 and 1", s, r)
	}
	// Round robin may offer w-a itself first: no move, no snapshot.
	to, err := m.workers.Moves.MigrateOne(context.Background(), "w-a", p.InstanceID)
	if err != nil {
		to, err = m.workers.Moves.MigrateOne(context.Background(), "w-a", p.InstanceID)
	}
	if err != nil || to != "w-b" {
		t.Fatalf("second try: %q %v", to, err)
	}
	if r := a.resumes.Load(); r != 1 {
		t.Fatalf("%d resumes after a migration that happened, want still 1", r)
	}
}
