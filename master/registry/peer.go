package registry

import (
	"context"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// PeerKind is what a connection to the master speaks for.
type PeerKind int

const (
	// PeerNone is no connection: not an RMI call. It is trusted with
	// nothing a peer kind grants.
	PeerNone PeerKind = iota
	// PeerUnregistered is a connection no worker is registered on and that
	// is neither a proxy's nor a cluster-secret holder's: a worker before
	// its registration, or after another connection replaced it.
	PeerUnregistered
	// PeerWorker is the connection a worker is registered on (Peer.Worker).
	PeerWorker
	// PeerProxy is a proxy's connection (role proxy; Peer.Name is its name).
	PeerProxy
	// PeerCluster is a holder of the cluster secret declaring no narrower
	// role and registered as no worker: the CLI, tools, tests.
	PeerCluster
)

func (k PeerKind) String() string {
	switch k {
	case PeerUnregistered:
		return "unregistered"
	case PeerWorker:
		return "worker"
	case PeerProxy:
		return "proxy"
	case PeerCluster:
		return "cluster"
	}
	return "none"
}

// Peer is who an RMI call to the master comes from, resolved from its
// connection by Gate.Identify before the method runs (the master's RMI
// node installs it as its Config.Identify); methods read it with PeerFrom.
type Peer struct {
	Kind PeerKind
	// Worker is the id of the worker registered on the connection
	// (PeerWorker only).
	Worker string
	// Name is the name the peer authenticated with in the handshake: a
	// worker's id (proven only if NameProven or ClusterSecret), a proxy's
	// name.
	Name string
	// Role is the role the peer proved (rmi.Conn.Role).
	Role string
	// NameProven: the peer proved the key bound to Name; ClusterSecret: it
	// proved the cluster secret, which may claim any name.
	NameProven, ClusterSecret bool
	// Conn is the call's connection (nil for PeerNone): for its lifetime
	// and calling the peer back; who the peer is, is Kind and Worker.
	Conn *rmi.Conn
}

// PeerFrom is the peer of the RMI call of ctx (PeerNone: not a call).
func PeerFrom(ctx context.Context) Peer {
	p, _ := rmi.PeerFrom[Peer](ctx)
	return p
}

// Caller is the worker a call speaks for, whatever its arguments say: the
// one registered on its connection.
func (p Peer) Caller() (string, error) {
	if p.Kind != PeerWorker {
		return "", wire.Errorf(wire.CodeForbidden, "no worker is registered on this connection (peer %q): register first", p.Name)
	}
	return p.Worker, nil
}

// Is refuses a call whose arguments name worker id when it was not made
// over id's connection.
func (p Peer) Is(id string) error {
	if p.Kind != PeerWorker || p.Worker != id {
		return wire.Errorf(wire.CodeForbidden, "the call names worker %q, but the connection (peer %q) is not its registration", id, p.Name)
	}
	return nil
}
