package failover

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
	"github.com/cloudbrowser-go/cloudbrowser/worker/httpserve"
)

// stateStore answers every write with err (or acknowledges it as sequence
// 7) and serves values in pages of two keys.
type stateStore struct {
	err    error
	writes []wire.StateWrite
	values map[string]wire.StateValue
}

func (s *stateStore) Write(ctx context.Context, w wire.StateWrite) (wire.StateWriteReply, error) {
	s.writes = append(s.writes, w)
	if s.err != nil {
		return wire.StateWriteReply{}, s.err
	}
	return wire.StateWriteReply{Seq: 7}, nil
}

func (s *stateStore) Get(ctx context.Context, iid, after string) (wire.InstanceState, error) {
	if iid != "w-a.state" {
		return wire.InstanceState{}, nil
	}
	out := wire.InstanceState{Found: true, Name: "the room", Values: map[string]wire.StateValue{}}
	for _, k := range slices.Sorted(maps.Keys(s.values)) {
		if k <= after {
			continue
		}
		if len(out.Values) == 2 {
			out.More = true
			break
		}
		out.Values[k] = s.values[k]
	}
	return out, nil
}

// A write is acknowledged only once the store has it, under the instance
// and epoch it names. What the store refuses fails: a write it finds
// invalid with its message as is, its other reasons (a fenced epoch) and a
// store that does not answer as not saved; and so does any write without
// a store.
func TestReplicaWrite(t *testing.T) {
	ctx := context.Background()
	sw := wire.StateWrite{Instance: "w-a.state", Epoch: 3, Op: wire.StateSet, Key: "k", Value: []byte("1")}
	for _, tc := range []struct {
		name     string
		store    *stateStore
		want     string
		notSaved bool
	}{
		{"acknowledged", &stateStore{}, "", false},
		{"invalid", &stateStore{err: &rmi.RemoteError{Code: wire.CodeInvalid, Message: `"k" is not an array`}}, `"k" is not an array`, false},
		{"fenced", &stateStore{err: &rmi.RemoteError{Code: "fenced", Message: "the instance moved"}}, "the instance moved", true},
		{"lost", &stateStore{err: &rmi.RemoteError{Code: "rmi.closed", Message: "connection closed"}}, "the master did not acknowledge the write", true},
		{"timed out", &stateStore{err: context.DeadlineExceeded}, "the master did not acknowledge the write", true},
		{"no store", nil, "this worker has no master to store it", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Replica{Log: zerolog.Nop()}
			if tc.store != nil {
				r.Store = tc.store
			}
			rep, err := r.Write(ctx, sw)
			if tc.want == "" {
				if err != nil || rep.Seq != 7 {
					t.Fatalf("Write: %+v, %v", rep, err)
				}
			} else if err == nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, httpserve.ErrNotSaved) != tc.notSaved {
				t.Fatalf("Write: %v, want %q (not saved: %v)", err, tc.want, tc.notSaved)
			}
			if tc.store != nil && (len(tc.store.writes) != 1 || tc.store.writes[0].Instance != sw.Instance || tc.store.writes[0].Epoch != 3) {
				t.Fatalf("the store got %+v", tc.store.writes)
			}
		})
	}
}

// Load reads every page of an instance's state; without a store, or for an
// instance the store does not know, there is nothing.
func TestReplicaLoad(t *testing.T) {
	ctx := context.Background()
	store := &stateStore{values: map[string]wire.StateValue{
		"a": {Seq: 1, Value: []byte("1")}, "b": {Seq: 2, Value: []byte("2")}, "c": {Seq: 3, Value: []byte("3")},
		"d": {Seq: 4, Value: []byte("4")}, "e": {Seq: 5, Value: []byte("5")},
	}}
	r := Replica{Store: store, Log: zerolog.Nop()}
	st, err := r.Load(ctx, "w-a.state")
	if err != nil {
		t.Fatal(err)
	}
	if !st.Found || st.Name != "the room" || st.More || !maps.EqualFunc(st.Values, store.values, func(a, b wire.StateValue) bool {
		return a.Seq == b.Seq && string(a.Value) == string(b.Value)
	}) {
		t.Fatalf("loaded %+v", st)
	}
	if st, err := r.Load(ctx, "w-a.unknown"); err != nil || st.Found {
		t.Fatalf("unknown instance: %+v, %v", st, err)
	}
	if st, err := (&Replica{}).Load(ctx, "w-a.state"); err != nil || st.Found {
		t.Fatalf("no store: %+v, %v", st, err)
	}
}
