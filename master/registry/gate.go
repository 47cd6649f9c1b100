package registry

import (
	"fmt"
	"sync"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// Gate checks what a worker's call may touch: which worker a connection
// speaks for, which instances it hosts or may read, under which epoch.
type Gate struct {
	r *Registry
	// enrolMu orders enrolments; enrolled caches the ids known to have
	// registered.
	enrolMu  sync.Mutex
	enrolled map[string]bool
	// targets are placements in flight: instance id -> the worker asked to
	// create it (MayRead). Guarded by the registry's lock.
	targets map[string]string
}

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

// Enrol admits a registration of worker id. proven: the connection proved
// the id's own key or the cluster secret, which may register any id. A
// connection with only the shared worker key may register an id nobody
// registered before; fresh is then true and the reply carries the id's
// key.
func (g *Gate) Enrol(id string, proven bool) (fresh bool, err error) {
	g.enrolMu.Lock()
	defer g.enrolMu.Unlock()
	known := g.enrolled[id]
	if !known && g.r.state != nil {
		var rec enrolRecord
		found, err := g.r.state.Get(enrolBucket, id, &rec)
		if err != nil {
			return false, fmt.Errorf("register: worker ids: %w", err)
		}
		known = found
	}
	g.r.mu.Lock()
	_, live := g.r.workers[id] // registered in this run, connected or not
	g.r.mu.Unlock()
	if !proven && (known || live) {
		return false, wire.Errorf(wire.CodeForbidden, "register: worker id %q is enrolled already: a worker proves its id with that id's own key "+
			"(on the master's host: cloudbrowser worker-key --id %s), not with the shared worker key", id, id)
	}
	if !known {
		if g.r.state != nil {
			if err := g.r.state.Put(enrolBucket, id, enrolRecord{First: time.Now().UTC()}); err != nil {
				return false, fmt.Errorf("register: enrol worker id %s: %w", id, err)
			}
		}
		g.enrolled[id] = true
	}
	return !proven, nil
}

// Caller is the worker registered on connection c: who a worker's call
// speaks for, whatever its arguments say.
func (g *Gate) Caller(c *rmi.Conn) (string, error) {
	g.r.mu.Lock()
	defer g.r.mu.Unlock()
	if id := g.callerLocked(c); id != "" {
		return id, nil
	}
	return "", wire.Errorf(wire.CodeForbidden, "no worker is registered on this connection (peer %q): register first", peerName(c))
}

// callerLocked is the worker registered on c ("" = none).
func (g *Gate) callerLocked(c *rmi.Conn) string {
	if c == nil {
		return ""
	}
	for id, w := range g.r.workers {
		if w.conn == c {
			return id
		}
	}
	return ""
}

// connIsLocked reports whether c is worker id's current connection.
func (g *Gate) connIsLocked(id string, c *rmi.Conn) bool {
	w, ok := g.r.workers[id]
	return ok && c != nil && w.conn == c
}

// CallerIs refuses a call whose arguments name worker id when it was not
// made over id's connection.
func (g *Gate) CallerIs(c *rmi.Conn, id string) error {
	g.r.mu.Lock()
	defer g.r.mu.Unlock()
	if !g.connIsLocked(id, c) {
		return wire.Errorf(wire.CodeForbidden, "the call names worker %q, but the connection (peer %q) is not its registration", id, peerName(c))
	}
	return nil
}

// HostedBy refuses a write to an instance that the calling connection's
// worker does not host according to the instance table.
// It answers the hosting worker's id.
func (g *Gate) HostedBy(iid string, c *rmi.Conn) (string, error) {
	g.r.mu.Lock()
	defer g.r.mu.Unlock()
	in, ok := g.r.instances[iid]
	if !ok {
		return "", wire.Err(wire.CodeUnknownInstance, "instance "+iid+" is not in the master's table")
	}
	if !g.connIsLocked(in.Worker, c) {
		return "", wire.Err(wire.CodeUnknownInstance, "instance "+iid+" is hosted by "+in.Worker+", not by the caller")
	}
	return in.Worker, nil
}

// MayRead refuses a read of instance iid's stored state (its shared state
// and its browsers' cookies and storage) unless the calling connection's
// worker hosts it, or is the one the master is asking to create it (a
// placement, a failover or a migration in flight: the new host reads what
// it restores before the table names it).
func (g *Gate) MayRead(iid string, c *rmi.Conn) error {
	g.r.mu.Lock()
	defer g.r.mu.Unlock()
	wid := g.callerLocked(c)
	if wid == "" {
		return wire.Errorf(wire.CodeForbidden, "no worker is registered on this connection (peer %q): register first", peerName(c))
	}
	if in, ok := g.r.instances[iid]; ok && in.Worker == wid {
		return nil
	}
	if g.targets[iid] == wid {
		return nil
	}
	return wire.Errorf(wire.CodeForbidden, "instance %s is not hosted by worker %s: its state is its host's only", iid, wid)
}

// aim records that worker wid is being asked to create instance iid (so it
// may read its stored state); the returned func ends that.
func (g *Gate) aim(iid, wid string) (done func()) {
	g.r.mu.Lock()
	g.targets[iid] = wid
	g.r.mu.Unlock()
	return func() {
		g.r.mu.Lock()
		if g.targets[iid] == wid {
			delete(g.targets, iid)
		}
		g.r.mu.Unlock()
	}
}

// peerName is c's authenticated peer name, for messages ("" = no
// connection: an in-process call).
func peerName(c *rmi.Conn) string {
	if c == nil {
		return ""
	}
	return c.PeerName()
}
