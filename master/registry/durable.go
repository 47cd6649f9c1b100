package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/state"
)

// The instance table is durable. Workers' registrations rebuild it after a
// master restart, but a worker that died with the master (a double fault)
// never registers again: without a record its instances, and their
// acknowledged state in state.db, would be forgotten, and a returning user
// would get a new, empty instance. So every change of the table is
// journalled to the store (bucket instanceBucket) by one writer goroutine
// that always writes an instance's current record (or its removal), in the
// order of the table, never an older one; a placement waits for its record
// before it is answered (journal.sync). A restarted master loads the
// records (RecoverInstances): each instance waits for its worker to
// register and report it; one its worker does not report, or whose worker
// does not come back within the grace period, is placed again under its id
// with its state (failover.go). Until then its URLs answer "moving" and its
// strategy key is held, so no user gets a second instance.

// instanceBucket holds the instance table: id -> wire.InstanceInfo (JSON;
// quota holds are counted again when it is loaded, as for an adopted one).
const instanceBucket = "instances"

// journal is the table's write-behind to the store.
type journal struct {
	r *Registry
	// The rest is guarded by the registry's lock.
	kick    chan struct{}
	dirty   map[string]struct{}
	marked  uint64 // generations of changes marked
	written uint64 // generations the store has
	wrote   chan struct{}
}

func newJournal(r *Registry) *journal {
	return &journal{r: r, kick: make(chan struct{}, 1), dirty: map[string]struct{}{}, wrote: make(chan struct{})}
}

// markLocked notes that iid's record changed (the registry's lock held).
func (j *journal) markLocked(iid string) {
	if j.r.state == nil {
		return
	}
	j.dirty[iid] = struct{}{}
	j.marked++
	j.poke()
}

// poke wakes the writer (a wake-up already pending will do).
func (j *journal) poke() {
	select {
	case j.kick <- struct{}{}:
	default:
	}
}

// sync waits until every change marked so far is in the store.
func (j *journal) sync(ctx context.Context) error {
	if j.r.state == nil {
		return nil
	}
	j.r.mu.Lock()
	want := j.marked
	for j.written < want {
		wrote := j.wrote
		j.r.mu.Unlock()
		select {
		case <-wrote:
		case <-ctx.Done():
			return fmt.Errorf("instance table not stored: %w", ctx.Err())
		case <-j.r.ctx.Done():
			return fmt.Errorf("instance table not stored: %w", j.r.ctx.Err())
		}
		j.r.mu.Lock()
	}
	j.r.mu.Unlock()
	return nil
}

// run writes marked records until the registry closes, then once
// more so a clean stop loses nothing.
func (j *journal) run() {
	for {
		select {
		case <-j.kick:
			j.write()
		case <-j.r.ctx.Done():
			j.write()
			return
		}
	}
}

// write writes the current record of every dirty instance in one
// transaction (a failed write is retried with the next change or a second
// later: the dirty set is kept).
func (j *journal) write() {
	j.r.mu.Lock()
	if len(j.dirty) == 0 {
		j.r.mu.Unlock()
		return
	}
	gen := j.marked
	recs := make(map[string][]byte, len(j.dirty))
	for iid := range j.dirty {
		in, ok := j.r.instances[iid]
		if !ok {
			recs[iid] = nil
			continue
		}
		raw, err := json.Marshal(in.InstanceInfo)
		if err != nil {
			j.r.log.Error().Err(err).Str("instance", iid).Msg("instance record not encodable")
			continue
		}
		recs[iid] = raw
	}
	j.dirty = map[string]struct{}{}
	j.r.mu.Unlock()
	err := j.r.state.Update(func(tx state.Tx) error {
		for iid, raw := range recs {
			var err error
			if raw == nil {
				err = tx.Delete(instanceBucket, iid)
			} else {
				err = tx.PutRaw(instanceBucket, iid, raw)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	j.r.mu.Lock()
	defer j.r.mu.Unlock()
	if err != nil {
		j.r.log.Error().Err(err).Int("instances", len(recs)).Msg("instance table not stored; retrying")
		for iid := range recs {
			j.dirty[iid] = struct{}{}
		}
		if j.r.ctx.Err() == nil {
			j.r.clk.AfterFunc(time.Second, j.poke)
		}
		return
	}
	if gen > j.written {
		j.written = gen
	}
	close(j.wrote)
	j.wrote = make(chan struct{})
}

// recover loads the stored table (a master start, before workers
// can register). Each instance waits, as moving, for its worker to report
// it; after grace the ones still unreported are placed again.
func (j *journal) recover() (int, error) {
	if j.r.state == nil {
		return 0, nil
	}
	var recs []wire.InstanceInfo
	var decodeErr error
	j.r.state.Scan(instanceBucket, "", func(k string, raw []byte) bool {
		var si wire.InstanceInfo
		if err := json.Unmarshal(raw, &si); err != nil {
			decodeErr = fmt.Errorf("instance record %s: %w", k, err)
			return false
		}
		recs = append(recs, si)
		return true
	})
	if decodeErr != nil {
		return 0, decodeErr
	}
	j.r.mu.Lock()
	for _, si := range recs {
		if _, ok := j.r.instances[si.ID]; ok {
			continue
		}
		j.r.addInstanceLocked(si, "", "", false)
		in := j.r.instances[si.ID]
		in.moving = make(chan struct{}) // waits for its worker (not yet an orphan)
		in.unconfirmed = true
	}
	j.r.mu.Unlock()
	if len(recs) > 0 {
		grace := clock.NewTimer(j.r.clk, j.r.grace)
		j.r.wg.Add(1)
		go func() {
			defer j.r.wg.Done()
			defer grace.Stop()
			select {
			case <-grace.C:
				j.orphanUnconfirmed("its worker did not come back after the master restarted")
			case <-j.r.ctx.Done():
			}
		}()
	}
	return len(recs), nil
}

// orphanUnconfirmed places again every recovered instance no worker has
// reported.
func (j *journal) orphanUnconfirmed(why string) {
	j.r.mu.Lock()
	n := 0
	gone := map[string]bool{} // their workers that never came back
	for _, in := range j.r.instances {
		if !in.unconfirmed {
			continue
		}
		j.r.Moves.orphanLocked(in)
		n++
		if _, back := j.r.workers[in.Worker]; !back {
			gone[in.Worker] = true
		}
	}
	j.r.mu.Unlock()
	if n > 0 {
		j.r.log.Warn().Int("instances", n).Str("reason", why).Msg("instances placed again from the stored table")
		j.r.Moves.kick()
	}
	// As for a worker declared dead: proxies that outlived the master drop
	// its routes and end the sockets they still hold to it.
	for w := range gone {
		j.r.inval.worker(w)
	}
}

// RecoverInstances loads the stored instance table (a master start, before
// workers can register) and returns how many instances it holds.
func (r *Registry) RecoverInstances() (int, error) { return r.journal.recover() }
