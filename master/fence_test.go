package master

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/balance"
	"github.com/cloudbrowser-go/cloudbrowser/master/registry"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// register calls Register again for f with insts and returns the reply.
func (f *fakeWorker) register(t *testing.T, m *Master, insts ...wire.InstanceInfo) wire.RegisterReply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := f.node.Dial(ctx, m.RMIAddr())
	if err != nil {
		t.Fatal(err)
	}
	f.conn = c
	info := wire.WorkerInfo{ID: f.id, HTTPAddr: "127.0.0.1:1", Gossip: f.id + ".g2"}
	rep, err := contract.WorkerManagerClient{C: c}.Register(ctx, info, insts, rmi.Export(f))
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestStalledWorkerReconciled: a worker declared dead (a stall, not a
// crash) has its instances placed again elsewhere under the same ids and
// new epochs; when it comes back it is told to drop them (moved), its old
// epochs are refused, and users keep one instance per strategy key.
func TestStalledWorkerReconciled(t *testing.T) {
	m := startMaster(t, balance.RoundRobin)
	a := addWorker(t, m, "w-a")
	room, err := a.place(t, "hello", "u1")
	if err != nil {
		t.Fatal(err)
	}
	alice, err := a.place(t, "notes", "alice")
	if err != nil {
		t.Fatal(err)
	}
	infos := instanceInfos(t, m)

	// A stalls: declared dead with no other worker, its instances wait.
	m.workers.Dead("w-a", "test: stalled")
	if _, err := m.workers.Route(wire.RouteRequest{Kind: wire.RouteInstance, InstanceID: room.InstanceID}); code(err) != wire.CodeInstanceMoving {
		t.Fatalf("route while no worker is live: %v, want %s", err, wire.CodeInstanceMoving)
	}
	// Its worker may still be alive (a stall): what it writes now would be
	// acknowledged to users of a copy the new owner never sees.
	if err := m.workers.Gate.CheckEpoch(room.InstanceID, infos[room.InstanceID].Epoch); code(err) != wire.CodeInstanceMoving {
		t.Fatalf("a write while the instance waits to move: %v, want %s", err, wire.CodeInstanceMoving)
	}
	// B registers: they move there, same ids, new epochs.
	b := addWorker(t, m, "w-b")
	waitRoute(t, b, room.InstanceID, "w-b")
	waitRoute(t, b, alice.InstanceID, "w-b")
	if p, err := b.place(t, "hello", "u2"); err != nil || p.InstanceID != room.InstanceID {
		t.Fatalf("a new user of the room: %+v %v, want %s", p, err, room.InstanceID)
	}
	if b.creates.Load() != 2 {
		t.Fatalf("w-b got %d creations, want the 2 moved instances", b.creates.Load())
	}

	// A resumes and registers what it still holds: all moved away.
	rep := a.register(t, m, infos[room.InstanceID], infos[alice.InstanceID])
	if len(rep.Fenced) != 2 {
		t.Fatalf("fenced %+v, want both", rep.Fenced)
	}
	for _, f := range rep.Fenced {
		if f.Location == "" || f.Reason == "" || !f.Moved {
			t.Fatalf("fencing order without a way on: %+v", f)
		}
		if err := m.workers.Gate.CheckEpoch(f.ID, infos[f.ID].Epoch); err == nil {
			t.Errorf("a write under the old epoch of %s was accepted", f.ID)
		}
	}
	waitRoute(t, a, room.InstanceID, "w-b")
}

// appendAs has worker f append v to iid's list "l" under the epoch it
// created iid with (an acknowledged write, as a page's would be).
func appendAs(t *testing.T, f *fakeWorker, iid, v string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := (contract.InstanceStateClient{C: f.conn}).Write(ctx, wire.StateWrite{Instance: iid, Epoch: f.epoch(iid),
		Op: wire.StateAppend, Key: "l", Value: []byte(v)}); err != nil {
		t.Fatalf("append %s to %s: %v", v, iid, err)
	}
}

// storedList is iid's list "l" as the master stores it.
func storedList(t *testing.T, m *Master, iid string) string {
	t.Helper()
	st, err := m.istate.get(iid, "")
	if err != nil {
		t.Fatal(err)
	}
	return string(st.Values["l"].Value)
}

// TestHolderWaitedForNeverReplaced: while the worker of the instance that
// holds a strategy key is unreachable, a placement for the key waits for
// it (it comes back, or is declared dead and the instance moves) and never
// opens a second instance, whose existence would force one of the two to
// give way with its acknowledged writes when the first returns. If the
// holder stays unreachable past the wait, the answer is "moving" (retry).
// DeadAfter and the wait pass on the master's clock, as the test advances
// it.
func TestHolderWaitedForNeverReplaced(t *testing.T) {
	disconnect := func(m *Master, id string) {
		m.workers.Disconnected(id, m.workers.Gate.ConnOf(id)) // the master's end
	}
	t.Run("declared dead: the same instance, moved", func(t *testing.T) {
		m := startMaster(t, balance.RoundRobin)
		a := addWorker(t, m, "w-a")
		old, err := a.place(t, "notes", "alice")
		if err != nil {
			t.Fatal(err)
		}
		appendAs(t, a, old.InstanceID, `"acked"`)
		infos := instanceInfos(t, m)
		disconnect(m, "w-a")
		b := addWorker(t, m, "w-b")
		pending := b.placeAsync(t, "notes", "alice")
		armed(t, m, 2, "the dead-after timer and the placement's wait")
		clockOf(m).Advance(testDeadAfter - time.Nanosecond)
		stillArmed(t, m, 2, "before DeadAfter")
		stillWaiting(t, pending, "before DeadAfter")
		clockOf(m).Advance(time.Nanosecond)
		r := <-pending
		if p := r.p; r.err != nil || p.InstanceID != old.InstanceID || p.WorkerID != "w-b" {
			t.Fatalf("alice while w-a is unreachable: %+v %v, want %s on w-b", p, r.err, old.InstanceID)
		}
		if n := b.creates.Load(); n != 1 {
			t.Fatalf("w-b got %d creations, want 1 (the move)", n)
		}
		rep := a.register(t, m, infos[old.InstanceID])
		if len(rep.Fenced) != 1 || !rep.Fenced[0].Moved {
			t.Fatalf("w-a's copy: fenced %+v, want moved", rep.Fenced)
		}
		if got := storedList(t, m, old.InstanceID); got != `["acked"]` {
			t.Fatalf("stored %s, want the acknowledged write", got)
		}
	})
	t.Run("back in time: the same instance, where it was", func(t *testing.T) {
		m := startMaster(t, balance.RoundRobin)
		a := addWorker(t, m, "w-a")
		old, err := a.place(t, "notes", "alice")
		if err != nil {
			t.Fatal(err)
		}
		infos := instanceInfos(t, m)
		disconnect(m, "w-a")
		b := addWorker(t, m, "w-b")
		pending := b.placeAsync(t, "notes", "alice")
		armed(t, m, 2, "the dead-after timer and the placement's wait")
		clockOf(m).Advance(testDeadAfter - time.Nanosecond)
		stillArmed(t, m, 2, "before DeadAfter")
		stillWaiting(t, pending, "before DeadAfter")
		a.register(t, m, infos[old.InstanceID])
		if r := <-pending; r.err != nil || r.p.InstanceID != old.InstanceID || r.p.WorkerID != "w-a" {
			t.Fatalf("alice: %+v %v, want %s on w-a", r.p, r.err, old.InstanceID)
		}
		if n := b.creates.Load(); n != 0 {
			t.Fatalf("w-b got %d creations, want none", n)
		}
	})
	t.Run("still unreachable: moving, retry", func(t *testing.T) {
		cfg := testConfig(balance.RoundRobin)
		cfg.DeadAfter = registry.HolderWait + time.Minute // the wait ends first
		m := startConfig(t, cfg)
		a := addWorker(t, m, "w-a")
		if _, err := a.place(t, "notes", "alice"); err != nil {
			t.Fatal(err)
		}
		disconnect(m, "w-a")
		b := addWorker(t, m, "w-b")
		pending := b.placeAsync(t, "notes", "alice")
		armed(t, m, 2, "the dead-after timer and the placement's wait")
		clockOf(m).Advance(registry.HolderWait - time.Nanosecond)
		stillArmed(t, m, 2, "before HolderWait")
		stillWaiting(t, pending, "before HolderWait")
		clockOf(m).Advance(time.Nanosecond)
		if r := <-pending; code(r.err) != wire.CodeInstanceMoving {
			t.Fatalf("alice: %+v %v, want %s", r.p, r.err, wire.CodeInstanceMoving)
		}
		if n := b.creates.Load(); n != 0 {
			t.Fatalf("w-b got %d creations, want none", n)
		}
	})
}

// TestDuplicateMerged: two instances for one strategy key can still meet
// (instances from before a master restart, an app whose strategy changed):
// the one holding the key goes on, the other gives way, its URLs say so,
// and its stored state is kept.
func TestDuplicateMerged(t *testing.T) {
	m := startMaster(t, balance.RoundRobin)
	a := addWorker(t, m, "w-a")
	held, err := a.place(t, "notes", "alice")
	if err != nil {
		t.Fatal(err)
	}
	dup := wire.InstanceInfo{ID: "w-b.dupdupdupdup", App: "notes", Owner: "alice", Worker: "w-b", Created: clockOf(m).Now(), Epoch: 1}
	if err := m.istate.st.Put(stateBucket(dup.ID), stateMetaKey, stateMeta{Seq: 1, Name: "kept"}); err != nil {
		t.Fatal(err)
	}
	b := addWorker(t, m, "w-b")
	rep := b.register(t, m, dup)
	if len(rep.Fenced) != 1 || rep.Fenced[0].ID != dup.ID || rep.Fenced[0].Reason != "This app instance was closed in favour of the one the application now gives you; its data is kept." || rep.Fenced[0].Moved {
		t.Fatalf("fenced %+v", rep.Fenced)
	}
	if _, err := m.workers.Route(wire.RouteRequest{Kind: wire.RouteInstance, InstanceID: dup.ID}); code(err) != wire.CodeInstanceMerged {
		t.Fatalf("route to the duplicate: %v, want %s", err, wire.CodeInstanceMerged)
	}
	if p, err := b.place(t, "notes", "alice"); err != nil || p.InstanceID != held.InstanceID {
		t.Fatalf("alice: %+v %v, want %s", p, err, held.InstanceID)
	}
	if st, err := m.istate.get(dup.ID, ""); err != nil || !st.Found || st.Name != "kept" {
		t.Fatalf("the duplicate's stored state: %+v %v, want it kept", st, err)
	}
}

func instanceInfos(t *testing.T, m *Master) map[string]wire.InstanceInfo {
	t.Helper()
	out := map[string]wire.InstanceInfo{}
	for _, in := range m.Status().Instances {
		if in.Epoch == 0 {
			t.Fatalf("instance without an epoch: %+v", in)
		}
		out[in.ID] = in
	}
	return out
}

// waitRoute waits until iid routes to worker wid.
func waitRoute(t *testing.T, f *fakeWorker, iid, wid string) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, func() error {
		r, err := f.route(t, wire.RouteInstance, "", iid)
		if err == nil && r.WorkerID == wid {
			return nil
		}
		return fmt.Errorf("%s not routed to %s: %+v %v", iid, wid, r, err)
	})
}

// TestLeaveMigrates: a worker that announces it stops (SIGTERM) has its
// instances moved to another worker, under new epochs, before the answer;
// the old worker is told to release each (its clients follow), and it is
// removed as soon as its connection drops.
func TestLeaveMigrates(t *testing.T) {
	m := startMaster(t, balance.RoundRobin)
	a := addWorker(t, m, "w-a")
	notes, err := a.place(t, "notes", "alice")
	if err != nil {
		t.Fatal(err)
	}
	multi, err := a.place(t, "multi", "carol")
	if err != nil {
		t.Fatal(err)
	}
	infos := instanceInfos(t, m)
	b := addWorker(t, m, "w-b")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Leave names no worker: it is the caller's (TestCallerIdentity).
	res, err := contract.WorkerManagerClient{C: a.conn}.Leave(ctx)
	if err != nil || res.Migrated != 2 {
		t.Fatalf("leave: %+v %v", res, err)
	}
	for _, iid := range []string{notes.InstanceID, multi.InstanceID} {
		if r, err := b.route(t, wire.RouteInstance, "", iid); err != nil || r.WorkerID != "w-b" {
			t.Fatalf("%s after the leave: %+v %v", iid, r, err)
		}
		if err := m.workers.Gate.CheckEpoch(iid, infos[iid].Epoch); err == nil {
			t.Fatalf("the leaving worker's epoch of %s is still accepted", iid)
		}
	}
	a.mu.Lock()
	released := len(a.released)
	moved := released > 0 && a.released[0].Moved
	a.mu.Unlock()
	if released != 2 || !moved {
		t.Fatalf("release orders: %+v", a.released)
	}
	if p, err := b.place(t, "notes", "alice"); err != nil || p.InstanceID != notes.InstanceID || p.WorkerID != "w-b" {
		t.Fatalf("alice after the move: %+v %v", p, err)
	}
	a.conn.Close()
	testutil.Eventually(t, 5*time.Second, func() error {
		for _, w := range m.Status().Workers {
			if w.ID == "w-a" {
				return errors.New("the worker that left is still listed")
			}
		}
		return nil
	})
}

// TestWorkerDiesDuringMigration: a leaving worker declared dead while one
// of its instances is being restored elsewhere by the migration: the
// failover leaves it to the migration, which fails (its end of the leaving
// worker's call goes) or succeeds; either way the instance ends up on a
// live worker (after a retry if the failed restore was the failover's),
// held under the epoch the master's table gives it, and nothing is left
// waiting to move.
func TestWorkerDiesDuringMigration(t *testing.T) {
	for _, fails := range []bool{false, true} {
		t.Run(fmt.Sprintf("restore fails=%v", fails), func(t *testing.T) {
			m := startMaster(t, balance.RoundRobin)
			a := addWorker(t, m, "w-a")
			notes, err := a.place(t, "notes", "alice")
			if err != nil {
				t.Fatal(err)
			}
			b := addWorker(t, m, "w-b")
			gate := make(chan struct{})
			b.mu.Lock()
			b.gate = gate
			b.mu.Unlock()
			b.failOnce.Store(fails)
			left := make(chan struct{})
			go func() {
				defer close(left)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_, _ = contract.WorkerManagerClient{C: a.conn}.Leave(ctx)
			}()
			testutil.Eventually(t, 5*time.Second, testutil.Cond("the migration's restore", func() bool { return b.creates.Load() == 1 }))
			m.workers.Dead("w-a", "test: died while leaving")
			b.mu.Lock()
			b.gate = nil
			b.mu.Unlock()
			close(gate)
			<-left
			// The failure may hit the failover's restore instead (the
			// migration's call went with w-a's connection first): that one
			// is retried a second later on the master's clock.
			clk := clockOf(m)
			testutil.Eventually(t, 10*time.Second, func() error {
				r, err := b.route(t, wire.RouteInstance, "", notes.InstanceID)
				if err == nil && r.WorkerID == "w-b" {
					return nil
				}
				if clk.Active() > 0 {
					clk.Advance(time.Second) // the retry is due
				}
				return fmt.Errorf("%s not routed to w-b: %+v %v", notes.InstanceID, r, err)
			})
			st := m.Status()
			for _, in := range st.Instances {
				if in.ID == notes.InstanceID && in.Epoch != b.epoch(in.ID) {
					t.Fatalf("table epoch %d, w-b holds it under %d", in.Epoch, b.epoch(in.ID))
				}
			}
			orphans := m.workers.Moves.Orphans()
			if orphans != 0 {
				t.Fatalf("%d orphans left", orphans)
			}
		})
	}
}

// TestUnissuedEpochFenced: a worker that reports an instance under an epoch
// the master never issued (2^64-1 would wrap the next one to 0) has it
// fenced; the counter is untouched, and placements go on above it.
func TestUnissuedEpochFenced(t *testing.T) {
	m := startMaster(t, balance.RoundRobin)
	a := addWorker(t, m, "w-a")
	p, err := a.place(t, "notes", "alice")
	if err != nil {
		t.Fatal(err)
	}
	issued := instanceInfos(t, m)[p.InstanceID]
	for _, tc := range []struct {
		name  string
		epoch uint64
		fence bool
	}{
		{"the maximum", math.MaxUint64, true},
		{"one past the counter", issued.Epoch + 1, true},
		{"the one issued", issued.Epoch, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			forged := wire.InstanceInfo{ID: "w-a.forgedforged", App: "notes", Owner: "mallory", Worker: "w-a", Created: clockOf(m).Now(), Epoch: tc.epoch}
			held := issued
			held.Epoch = tc.epoch
			rep := a.register(t, m, forged, held)
			fenced := map[string]string{}
			for _, f := range rep.Fenced {
				fenced[f.ID] = f.Reason
			}
			if _, ok := fenced[forged.ID]; ok != tc.fence {
				t.Errorf("forged instance fenced = %v, want %v (%v)", ok, tc.fence, rep.Fenced)
			}
			if _, ok := fenced[issued.ID]; ok != tc.fence {
				t.Errorf("held instance under epoch %d fenced = %v, want %v", tc.epoch, ok, tc.fence)
			}
			if _, err := m.workers.Route(wire.RouteRequest{Kind: wire.RouteInstance, InstanceID: forged.ID}); tc.fence && err == nil {
				t.Errorf("the fenced instance is routed")
			}
		})
	}
	// The counter was never raised: the next placement's epoch follows the
	// last one issued.
	p2, err := a.place(t, "notes", "bob")
	if err != nil {
		t.Fatal(err)
	}
	if got := instanceInfos(t, m)[p2.InstanceID].Epoch; got != issued.Epoch+1 {
		t.Fatalf("next epoch %d, want %d", got, issued.Epoch+1)
	}
}
