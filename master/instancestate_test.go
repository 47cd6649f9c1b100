package master

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/sharedstate"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/state"
)

const testIID = "w-a.stateinstance"

func openStates(t *testing.T, path string, fenced map[uint64]bool) (*instanceStates, *state.Store) {
	t.Helper()
	st, err := state.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	s := newInstanceStates(st, func(iid string, epoch uint64) error {
		if fenced[epoch] {
			return wire.Err("fenced", fmt.Sprintf("instance %s: epoch %d was taken over", iid, epoch))
		}
		return nil
	})
	return s, st
}

func TestInstanceStateWrites(t *testing.T) {
	big := `"` + strings.Repeat("x", sharedstate.MaxValue-2) + `"`
	type step struct {
		w       wire.StateWrite
		seq     uint64 // 0: refused
		err     string
		wantLen int
		value   string // the key's stored value after the step ("" = unchanged / not checked)
	}
	set := func(k, v string) wire.StateWrite {
		return wire.StateWrite{Instance: testIID, Op: wire.StateSet, Key: k, Value: []byte(v)}
	}
	app := func(k, v string, max int) wire.StateWrite {
		return wire.StateWrite{Instance: testIID, Op: wire.StateAppend, Key: k, Value: []byte(v), Max: max}
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"sets and sequence", []step{
			{w: set("a", `1`), seq: 1, value: `1`},
			{w: set("a", `{"x":2}`), seq: 2, value: `{"x":2}`},
			{w: set("b", `null`), seq: 3, value: `null`},
		}},
		{"appends with max", []step{
			{w: app("l", `"m1"`, 2), seq: 1, wantLen: 1, value: `["m1"]`},
			{w: app("l", `"m2"`, 2), seq: 2, wantLen: 2, value: `["m1","m2"]`},
			{w: app("l", `"m3"`, 2), seq: 3, wantLen: 2, value: `["m2","m3"]`},
			{w: app("l", `{"a":1}`, 0), seq: 4, wantLen: 3, value: `["m2","m3",{"a":1}]`}, // 0 = default max
		}},
		{"append to a non-array", []step{
			{w: set("o", `{"a":1}`), seq: 1},
			{w: app("o", `1`, 5), err: `state key "o" holds a value that is not an array`, value: `{"a":1}`},
			{w: set("o", `2`), seq: 2}, // a refused write takes no sequence number
		}},
		{"oversized and malformed", []step{
			{w: set("k", big), seq: 1},
			{w: set("k", big+" "), err: "over the 262144 byte limit"},
			{w: app("l", big, 5), err: "one entry must fit"},
			{w: app("l", `1`, sharedstate.MaxAppendMax+1), err: "append max must be an integer"},
			{w: set(strings.Repeat("k", sharedstate.MaxKey+1), `1`), err: "state key must be"},
			{w: set("", `1`), err: "state key must be"},
			{w: set("j", `{not json`), err: "not JSON"},
			{w: app("l", `{not json`, 5), err: "not JSON"},
			{w: wire.StateWrite{Instance: testIID, Op: "delete", Key: "k"}, err: "unknown operation"},
			{w: wire.StateWrite{Instance: "nonsense", Op: wire.StateSet, Key: "k", Value: []byte("1")}, err: "invalid instance id"},
		}},
		{"fenced epoch", []step{
			{w: wire.StateWrite{Instance: testIID, Epoch: 3, Op: wire.StateSet, Key: "k", Value: []byte(`1`)}, seq: 1},
			{w: wire.StateWrite{Instance: testIID, Epoch: 2, Op: wire.StateSet, Key: "k", Value: []byte(`2`)}, err: "epoch 2 was taken over", value: `1`},
		}},
		{"grants and names", []step{
			{w: wire.StateWrite{Instance: testIID, Op: wire.StateGrant, Key: "bob", Value: []byte("reader")}, seq: 1},
			{w: wire.StateWrite{Instance: testIID, Op: wire.StateGrant, Key: "*", Value: []byte("reader-writer")}, seq: 2},
			{w: wire.StateWrite{Instance: testIID, Op: wire.StateGrant, Key: "Bad Name", Value: []byte("reader")}, err: "grant:"},
			{w: wire.StateWrite{Instance: testIID, Op: wire.StateGrant, Key: "bob", Value: []byte("owner")}, err: "grant:"},
			{w: wire.StateWrite{Instance: testIID, Op: wire.StateName, Value: []byte("Team room")}, seq: 3},
			{w: wire.StateWrite{Instance: testIID, Op: wire.StateName, Value: []byte("two\nlines")}, err: "one line"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, st := openStates(t, "", map[uint64]bool{2: true})
			defer st.Close()
			for i, sp := range tc.steps {
				rep, err := s.write(sp.w)
				switch {
				case sp.err != "":
					if err == nil || !strings.Contains(err.Error(), sp.err) {
						t.Fatalf("step %d: error %v, want %q", i, err, sp.err)
					}
				case err != nil:
					t.Fatalf("step %d: %v", i, err)
				case rep.Seq != sp.seq || rep.Len != sp.wantLen:
					t.Fatalf("step %d: seq %d len %d, want %d %d", i, rep.Seq, rep.Len, sp.seq, sp.wantLen)
				case sp.w.Op == wire.StateAppend && string(rep.Value) != sp.value:
					t.Fatalf("step %d: append answered %s, want %s", i, rep.Value, sp.value)
				}
				if sp.value != "" {
					got, err := s.get(testIID, "")
					if err != nil {
						t.Fatal(err)
					}
					if v := got.Values[sp.w.Key]; string(v.Value) != sp.value {
						t.Fatalf("step %d: stored %s, want %s", i, v.Value, sp.value)
					}
				}
			}
		})
	}
}

func TestInstanceStateKeyLimit(t *testing.T) {
	s, st := openStates(t, "", nil)
	defer st.Close()
	for i := range sharedstate.MaxKeys {
		if _, err := s.write(wire.StateWrite{Instance: testIID, Op: wire.StateSet, Key: fmt.Sprint(i), Value: []byte("1")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.write(wire.StateWrite{Instance: testIID, Op: wire.StateAppend, Key: "one more", Value: []byte("1")}); err == nil ||
		!strings.Contains(err.Error(), "already has 1024 state keys") {
		t.Fatalf("key %d: %v", sharedstate.MaxKeys+1, err)
	}
	if _, err := s.write(wire.StateWrite{Instance: testIID, Op: wire.StateSet, Key: "7", Value: []byte("2")}); err != nil {
		t.Fatalf("rewriting a key at the limit: %v", err)
	}
}

// What was acknowledged is still there after the store is closed and
// opened again (a master restart), including grants and the name; a closed
// instance's state is gone; Get pages through large states.
func TestInstanceStateSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), state.FileName)
	s, st := openStates(t, path, nil)
	var last wire.StateWriteReply
	var err error
	for i := range 50 {
		if last, err = s.write(wire.StateWrite{Instance: testIID, Op: wire.StateAppend, Key: "messages", Value: fmt.Appendf(nil, `"m%d"`, i), Max: 200}); err != nil {
			t.Fatal(err)
		}
	}
	big := `"` + strings.Repeat("y", sharedstate.MaxValue-10) + `"`
	for i := range 20 { // 5 MiB: more than one page
		if _, err := s.write(wire.StateWrite{Instance: testIID, Op: wire.StateSet, Key: fmt.Sprintf("big%02d", i), Value: []byte(big)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range []wire.StateWrite{
		{Instance: testIID, Op: wire.StateGrant, Key: "bob", Value: []byte("reader")},
		{Instance: testIID, Op: wire.StateName, Value: []byte("chat room")},
		{Instance: "w-a.other", Op: wire.StateSet, Key: "k", Value: []byte("1")},
	} {
		if _, err := s.write(w); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	s, st = openStates(t, path, nil)
	defer st.Close()
	first, err := s.get(testIID, "")
	if err != nil || !first.More {
		t.Fatalf("first page: more=%v %v", first.More, err)
	}
	got, err := s.getAll(testIID)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Found || got.Seq != 72 || got.Name != "chat room" || got.Grants["bob"] != "reader" || len(got.Values) != 21 || got.More {
		t.Fatalf("after reopening: found=%v seq=%d name=%q grants=%v keys=%d", got.Found, got.Seq, got.Name, got.Grants, len(got.Values))
	}
	if m := got.Values["messages"]; string(m.Value) != string(last.Value) || m.Seq != 50 || !strings.HasSuffix(string(m.Value), `"m49"]`) {
		t.Fatalf("messages: seq %d %.60s", m.Seq, m.Value)
	}
	if rep, err := s.write(wire.StateWrite{Instance: testIID, Op: wire.StateSet, Key: "k", Value: []byte("1")}); err != nil || rep.Seq != 73 {
		t.Fatalf("the sequence goes on after reopening: %d %v", rep.Seq, err)
	}
	if err := s.drop(testIID); err != nil {
		t.Fatal(err)
	}
	if got, err := s.get(testIID, ""); err != nil || got.Found {
		t.Fatalf("closed instance's state still there: %+v %v", got.Found, err)
	}
	if got, _ := s.get("w-a.other", ""); !got.Found {
		t.Fatal("another instance's state went with it")
	}
}

// Over RMI: only the worker the table says hosts the instance may write
// its state; the table follows grants and names for landing pages; closing
// the instance deletes its state.
func TestInstanceStateService(t *testing.T) {
	m := startMaster(t, "")
	iid := "w-one.abcabcabc"
	one := addWorker(t, m, "w-one", wire.InstanceInfo{ID: iid, App: "multi", Owner: "alice", Worker: "w-one"})
	two := addWorker(t, m, "w-two")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	write := func(f *fakeWorker, w wire.StateWrite) (wire.StateWriteReply, error) {
		return contract.InstanceStateClient{C: f.conn}.Write(ctx, w)
	}
	if rep, err := write(one, wire.StateWrite{Instance: iid, Op: wire.StateAppend, Key: "l", Value: []byte(`"x"`)}); err != nil || rep.Seq != 1 || string(rep.Value) != `["x"]` {
		t.Fatalf("host's write: %+v %v", rep, err)
	}
	if _, err := write(two, wire.StateWrite{Instance: iid, Op: wire.StateSet, Key: "l", Value: []byte(`1`)}); err == nil || !strings.Contains(err.Error(), "not by the caller") {
		t.Fatalf("another worker's write: %v", err)
	}
	if _, err := write(one, wire.StateWrite{Instance: "w-one.unknown", Op: wire.StateSet, Key: "l", Value: []byte(`1`)}); err == nil || !strings.Contains(err.Error(), "not in the master's table") {
		t.Fatalf("unknown instance: %v", err)
	}
	if _, err := write(one, wire.StateWrite{Instance: iid, Op: wire.StateGrant, Key: "bob", Value: []byte("reader")}); err != nil {
		t.Fatal(err)
	}
	if list := m.workers.UserInstances("multi", "bob"); len(list) != 1 || list[0].ID != iid {
		t.Fatalf("bob's landing page: %+v", list)
	}
	if st, err := (contract.InstanceStateClient{C: one.conn}).Get(ctx, iid, ""); err != nil || string(st.Values["l"].Value) != `["x"]` || st.Grants["bob"] != "reader" {
		t.Fatalf("get: %+v %v", st, err)
	}
	if err := (contract.WorkerManagerClient{C: one.conn}).InstanceClosed(ctx, wire.ClosedInstance{ID: iid, Epoch: one.epoch(iid)}); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.istate.get(iid, ""); got.Found {
		t.Fatal("state kept after the instance closed")
	}
}
