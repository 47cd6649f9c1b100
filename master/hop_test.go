package master

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/hop"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/balance"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// TestHopKeyHandedOver: workers (registration) and proxies (subscription)
// receive the same hop key over their RMI session, workers also the metrics
// token; the key is not the cluster secret and is stable across masters on
// the same secret (a restarted master must not invalidate running proxies).
func TestHopKeyHandedOver(t *testing.T) {
	m, err := New(Config{Secret: testSecret, AdminToken: "tok", MetricsToken: "mtok", Apps: testApps,
		Balancer: balance.LeastLoad, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dial := func(name string) *rmi.Conn {
		node, err := rmi.New(rmi.Config{Name: name, Secret: []byte(testSecret)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { node.Close() })
		if err := node.Register(wire.ObjProxy, &recorder{}); err != nil {
			t.Fatal(err)
		}
		c, err := node.Dial(ctx, m.RMIAddr())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	var reg wire.RegisterReply
	info := wire.WorkerInfo{ID: "w-hop", HTTPAddr: "127.0.0.1:1", Gossip: "w-hop.g1"}
	if err := dial("w-hop").Call(ctx, wire.ObjWorkerManager, "Register", &reg, info, []wire.InstanceInfo(nil), rmi.Export(&fakeWorker{apps: map[string]wire.App{}})); err != nil {
		t.Fatal(err)
	}
	var sub wire.SubscribeReply
	if err := dial("proxy-1").Call(ctx, wire.ObjRouter, "Subscribe", &sub, "proxy-1"); err != nil {
		t.Fatal(err)
	}
	if len(reg.HopKey) != hop.KeyLen || !bytes.Equal(reg.HopKey, sub.HopKey) {
		t.Fatalf("worker key %x, proxy key %x: want the same %d bytes", reg.HopKey, sub.HopKey, hop.KeyLen)
	}
	if bytes.Contains([]byte(testSecret), reg.HopKey[:8]) {
		t.Fatal("the hop key is (part of) the cluster secret")
	}
	if reg.MetricsToken != "mtok" {
		t.Fatalf("metrics token %q, want the configured one", reg.MetricsToken)
	}
	m2, err := New(Config{Secret: testSecret, AdminToken: "tok", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if !bytes.Equal(m2.hopKey, reg.HopKey) {
		t.Fatal("another master on the same secret derives another hop key")
	}
}
