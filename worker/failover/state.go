package failover

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
	"github.com/cloudbrowser-go/cloudbrowser/worker/httpserve"
)

// An instance's shared state (app API set/append, instance grants, its
// name) is stored off the worker before a write is acknowledged: the
// worker sends the write to the master's InstanceState object, which
// commits it to its state store and answers the write's sequence number
// (and an append's new array); only then does the worker apply it to its
// copy, tell the subscribed pages and resolve the page's promise. A write
// the master refuses or does not acknowledge in time fails, and nothing
// changes on the worker. Reads are served from the worker's copy.

// StateStore is where shared state is stored off the worker: the master.
type StateStore interface {
	Write(ctx context.Context, w wire.StateWrite) (wire.StateWriteReply, error)
	Get(ctx context.Context, iid, after string) (wire.InstanceState, error)
}

// The master's InstanceState object is the store.
var _ StateStore = contract.InstanceStateClient{}

// stateTimeout bounds how long a page waits for the master, and reading
// an instance's state or snapshots.
const stateTimeout = 10 * time.Second

// errNoStore: a worker that never started its master connection (some
// unit tests) cannot store shared state.
var errNoStore = fmt.Errorf("%w: this worker has no master to store it", httpserve.ErrNotSaved)

// Replica stores the shared state of a worker's instances off it.
type Replica struct {
	// Store keeps the state: the master. Without one (unit tests without
	// a master) writes fail and there is nothing to load.
	Store StateStore
	Log   zerolog.Logger
}

// Write has the store keep sw, one write of an instance's shared state,
// under the placement epoch sw names. A write the store finds invalid (a
// limit, not an array) fails with the store's message, as the worker's
// own checks would; any other failure wraps httpserve.ErrNotSaved.
func (r *Replica) Write(ctx context.Context, sw wire.StateWrite) (wire.StateWriteReply, error) {
	if r.Store == nil {
		return wire.StateWriteReply{}, errNoStore
	}
	ctx, cancel := context.WithTimeout(ctx, stateTimeout)
	defer cancel()
	rep, err := r.Store.Write(ctx, sw)
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
	r.Log.Warn().Str("instance", sw.Instance).Str("op", sw.Op).Err(err).Msg("shared-state write not acknowledged by the master")
	return rep, fmt.Errorf("%w: the master did not acknowledge the write (%v)", httpserve.ErrNotSaved, err)
}

// Load reads what the store holds of an instance (a re-placement: the id
// had a life on another worker), every page.
func (r *Replica) Load(ctx context.Context, iid string) (wire.InstanceState, error) {
	if r.Store == nil {
		return wire.InstanceState{}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, stateTimeout)
	defer cancel()
	all, err := wire.AllState(func(after string) (wire.InstanceState, error) { return r.Store.Get(ctx, iid, after) })
	if err != nil {
		return all, fmt.Errorf("load the shared state of %s from the master: %w", iid, err)
	}
	return all, nil
}
