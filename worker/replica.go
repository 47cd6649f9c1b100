package worker

import (
	"encoding/json"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/httpserve"
)

// The instances' side of their shared state: each write is stored at the
// master (failover.Replica) before it applies here.

// replicate has the master store one write of in's shared state under the
// instance's placement epoch.
func (w *Worker) replicate(in *instance, sw wire.StateWrite) (wire.StateWriteReply, error) {
	sw.Instance, sw.Epoch = in.info.ID, in.epoch()
	return w.replica.Write(w.ctx, sw)
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
