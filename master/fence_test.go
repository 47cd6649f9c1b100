package master

import (
	"context"
	"path/filepath"
	"testing"
	"time"

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
	var rep wire.RegisterReply
	info := wire.WorkerInfo{ID: f.id, HTTPAddr: "127.0.0.1:1", Gossip: f.id + ".g2"}
	if err := c.Call(ctx, wire.ObjWorkerManager, "Register", &rep, info, insts, rmi.Export(f)); err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestStalledWorkerReconciled: a worker declared dead (a stall, not a
// crash) comes back with its instances. One instance per strategy key
// survives (the one placed meanwhile); the returning duplicate is fenced,
// its URLs say where to go, its writes are refused. An instance nobody
// replaced is adopted again.
func TestStalledWorkerReconciled(t *testing.T) {
	m := startMaster(t, balance.RoundRobin)
	a := addWorker(t, m, "w-a")
	var room, alice, multi wire.Placement
	var err error
	if room, err = a.place(t, "hello", "u1"); err != nil {
		t.Fatal(err)
	}
	if alice, err = a.place(t, "notes", "alice"); err != nil {
		t.Fatal(err)
	}
	if multi, err = a.place(t, "multi", "carol"); err != nil {
		t.Fatal(err)
	}
	infos := map[string]wire.InstanceInfo{}
	st := m.Status()
	for _, in := range st.Instances {
		if in.Epoch == 0 {
			t.Fatalf("instance without an epoch: %+v", in)
		}
		infos[in.ID] = in
	}

	// A stalls: declared dead. Users who arrive meanwhile get new
	// instances on B.
	m.workers.dead("w-a", "test: stalled")
	b := addWorker(t, m, "w-b")
	room2, err := b.place(t, "hello", "u2")
	if err != nil || room2.WorkerID != "w-b" {
		t.Fatalf("new room: %+v %v", room2, err)
	}
	alice2, err := b.place(t, "notes", "alice")
	if err != nil || alice2.WorkerID != "w-b" {
		t.Fatalf("alice's new notes: %+v %v", alice2, err)
	}

	// A resumes and registers what it still holds.
	rep := a.register(t, m, infos[room.InstanceID], infos[alice.InstanceID], infos[multi.InstanceID])
	fenced := map[string]wire.FencedInstance{}
	for _, f := range rep.Fenced {
		fenced[f.ID] = f
	}
	for _, tc := range []struct {
		iid, loc string
	}{{room.InstanceID, "/hello"}, {alice.InstanceID, "/notes"}} {
		f, ok := fenced[tc.iid]
		if !ok || f.Location != tc.loc || f.Reason == "" {
			t.Errorf("duplicate %s not fenced: %+v", tc.iid, rep.Fenced)
		}
		if _, err := a.route(t, wire.RouteInstance, "", tc.iid); code(err) != wire.CodeInstanceMerged {
			t.Errorf("route to fenced %s: %v, want %s", tc.iid, err, wire.CodeInstanceMerged)
		}
		if err := m.workers.checkEpoch(tc.iid, infos[tc.iid].Epoch); err == nil {
			t.Errorf("a write for fenced %s was accepted", tc.iid)
		}
	}
	if _, ok := fenced[multi.InstanceID]; ok {
		t.Fatalf("an instance nobody replaced was fenced: %+v", rep.Fenced)
	}
	if r, err := a.route(t, wire.RouteInstance, "multi", multi.InstanceID); err != nil || r.WorkerID != "w-a" {
		t.Fatalf("re-adopted instance: %+v %v", r, err)
	}
	if err := m.workers.checkEpoch(multi.InstanceID, infos[multi.InstanceID].Epoch); err != nil {
		t.Fatalf("re-adopted instance's writes refused: %v", err)
	}
	// Every user has one instance per strategy key: the survivors.
	for _, tc := range []struct{ app, user, want string }{{"hello", "u1", room2.InstanceID}, {"notes", "alice", alice2.InstanceID}} {
		if p, err := a.place(t, tc.app, tc.user); err != nil || p.InstanceID != tc.want {
			t.Errorf("place %s for %s: %+v %v, want %s", tc.app, tc.user, p, err, tc.want)
		}
	}
	// A stale epoch of a live instance is refused too.
	if err := m.workers.checkEpoch(room2.InstanceID, 1); err == nil {
		t.Fatal("a stale epoch was accepted")
	}
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
