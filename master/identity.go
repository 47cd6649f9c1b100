package master

import (
	"fmt"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// Worker identity. The shared worker key (worker.key) proves only that its
// holder may be a worker; a worker id is proven by that id's own key
// (secret.WorkerKey, checked in the RMI handshake: Conn.NameProven). The
// shared key may register an id once, the first time the cluster sees it
// (enrolment); the reply hands the worker its id's key, which it proves
// from its next connection on. So a worker-key holder cannot register as
// an existing worker, live or dead, to take over its connection, its
// instances or their stored state (docs/architecture.md, "Worker
// identity").

// enrolBucket records every worker id that ever registered.
const enrolBucket = "worker-ids"

type enrolRecord struct {
	First time.Time `json:"first"`
}

// enrol admits a registration of worker id. proven: the connection proved
// the id's own key or the cluster secret, which may register any id. A
// connection with only the shared worker key may register an id nobody
// registered before; fresh is then true and the reply carries the id's
// key.
func (m *WorkerManager) enrol(id string, proven bool) (fresh bool, err error) {
	m.enrolMu.Lock()
	defer m.enrolMu.Unlock()
	known := m.enrolled[id]
	if !known && m.state != nil {
		var rec enrolRecord
		found, err := m.state.Get(enrolBucket, id, &rec)
		if err != nil {
			return false, fmt.Errorf("register: worker ids: %w", err)
		}
		known = found
	}
	m.mu.Lock()
	_, live := m.workers[id] // registered in this run, connected or not
	m.mu.Unlock()
	if !proven && (known || live) {
		return false, wire.Errorf(wire.CodeForbidden, "register: worker id %q is enrolled already: a worker proves its id with that id's own key "+
			"(on the master's host: cloudbrowser worker-key --id %s), not with the shared worker key", id, id)
	}
	if !known {
		if m.state != nil {
			if err := m.state.Put(enrolBucket, id, enrolRecord{First: time.Now().UTC()}); err != nil {
				return false, fmt.Errorf("register: enrol worker id %s: %w", id, err)
			}
		}
		m.enrolled[id] = true
	}
	return !proven, nil
}
