package master

import (
	"context"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/secret"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/balance"
	"github.com/cloudbrowser-go/cloudbrowser/master/registry"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// peerProbe is registered on a test master's node: it answers the peer
// the master's Identify hook gave the call and what the gate's checks
// make of it for one instance.
type peerProbe struct{ m *Master }

// peerSeen is a peer and the checks' outcomes (error codes, "" = allowed).
type peerSeen struct {
	Kind, Worker, Name, Role string
	Caller, CallerErr        string
	IsA                      string // Peer.Is("w-a")
	HostedBy, HostedByErr    string
	MayRead                  string
}

func (p peerProbe) Probe(ctx context.Context, iid string) (peerSeen, error) {
	return seen(p.m, registry.PeerFrom(ctx), iid), nil
}

func seen(m *Master, p registry.Peer, iid string) peerSeen {
	s := peerSeen{Kind: p.Kind.String(), Worker: p.Worker, Name: p.Name, Role: p.Role}
	var err error
	s.Caller, err = p.Caller()
	s.CallerErr = code(err)
	s.IsA = code(p.Is("w-a"))
	s.HostedBy, err = m.workers.Gate.HostedBy(iid, p)
	s.HostedByErr = code(err)
	s.MayRead = code(m.workers.Gate.MayRead(iid, p))
	return s
}

// TestPeerHook: the master's RMI node resolves every call's connection to
// its registered peer (registry.Gate.Identify), and the gate's checks
// refuse an unregistered connection, a proxy, a cluster-secret holder and
// the wrong worker, and allow the worker that hosts the instance.
func TestPeerHook(t *testing.T) {
	m := startMaster(t, balance.LeastLoad)
	if err := m.rmi.node.RegisterFor("test.peer", peerProbe{m}, secret.RoleWorker, secret.RoleProxy); err != nil {
		t.Fatal(err)
	}
	a := addWorker(t, m, "w-a")
	b := addWorker(t, m, "w-b")
	p, err := a.place(t, "multi", "alice")
	if err != nil || p.WorkerID != "w-a" {
		t.Fatalf("placement: %+v %v", p, err)
	}
	dial := func(name, role, key string) *rmi.Conn { return dialMaster(t, m, name, role, key) }
	forbidden, unknown := wire.CodeForbidden, wire.CodeUnknownInstance
	refused := func(kind, name, role string) peerSeen {
		return peerSeen{Kind: kind, Name: name, Role: role, CallerErr: forbidden, IsA: forbidden, HostedByErr: unknown, MayRead: forbidden}
	}
	tests := []struct {
		name string
		conn *rmi.Conn // nil: an in-process call, no RMI
		want peerSeen
	}{
		{"unregistered worker connection", dial("w-new", secret.RoleWorker, secret.RoleKey(testSecret, secret.RoleWorker)),
			refused("unregistered", "w-new", secret.RoleWorker)},
		{"cluster secret, no registration", dialAs(t, m, "w-a"), refused("cluster", "w-a", rmi.RoleCluster)},
		{"proxy", dial("proxy-1", secret.RoleProxy, secret.RoleKey(testSecret, secret.RoleProxy)),
			refused("proxy", "proxy-1", secret.RoleProxy)},
		{"in process", nil, refused("none", "", "")},
		{"the wrong worker", b.conn, peerSeen{Kind: "worker", Worker: "w-b", Name: "w-b", Role: rmi.RoleCluster,
			Caller: "w-b", IsA: forbidden, HostedByErr: unknown, MayRead: forbidden}},
		{"the right worker", a.conn, peerSeen{Kind: "worker", Worker: "w-a", Name: "w-a", Role: rmi.RoleCluster,
			Caller: "w-a", HostedBy: "w-a"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var got peerSeen
			if tc.conn == nil {
				got = seen(m, registry.PeerFrom(ctx), p.InstanceID)
			} else if err := tc.conn.Call(ctx, "test.peer", "Probe", &got, p.InstanceID); err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
