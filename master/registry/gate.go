package registry

import (
	"fmt"
	"sync"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/secret"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// Gate checks what a worker's call may touch: which worker a connection
// speaks for (Identify), which instances it hosts or may read, under which
// epoch.
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

// Identify resolves connection c to the peer its calls come from: the
// worker registered on it, a proxy, a holder of the cluster secret, or a
// connection nothing is registered on yet. The master's RMI node runs it
// before every call (rmi.Config.Identify), so methods read who calls with
// PeerFrom instead of looking the connection up.
func (g *Gate) Identify(c *rmi.Conn) Peer {
	if c == nil {
		return Peer{}
	}
	p := Peer{Kind: PeerUnregistered, Name: c.PeerName(), Role: c.Role(), NameProven: c.NameProven(),
		ClusterSecret: c.ClusterSecret(), Conn: c}
	if p.Role == secret.RoleProxy {
		// A proxy cannot register a worker (its role may not call the
		// Worker Manager): its calls, routes among them, skip the lookup.
		p.Kind = PeerProxy
		return p
	}
	g.r.mu.Lock()
	p.Worker = g.callerLocked(c)
	g.r.mu.Unlock()
	switch {
	case p.Worker != "":
		p.Kind = PeerWorker
	case p.Role == rmi.RoleCluster:
		p.Kind = PeerCluster
	}
	return p
}

// callerLocked is the worker registered on c ("" = none). A worker
// registers under its connection's peer name (the master's Register
// refuses any other id), so one lookup finds it: Identify runs on every
// call and must not scan the table.
func (g *Gate) callerLocked(c *rmi.Conn) string {
	if c == nil {
		return ""
	}
	id := c.PeerName()
	if w, ok := g.r.workers[id]; ok && w.conn == c {
		return id
	}
	return ""
}

// connIsLocked reports whether c is worker id's current connection.
func (g *Gate) connIsLocked(id string, c *rmi.Conn) bool {
	w, ok := g.r.workers[id]
	return ok && c != nil && w.conn == c
}

// currentLocked reports whether p is a worker whose registration is still
// p's connection: checks that read the instance table under the lock hold
// the registration to the same moment.
func (g *Gate) currentLocked(p Peer) bool {
	return p.Kind == PeerWorker && g.connIsLocked(p.Worker, p.Conn)
}

// HostedBy refuses a write to an instance that the calling worker (p)
// does not host according to the instance table.
// It answers the hosting worker's id.
func (g *Gate) HostedBy(iid string, p Peer) (string, error) {
	g.r.mu.Lock()
	defer g.r.mu.Unlock()
	in, ok := g.r.instances[iid]
	if !ok {
		return "", wire.Err(wire.CodeUnknownInstance, "instance "+iid+" is not in the master's table")
	}
	if !g.currentLocked(p) || in.Worker != p.Worker {
		return "", wire.Err(wire.CodeUnknownInstance, "instance "+iid+" is hosted by "+in.Worker+", not by the caller")
	}
	return in.Worker, nil
}

// MayRead refuses a read of instance iid's stored state (its shared state
// and its browsers' cookies and storage) unless the calling worker (p)
// hosts it, or is the one the master is asking to create it (a placement,
// a failover or a migration in flight: the new host reads what it
// restores before the table names it).
func (g *Gate) MayRead(iid string, p Peer) error {
	g.r.mu.Lock()
	defer g.r.mu.Unlock()
	if !g.currentLocked(p) {
		return wire.Errorf(wire.CodeForbidden, "no worker is registered on this connection (peer %q): register first", p.Name)
	}
	wid := p.Worker
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
