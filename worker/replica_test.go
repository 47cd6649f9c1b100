package worker

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/cloudbrowser-go/cloudbrowser/internal/sharedstate"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
	"github.com/cloudbrowser-go/cloudbrowser/worker/failover"
	"github.com/cloudbrowser-go/cloudbrowser/worker/httpserve"
)

// localReplica acknowledges writes from this process's memory, with the
// master's rules (sequence numbers, the append): the unit tests' stand-in
// for the master, and the benchmark's "no replication" baseline.
type localReplica struct {
	mu   sync.Mutex
	seq  map[string]uint64
	vals map[string]map[string]wire.StateValue
}

func newLocalReplica() *localReplica {
	return &localReplica{seq: map[string]uint64{}, vals: map[string]map[string]wire.StateValue{}}
}

func (r *localReplica) Write(ctx context.Context, w wire.StateWrite) (wire.StateWriteReply, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var rep wire.StateWriteReply
	if r.vals[w.Instance] == nil {
		r.vals[w.Instance] = map[string]wire.StateValue{}
	}
	vals := r.vals[w.Instance]
	v := w.Value
	if w.Op == wire.StateAppend {
		var err error
		if v, rep.Len, err = sharedstate.Append(w.Key, vals[w.Key].Value, w.Value, w.Max); err != nil {
			return rep, &rmi.RemoteError{Code: wire.CodeInvalid, Message: err.Error()}
		}
		rep.Value = v
	}
	r.seq[w.Instance]++
	rep.Seq = r.seq[w.Instance]
	if w.Op == wire.StateSet || w.Op == wire.StateAppend {
		vals[w.Key] = wire.StateValue{Seq: rep.Seq, Value: v}
	}
	return rep, nil
}

func (r *localReplica) Get(ctx context.Context, iid, after string) (wire.InstanceState, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	vals, ok := r.vals[iid]
	if !ok {
		return wire.InstanceState{}, nil
	}
	out := wire.InstanceState{Found: true, Seq: r.seq[iid], Values: map[string]wire.StateValue{}}
	for k, v := range vals {
		out.Values[k] = v
	}
	return out, nil
}

// gatedReplica holds every write until release is closed, then passes it
// on (or refuses it with refuse, if set).
type gatedReplica struct {
	next    failover.StateStore
	arrived chan wire.StateWrite
	release chan struct{}
	refuse  error
}

func (g *gatedReplica) Write(ctx context.Context, w wire.StateWrite) (wire.StateWriteReply, error) {
	g.arrived <- w
	select {
	case <-g.release:
	case <-ctx.Done():
		return wire.StateWriteReply{}, ctx.Err()
	}
	if g.refuse != nil {
		return wire.StateWriteReply{}, g.refuse
	}
	return g.next.Write(ctx, w)
}

func (g *gatedReplica) Get(ctx context.Context, iid, after string) (wire.InstanceState, error) {
	return g.next.Get(ctx, iid, after)
}

// stateFixture is a worker (no master, no Chromium) with one instance and a
// replica the test controls.
func stateFixture(t *testing.T, r failover.StateStore) (*Worker, *instance, *vbrowser) {
	t.Helper()
	w, _ := newTestWorker(t)
	w.replica.Store = r
	app, _ := w.catalog.app("hello")
	iid := "w-test.statestatest"
	if err := w.apps.CreateInstance(context.Background(), wire.CreateInstance{App: app, InstanceID: iid, Owner: "alice", Epoch: 7}); err != nil {
		t.Fatal(err)
	}
	in, _ := w.instances.get(iid)
	return w, in, &vbrowser{inst: in, owner: "alice", subs: map[string]bool{}}
}

func maxOf(n float64) *float64 { return &n }

// A write is neither visible nor answered before the master acknowledged
// it; then it is, with the master's sequence number and the epoch sent.
func TestStateWriteWaitsForTheMaster(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  apiRequest
		want any
		seen string
	}{
		{"set", apiRequest{Op: "set", Key: "k", Value: json.RawMessage(`{"n":1}`)}, true, `{"n":1}`},
		{"append", apiRequest{Op: "append", Key: "k", Value: json.RawMessage(`"m"`), Max: maxOf(5)}, 1, `["m"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &gatedReplica{next: newLocalReplica(), arrived: make(chan wire.StateWrite, 1), release: make(chan struct{})}
			w, in, vb := stateFixture(t, g)
			type result struct {
				v   any
				err error
			}
			done := make(chan result, 1)
			go func() {
				v, err := w.api.apiOp(vb, tc.req)
				done <- result{v, err}
			}()
			sent := <-g.arrived // the write is at the "master" now
			if sent.Instance != in.info.ID || sent.Epoch != 7 || sent.Op != tc.req.Op || sent.Key != "k" {
				t.Fatalf("sent %+v", sent)
			}
			select {
			case r := <-done:
				t.Fatalf("answered before the master acknowledged: %v %v", r.v, r.err)
			default:
			}
			got, _ := w.api.apiOp(vb, apiRequest{Op: "get", Key: "k"})
			if rd := got.(stateRead); rd.Value != nil || rd.Seq != 0 {
				t.Fatalf("visible before the acknowledgement: %s (seq %d)", rd.Value, rd.Seq)
			}
			close(g.release)
			r := <-done
			if r.err != nil || r.v != tc.want {
				t.Fatalf("answer %v %v, want %v", r.v, r.err, tc.want)
			}
			got, _ = w.api.apiOp(vb, apiRequest{Op: "get", Key: "k"})
			if rd := got.(stateRead); string(rd.Value) != tc.seen || rd.Seq != 1 {
				t.Fatalf("after the acknowledgement: %s (seq %d)", rd.Value, rd.Seq)
			}
		})
	}
}

// A write the master refuses (a fenced epoch, a limit) or does not answer
// fails with its reason, and changes nothing on the worker.
func TestStateWriteRefusedByTheMaster(t *testing.T) {
	for _, tc := range []struct {
		name   string
		refuse error
		want   string
	}{
		{"fenced", &rmi.RemoteError{Code: "fenced", Message: "instance w-test.statestatest: epoch 7 is older than 8"}, "shared state not saved: instance w-test.statestatest: epoch 7 is older than 8"},
		{"unreachable", context.DeadlineExceeded, "shared state not saved: the master did not acknowledge the write"},
	} {
		for _, op := range []apiRequest{
			{Op: "set", Key: "k", Value: json.RawMessage(`1`)},
			{Op: "append", Key: "k", Value: json.RawMessage(`1`)},
		} {
			t.Run(tc.name+"/"+op.Op, func(t *testing.T) {
				g := &gatedReplica{next: newLocalReplica(), arrived: make(chan wire.StateWrite, 1), release: make(chan struct{}), refuse: tc.refuse}
				close(g.release)
				w, _, vb := stateFixture(t, g)
				_, err := w.api.apiOp(vb, op)
				<-g.arrived
				if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, httpserve.ErrNotSaved) {
					t.Fatalf("error %v, want %q", err, tc.want)
				}
				got, _ := w.api.apiOp(vb, apiRequest{Op: "get", Key: "k"})
				if rd := got.(stateRead); rd.Value != nil {
					t.Fatalf("refused write applied: %s", rd.Value)
				}
			})
		}
	}
}

// Instance grants and names go through the master too.
func TestGrantsAndNamesWaitForTheMaster(t *testing.T) {
	g := &gatedReplica{next: newLocalReplica(), arrived: make(chan wire.StateWrite, 1), release: make(chan struct{}),
		refuse: &rmi.RemoteError{Code: "fenced", Message: "no"}}
	close(g.release)
	_, in, _ := stateFixture(t, g)
	if err := in.grantInstance("alice", "bob", httpserve.RoleReader); !errors.Is(err, httpserve.ErrNotSaved) {
		t.Fatalf("grant: %v", err)
	}
	if w := <-g.arrived; w.Op != wire.StateGrant || w.Key != "bob" || string(w.Value) != "reader" {
		t.Fatalf("sent %+v", w)
	}
	if r := in.instanceRole("bob"); r != httpserve.RoleNone {
		t.Fatalf("refused grant applied: %v", r)
	}
	if err := in.saveName("x"); !errors.Is(err, httpserve.ErrNotSaved) {
		t.Fatalf("rename: %v", err)
	}
	<-g.arrived
	g.refuse = nil
	go func() { <-g.arrived }()
	if err := in.grantInstance("alice", "bob", httpserve.RoleReader); err != nil || in.instanceRole("bob") != httpserve.RoleReader {
		t.Fatalf("grant: %v", err)
	}
}

// A new instance whose id the master holds state for starts from it.
func TestCreateInstanceRestoresState(t *testing.T) {
	r := newLocalReplica()
	iid := "w-test.statestatest"
	for _, v := range []string{`"a"`, `"b"`} {
		if _, err := r.Write(context.Background(), wire.StateWrite{Instance: iid, Op: wire.StateAppend, Key: "log", Value: []byte(v), Max: 10}); err != nil {
			t.Fatal(err)
		}
	}
	w, _, vb := stateFixture(t, r)
	got, _ := w.api.apiOp(vb, apiRequest{Op: "get", Key: "log"})
	if rd := got.(stateRead); string(rd.Value) != `["a","b"]` || rd.Seq != 2 {
		t.Fatalf("restored %s (seq %d)", rd.Value, rd.Seq)
	}
	n, err := w.api.apiOp(vb, apiRequest{Op: "append", Key: "log", Value: json.RawMessage(`"c"`)})
	if err != nil || n != 3 {
		t.Fatalf("append after restore: %v %v", n, err)
	}
}

// Replies of concurrent writes can arrive out of order: an older one never
// replaces a newer value.
func TestApplyStateKeepsTheNewest(t *testing.T) {
	_, in, _ := stateFixture(t, newLocalReplica())
	in.applyState("k", json.RawMessage(`2`), 2)
	in.applyState("k", json.RawMessage(`1`), 1)
	if string(in.state["k"]) != "2" || in.seqs["k"] != 2 {
		t.Fatalf("state %s seq %d", in.state["k"], in.seqs["k"])
	}
}
