package registry

import (
	"fmt"
	"sync"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// Ownership of instances is the master's decision, never a worker's guess.
// Every placement gets an epoch (a fencing token) larger than any before it,
// durable across master restarts. A worker that comes back after being
// declared dead reports its instances with their epochs; the master keeps
// one instance per strategy key and fences the others: the worker closes
// them and tells their users where to go on. Writes a worker makes for an
// instance (its shared state) carry the epoch and are refused when it is
// not the current one (Gate.CheckEpoch).

// epochs hands out placement epochs.
type epochs struct {
	st Store // nil = memory only

	mu  sync.Mutex
	cur uint64
}

const (
	epochBucket = "meta"
	epochKey    = "epoch"
)

func newEpochs(st Store) (*epochs, error) {
	e := &epochs{st: st}
	if st != nil {
		if _, err := st.Get(epochBucket, epochKey, &e.cur); err != nil {
			return nil, fmt.Errorf("placement epochs: %w", err)
		}
	}
	return e, nil
}

// next returns a new epoch, stored before it is used, so no epoch is ever
// handed out twice.
func (e *epochs) next() (uint64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := e.cur + 1
	if e.st != nil {
		if err := e.st.Put(epochBucket, epochKey, n); err != nil {
			return 0, err
		}
	}
	e.cur = n
	return n, nil
}

// issued says whether epoch v is one this master handed out: every epoch
// is stored before use, so a larger one was never issued (forged by a
// worker-key holder, or from another cluster's store). Accepting it would
// let a reported 2^64-1 wrap next() to 0 and break fencing.
func (e *epochs) issued(v uint64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return v <= e.cur
}

// mergedReason is what users of a fenced duplicate are told.
const mergedReason = "This app instance was closed in favour of the one the application now gives you; its data is kept."

// unissuedReason is what users of an instance held under an epoch the
// master never issued are told (a master that lost its store, or a forged
// report).
const unissuedReason = "This app instance is not known to the cluster's master any more."

// reconcileLocked decides, for an instance a registering worker reports,
// whether the worker keeps it. It returns the fencing order, or nil to
// adopt the instance.
func (r *Registry) reconcileLocked(workerID string, in wire.InstanceInfo, now time.Time) *wire.FencedInstance {
	loc := "/" + in.App
	if cur, ok := r.instances[in.ID]; ok && (cur.Worker != workerID || cur.Epoch > in.Epoch) &&
		!(cur.unconfirmed && in.Epoch > cur.Epoch) { // a stored record older than the report: the reporter's is newer
		// Placed again since, elsewhere or under a newer epoch.
		return &wire.FencedInstance{ID: in.ID, Reason: "This app instance moved to another worker.", Location: loc, Moved: true}
	}
	app, ok := r.apps.App(in.App)
	if !ok {
		return nil // its app is gone: adopted, and closed with the app as usual
	}
	key := strategyKey(app, in.Owner)
	if key == "" {
		return nil
	}
	holder, taken := r.byKey[key]
	if !taken || holder == in.ID {
		return nil
	}
	// Two instances for one strategy key (instances from before a master
	// restart, an app whose strategy changed; never one placed while this
	// worker was unreachable: placements wait for the holder): the one
	// holding the key goes on, the returning one gives way, its URLs say
	// so, and its stored state is kept.
	r.lost[in.ID] = lostRec{app: in.App, at: now, mergedInto: holder}
	return &wire.FencedInstance{ID: in.ID, Reason: mergedReason, Location: loc}
}

// CheckEpoch refuses what a worker does for instance iid under a placement
// epoch that is not the current one (a fenced owner), or for an instance the
// master declared lost.
func (g *Gate) CheckEpoch(iid string, epoch uint64) error {
	g.r.mu.Lock()
	defer g.r.mu.Unlock()
	in, ok := g.r.instances[iid]
	if !ok {
		if _, lost := g.r.lost[iid]; lost {
			return wire.Err(wire.CodeInstanceLost, "instance "+iid+" is no longer owned by its worker")
		}
		return wire.Err(wire.CodeUnknownInstance, "no instance "+iid)
	}
	if in.Epoch != epoch {
		return wire.Errorf(wire.CodeInstanceLost, "instance %s: epoch %d is fenced (current %d)", iid, epoch, in.Epoch)
	}
	if in.moving != nil && !in.migrating {
		// Its worker was declared dead and the instance is being placed
		// again from what is stored: a write now would be acknowledged to
		// users of a copy the new owner never sees.
		return wire.Errorf(wire.CodeInstanceMoving, "instance %s is moving to another worker: its worker was declared dead", iid)
	}
	return nil
}

// ownedLocked: worker wid holds instance in under epoch, and the master is
// not moving it (what a worker may do to an instance "for good", such as
// closing it, needs all three).
func ownedLocked(in *instanceRec, wid string, epoch uint64) bool {
	return in.Worker == wid && in.Epoch == epoch && in.moving == nil
}
