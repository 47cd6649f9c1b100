package master

import (
	"context"
	"errors"
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
	m.workers.dead("w-a", "test: stalled")
	if _, err := m.workers.route(wire.RouteRequest{Kind: wire.RouteInstance, InstanceID: room.InstanceID}); code(err) != wire.CodeInstanceMoving {
		t.Fatalf("route while no worker is live: %v, want %s", err, wire.CodeInstanceMoving)
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
		if err := m.workers.checkEpoch(f.ID, infos[f.ID].Epoch); err == nil {
			t.Errorf("a write under the old epoch of %s was accepted", f.ID)
		}
	}
	waitRoute(t, a, room.InstanceID, "w-b")
}

// TestDuplicateMerged: while a worker is only disconnected (not yet dead),
// a user gets a new instance for a strategy key elsewhere; when the worker
// is declared dead its instance for that key gives way instead of moving,
// its URLs say so, and if the worker comes back it is fenced.
func TestDuplicateMerged(t *testing.T) {
	m := startMaster(t, balance.RoundRobin)
	a := addWorker(t, m, "w-a")
	old, err := a.place(t, "notes", "alice")
	if err != nil {
		t.Fatal(err)
	}
	multi, err := a.place(t, "multi", "carol")
	if err != nil {
		t.Fatal(err)
	}
	infos := instanceInfos(t, m)
	m.workers.mu.Lock()
	conn := m.workers.workers["w-a"].conn // the master's end
	m.workers.mu.Unlock()
	m.workers.disconnected("w-a", conn)
	b := addWorker(t, m, "w-b")
	dup, err := b.place(t, "notes", "alice")
	if err != nil || dup.InstanceID == old.InstanceID {
		t.Fatalf("alice while w-a is unreachable: %+v %v", dup, err)
	}
	m.workers.dead("w-a", "test: no re-registration")
	if _, err := m.workers.route(wire.RouteRequest{Kind: wire.RouteInstance, InstanceID: old.InstanceID}); code(err) != wire.CodeInstanceMerged {
		t.Fatalf("route to the duplicate: %v, want %s", err, wire.CodeInstanceMerged)
	}
	waitRoute(t, b, multi.InstanceID, "w-b") // nobody replaced it: it moved
	rep := a.register(t, m, infos[old.InstanceID])
	if len(rep.Fenced) != 1 || rep.Fenced[0].ID != old.InstanceID || rep.Fenced[0].Reason != mergedReason {
		t.Fatalf("fenced %+v", rep.Fenced)
	}
	if p, err := a.place(t, "notes", "alice"); err != nil || p.InstanceID != dup.InstanceID {
		t.Fatalf("alice: %+v %v, want %s", p, err, dup.InstanceID)
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

func TestEpochsDurable(t *testing.T) {
	path := filepath.Join(t.TempDir(), state.FileName)
	st, err := state.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	e, err := newEpochs(st)
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	for range 3 {
		if last, err = e.next(); err != nil {
			t.Fatal(err)
		}
	}
	e.observe(last + 10) // a worker reports a larger one
	st.Close()
	st, err = state.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	e, err = newEpochs(st)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := e.next(); n != last+11 {
		t.Fatalf("after a restart: %d, want %d", n, last+11)
	}
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
		if err := m.workers.checkEpoch(iid, infos[iid].Epoch); err == nil {
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
