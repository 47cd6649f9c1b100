package master

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

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
// before it is answered (syncInstances). A restarted master loads the
// records (recoverInstances): each instance waits for its worker to
// register and report it; one its worker does not report, or whose worker
// does not come back within the grace period, is placed again under its id
// with its state (failover.go). Until then its URLs answer "moving" and its
// strategy key is held, so no user gets a second instance.

// instanceBucket holds the instance table: id -> wire.InstanceInfo (JSON;
// quota holds are counted again when it is loaded, as for an adopted one).
const instanceBucket = "instances"

// journal is the table's write-behind to the store.
type journal struct {
	kick    chan struct{}
	dirty   map[string]struct{}
	marked  uint64 // generations of changes marked
	written uint64 // generations the store has
	wrote   chan struct{}
}

func newJournal() *journal {
	return &journal{kick: make(chan struct{}, 1), dirty: map[string]struct{}{}, wrote: make(chan struct{})}
}

// markLocked notes that iid's record changed (m.mu held).
func (m *WorkerManager) markLocked(iid string) {
	if m.state == nil {
		return
	}
	j := m.journal
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

// syncInstances waits until every change marked so far is in the store.
func (m *WorkerManager) syncInstances(ctx context.Context) error {
	if m.state == nil {
		return nil
	}
	m.mu.Lock()
	want := m.journal.marked
	for m.journal.written < want {
		wrote := m.journal.wrote
		m.mu.Unlock()
		select {
		case <-wrote:
		case <-ctx.Done():
			return fmt.Errorf("instance table not stored: %w", ctx.Err())
		case <-m.ctx.Done():
			return fmt.Errorf("instance table not stored: %w", m.ctx.Err())
		}
		m.mu.Lock()
	}
	m.mu.Unlock()
	return nil
}

// runJournal writes marked records until the manager closes, then once
// more so a clean stop loses nothing.
func (m *WorkerManager) runJournal() {
	for {
		select {
		case <-m.journal.kick:
			m.writeJournal()
		case <-m.ctx.Done():
			m.writeJournal()
			return
		}
	}
}

// writeJournal writes the current record of every dirty instance in one
// transaction (a failed write is retried with the next change or a second
// later: the dirty set is kept).
func (m *WorkerManager) writeJournal() {
	m.mu.Lock()
	j := m.journal
	if len(j.dirty) == 0 {
		m.mu.Unlock()
		return
	}
	gen := j.marked
	recs := make(map[string][]byte, len(j.dirty))
	for iid := range j.dirty {
		in, ok := m.instances[iid]
		if !ok {
			recs[iid] = nil
			continue
		}
		raw, err := json.Marshal(in.InstanceInfo)
		if err != nil {
			m.log.Error().Err(err).Str("instance", iid).Msg("instance record not encodable")
			continue
		}
		recs[iid] = raw
	}
	j.dirty = map[string]struct{}{}
	m.mu.Unlock()
	err := m.state.Update(func(tx state.Tx) error {
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
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.log.Error().Err(err).Int("instances", len(recs)).Msg("instance table not stored; retrying")
		for iid := range recs {
			j.dirty[iid] = struct{}{}
		}
		if m.ctx.Err() == nil {
			time.AfterFunc(time.Second, j.poke)
		}
		return
	}
	if gen > j.written {
		j.written = gen
	}
	close(j.wrote)
	j.wrote = make(chan struct{})
}

// recoverInstances loads the stored table (a master start, before workers
// can register). Each instance waits, as moving, for its worker to report
// it; after grace the ones still unreported are placed again.
func (m *WorkerManager) recoverInstances() (int, error) {
	if m.state == nil {
		return 0, nil
	}
	var recs []wire.InstanceInfo
	var decodeErr error
	m.state.Scan(instanceBucket, "", func(k string, raw []byte) bool {
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
	m.mu.Lock()
	for _, si := range recs {
		if _, ok := m.instances[si.ID]; ok {
			continue
		}
		m.addInstanceLocked(si, "", "", false)
		in := m.instances[si.ID]
		in.moving = make(chan struct{}) // waits for its worker (not yet an orphan)
		in.unconfirmed = true
	}
	m.mu.Unlock()
	if len(recs) > 0 {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			select {
			case <-time.After(m.grace):
				m.orphanUnconfirmed("its worker did not come back after the master restarted")
			case <-m.ctx.Done():
			}
		}()
	}
	return len(recs), nil
}

// orphanUnconfirmed places again every recovered instance no worker has
// reported.
func (m *WorkerManager) orphanUnconfirmed(why string) {
	m.mu.Lock()
	n := 0
	gone := map[string]bool{} // their workers that never came back
	for _, in := range m.instances {
		if !in.unconfirmed {
			continue
		}
		m.orphanLocked(in)
		n++
		if _, back := m.workers[in.Worker]; !back {
			gone[in.Worker] = true
		}
	}
	m.mu.Unlock()
	if n > 0 {
		m.log.Warn().Int("instances", n).Str("reason", why).Msg("instances placed again from the stored table")
		m.kickMoves()
	}
	// As for a worker declared dead: proxies that outlived the master drop
	// its routes and end the sockets they still hold to it.
	for w := range gone {
		if m.proxies != nil {
			_ = m.proxies.InvalidateWorker(context.Background(), w)
		}
	}
}
