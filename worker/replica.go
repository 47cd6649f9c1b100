package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
	"github.com/cloudbrowser-go/cloudbrowser/worker/httpserve"
)

// An instance's shared state (app API set/append, instance grants, its
// name) is stored off this worker before a write is acknowledged: the
// worker sends the write to the master's InstanceState object, which
// commits it to its state store and answers the write's sequence number
// (and an append's new array); only then does the worker apply it to its
// copy, tell the subscribed pages and resolve the page's promise. A write
// the master refuses or does not acknowledge in time fails, and nothing
// changes here. Reads are served from the worker's copy.

// stateReplica is where shared state is stored off the worker.
type stateReplica interface {
	Write(ctx context.Context, w wire.StateWrite) (wire.StateWriteReply, error)
	Get(ctx context.Context, iid, after string) (wire.InstanceState, error)
}

// stateWriteTimeout bounds how long a page waits for the master.
const stateWriteTimeout = 10 * time.Second

// The master's contract.InstanceStateClient is both stores.
var (
	_ stateReplica  = contract.InstanceStateClient{}
	_ snapshotStore = contract.InstanceStateClient{}
)

// errNoReplica: a worker that never started its master connection (some
// unit tests) cannot store shared state.
var errNoReplica = fmt.Errorf("%w: this worker has no master to store it", httpserve.ErrNotSaved)

// replicate has the master store one write of in's shared state under the
// instance's placement epoch.
func (w *Worker) replicate(in *instance, sw wire.StateWrite) (wire.StateWriteReply, error) {
	if w.replica == nil {
		return wire.StateWriteReply{}, errNoReplica
	}
	sw.Instance, sw.Epoch = in.info.ID, in.epoch()
	ctx, cancel := context.WithTimeout(w.ctx, stateWriteTimeout)
	defer cancel()
	rep, err := w.replica.Write(ctx, sw)
	if err == nil {
		return rep, nil
	}
	var re *rmi.RemoteError
	if errors.As(err, &re) && re.Code == wire.CodeInvalid {
		// The write itself is wrong (a limit, not an array): the page
		// gets the same message the worker's own checks give.
		return rep, errors.New(re.Message)
	}
	if errors.As(err, &re) && !strings.HasPrefix(re.Code, "rmi.") {
		// The master decided otherwise (a fenced epoch): its reason.
		return rep, fmt.Errorf("%w: %s", httpserve.ErrNotSaved, re.Message)
	}
	w.log.Warn().Str("instance", in.info.ID).Str("op", sw.Op).Err(err).Msg("shared-state write not acknowledged by the master")
	return rep, fmt.Errorf("%w: the master did not acknowledge the write (%v)", httpserve.ErrNotSaved, err)
}

// loadState reads what the master holds of an instance (a re-placement:
// the id had a life on another worker), every page.
func (w *Worker) loadState(ctx context.Context, iid string) (wire.InstanceState, error) {
	if w.replica == nil {
		return wire.InstanceState{}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, stateWriteTimeout)
	defer cancel()
	all, err := wire.AllState(func(after string) (wire.InstanceState, error) { return w.replica.Get(ctx, iid, after) })
	if err != nil {
		return all, fmt.Errorf("load the shared state of %s from the master: %w", iid, err)
	}
	return all, nil
}

// restore fills a new instance from the master's copy.
func (in *instance) restore(st wire.InstanceState) {
	if !st.Found {
		return
	}
	in.info.Name = st.Name
	for p, r := range st.Grants {
		if role, err := httpserve.ParseRole(r); err == nil && role != httpserve.RoleNone {
			in.perms[p] = role
		}
	}
	for k, v := range st.Values {
		in.state[k], in.seqs[k] = json.RawMessage(v.Value), v.Seq
	}
}

// epoch is the placement epoch the instance is held under.
func (in *instance) epoch() uint64 {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.info.Epoch
}

// placedAgain takes a newer placement epoch the master gave this instance
// (a placement retried, or a failover racing a migration, to this same
// worker): from now on writes go under it. An older one changes nothing.
func (in *instance) placedAgain(epoch uint64) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if epoch > in.info.Epoch {
		in.info.Epoch = epoch
	}
}

// saveGrant has the master store a grant on the instance, then applies it.
// Grants and names of one instance are stored one at a time (writeMu), so
// they apply in the master's order.
func (in *instance) saveGrant(principal string, role httpserve.Role) error {
	in.writeMu.Lock()
	defer in.writeMu.Unlock()
	if in.w != nil { // nil only for instances made by unit tests
		if _, err := in.w.replicate(in, wire.StateWrite{Op: wire.StateGrant, Key: principal, Value: []byte(role.String())}); err != nil {
			return err
		}
	}
	in.setGrant(principal, role)
	return nil
}

// saveName has the master store the instance's name, then applies it.
func (in *instance) saveName(name string) error {
	in.writeMu.Lock()
	defer in.writeMu.Unlock()
	if in.w != nil {
		if _, err := in.w.replicate(in, wire.StateWrite{Op: wire.StateName, Value: []byte(name)}); err != nil {
			return err
		}
	}
	in.mu.Lock()
	in.info.Name = name
	in.mu.Unlock()
	return nil
}
