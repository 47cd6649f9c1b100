package master

import (
	"context"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/balance"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// TestCallerIdentity: a worker's calls speak for the worker registered on
// their connection. Registering under another name than the connection's
// peer name, calling before registering, and naming another worker in an
// argument are refused (forbidden); the normal path works without any id.
func TestCallerIdentity(t *testing.T) {
	m := startMaster(t, balance.LeastLoad)
	a := addWorker(t, m, "w-a")
	b := addWorker(t, m, "w-b")
	p, err := a.place(t, "multi", "alice")
	if err != nil || p.WorkerID != "w-a" {
		// least load with equal loads: the first registered
		t.Fatalf("placement: %+v %v", p, err)
	}
	stranger := dialAs(t, m, "w-stranger")
	wm := func(c *rmi.Conn) contract.WorkerManagerClient { return contract.WorkerManagerClient{C: c} }
	jq := func(c *rmi.Conn) contract.JobQueueClient { return contract.JobQueueClient{C: c} }
	tests := []struct {
		name string
		call func(ctx context.Context) error
		want string
	}{
		{"register as another worker than the peer name", func(ctx context.Context) error {
			_, err := wm(stranger).Register(ctx, wire.WorkerInfo{ID: "w-c", HTTPAddr: "127.0.0.1:1"}, nil, rmi.Export(&fakeWorker{}))
			return err
		}, wire.CodeForbidden},
		{"a registered worker registers as another", func(ctx context.Context) error {
			_, err := wm(b.conn).Register(ctx, wire.WorkerInfo{ID: "w-a", HTTPAddr: "127.0.0.1:2"}, nil, rmi.Export(&fakeWorker{}))
			return err
		}, wire.CodeForbidden},
		{"place naming another worker", func(ctx context.Context) error {
			_, err := wm(b.conn).Place(ctx, wire.PlaceRequest{App: "multi", User: "bob", From: "w-a"})
			return err
		}, wire.CodeForbidden},
		{"close another worker's instance", func(ctx context.Context) error {
			return wm(b.conn).InstanceClosed(ctx, wire.ClosedInstance{ID: p.InstanceID, Epoch: a.epoch(p.InstanceID)})
		}, wire.CodeUnknownInstance},
		{"report unregistered", func(ctx context.Context) error { return wm(stranger).Report(ctx, wire.Load{Total: 1}) }, wire.CodeForbidden},
		{"leave unregistered", func(ctx context.Context) error { _, err := wm(stranger).Leave(ctx); return err }, wire.CodeForbidden},
		{"close unregistered", func(ctx context.Context) error {
			return wm(stranger).InstanceClosed(ctx, wire.ClosedInstance{ID: p.InstanceID})
		}, wire.CodeForbidden},
		{"rename unregistered", func(ctx context.Context) error { return wm(stranger).InstanceRenamed(ctx, p.InstanceID, "x") }, wire.CodeForbidden},
		{"share unregistered", func(ctx context.Context) error {
			return wm(stranger).InstanceShared(ctx, wire.InstanceShare{Instance: p.InstanceID, Principal: "eve", Role: "reader"})
		}, wire.CodeForbidden},
		{"job report unregistered", func(ctx context.Context) error {
			return jq(stranger).Working(ctx, wire.JobProgress{ID: "j", Attempt: 1})
		}, wire.CodeForbidden},
		{"job gate unregistered", func(ctx context.Context) error {
			_, err := jq(stranger).Ready(ctx, wire.JobProgress{ID: "j", Attempt: 1})
			return err
		}, wire.CodeForbidden},
		{"job done unregistered", func(ctx context.Context) error { return jq(stranger).Done(ctx, wire.JobOutcome{ID: "j", Attempt: 1}) }, wire.CodeForbidden},

		{"report", func(ctx context.Context) error { return wm(a.conn).Report(ctx, wire.Load{Total: 12345}) }, ""},
		{"place naming itself", func(ctx context.Context) error {
			_, err := wm(a.conn).Place(ctx, wire.PlaceRequest{App: "hello", User: "bob", From: "w-a"})
			return err
		}, ""},
		{"rename its instance", func(ctx context.Context) error { return wm(a.conn).InstanceRenamed(ctx, p.InstanceID, "board") }, ""},
		{"close its instance under another epoch", func(ctx context.Context) error {
			return wm(a.conn).InstanceClosed(ctx, wire.ClosedInstance{ID: p.InstanceID, Epoch: a.epoch(p.InstanceID) + 1})
		}, wire.CodeInstanceLost},
		{"close its instance", func(ctx context.Context) error {
			return wm(a.conn).InstanceClosed(ctx, wire.ClosedInstance{ID: p.InstanceID, Epoch: a.epoch(p.InstanceID)})
		}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tc.call(ctx); code(err) != tc.want {
				t.Fatalf("got %v, want code %q", err, tc.want)
			}
		})
	}
	// The refused registrations changed nothing: w-a is still w-a's.
	workers := map[string]wire.WorkerStatus{}
	for _, w := range m.Status().Workers {
		workers[w.ID] = w
	}
	if _, ok := workers["w-c"]; ok || len(workers) != 2 {
		t.Fatalf("workers after refused registrations: %+v", workers)
	}
	if w := workers["w-a"]; w.HTTPAddr != "127.0.0.1:1" || w.State != "connected" || w.Load.Total != 12345 {
		t.Fatalf("w-a after a refused take-over: %+v", w)
	}
	if w := workers["w-b"]; w.State != "connected" || w.Load.Total == 12345 {
		t.Fatalf("w-b: %+v", w)
	}
	if _, err := wm(a.conn).Leave(context.Background()); err != nil {
		t.Fatalf("leave: %v", err)
	}
}
