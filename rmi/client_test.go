package rmi_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

func TestClientReconnect(t *testing.T) {
	testutil.NoLeaks(t)
	ctx := testCtx(t)

	srv1, _ := newNode(t, "master")
	m1 := newMasterAPI()
	if err := srv1.Register("master", m1); err != nil {
		t.Fatal(err)
	}
	addr := serve(t, srv1, "")

	worker, _ := newNode(t, "w-1")
	am := &appManager{}
	var connects atomic.Int32
	cl := worker.NewClient(addr, func(ctx context.Context, c *rmi.Conn) error {
		connects.Add(1)
		// What a worker does on every (re)connect: register with the master.
		return c.Call(ctx, "master", "Register", nil, WorkerInfo{ID: "w-1"}, rmi.Export(am))
	})
	t.Cleanup(func() { _ = cl.Close() })

	c1, err := cl.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	recv(t, m1.registered)
	var sum int
	if err := cl.Call(ctx, "master", "Add", &sum, 1, 2); err != nil || sum != 3 {
		t.Fatalf("Add = %d, %v", sum, err)
	}

	// Kill the server (listener and connections), then restart on the same
	// address with a fresh node.
	if err := srv1.Close(); err != nil {
		t.Fatal(err)
	}
	recv(t, c1.Done())
	srv2, _ := newNode(t, "master")
	m2 := newMasterAPI()
	if err := srv2.Register("master", m2); err != nil {
		t.Fatal(err)
	}
	serve(t, srv2, addr)

	select {
	case <-m2.registered:
	case <-ctx.Done():
		t.Fatal("worker did not re-register")
	}
	if err := cl.Call(ctx, "master", "Add", &sum, 2, 2); err != nil || sum != 4 {
		t.Fatalf("Add after reconnect = %d, %v", sum, err)
	}
	if got := connects.Load(); got != 2 {
		t.Errorf("onConnect ran %d times, want 2", got)
	}
	// The new master can call the worker back through the new reference.
	var got string
	if err := m2.worker("w-1").Call(ctx, "Launch", &got, "docs"); err != nil || got != "docs@w-1" {
		t.Fatalf("Launch = %q, %v", got, err)
	}
	// The old master's reference died with the old connection.
	if err := m1.worker("w-1").Call(ctx, "Launch", nil, "x"); !errors.Is(err, rmi.ErrClosed) {
		t.Errorf("stale ref: %v", err)
	}

	if err := cl.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Conn(ctx); !errors.Is(err, rmi.ErrClosed) {
		t.Errorf("Conn after Close: %v", err)
	}
}

func TestClientOnConnectRetry(t *testing.T) {
	testutil.NoLeaks(t)
	ctx := testCtx(t)
	srv, _ := newNode(t, "master")
	if err := srv.Register("master", newMasterAPI()); err != nil {
		t.Fatal(err)
	}
	addr := serve(t, srv, "")
	worker, _ := newNode(t, "w-1")
	var tries atomic.Int32
	cl := worker.NewClient(addr, func(ctx context.Context, c *rmi.Conn) error {
		if tries.Add(1) == 1 {
			return errors.New("not ready yet")
		}
		return nil
	})
	t.Cleanup(func() { _ = cl.Close() })
	c, err := cl.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tries.Load() != 2 {
		t.Errorf("onConnect tries = %d, want 2", tries.Load())
	}
	var who string
	if err := c.Call(ctx, "master", "WhoAmI", &who); err != nil || who != "w-1" {
		t.Fatalf("WhoAmI = %q, %v", who, err)
	}
	testutil.Eventually(t, 10*time.Second, testutil.Cond("rejected conn dropped", func() bool { return len(srv.Conns()) == 1 }))
}

func TestClientUnreachable(t *testing.T) {
	testutil.NoLeaks(t)
	addr := testutil.RefusedAddr(t) // nothing listens

	worker, _ := newNode(t, "w-1")
	cl := worker.NewClient(addr, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := cl.Conn(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Conn = %v, want DeadlineExceeded", err)
	}
	// Node.Close stops the client too.
	if err := worker.Close(); err != nil {
		t.Fatal(err)
	}
	if err := cl.Call(testCtx(t), "master", "Add", nil, 1, 2); !errors.Is(err, rmi.ErrClosed) {
		t.Errorf("Call after node Close = %v", err)
	}
	_ = cl.Close()
	// A client made on a closed node is closed from the start.
	if _, err := worker.NewClient(addr, nil).Conn(testCtx(t)); !errors.Is(err, rmi.ErrClosed) {
		t.Errorf("client of closed node: %v", err)
	}
}

// TestClientRedialsForWaiters: after many failed dials the back-off is
// long (up to 5 s), but a caller waiting for a connection makes the client
// redial at once (at most every 100 ms), so a server that came back is
// found by the next request, not seconds later.
func TestClientRedialsForWaiters(t *testing.T) {
	testutil.NoLeaks(t)
	srv, _ := newNode(t, "master")
	if err := srv.Register("master", newMasterAPI()); err != nil {
		t.Fatal(err)
	}
	addr := serve(t, srv, "")
	worker, _ := newNode(t, "w-1")
	var tries atomic.Int32
	var up atomic.Bool
	cl := worker.NewClient(addr, func(ctx context.Context, c *rmi.Conn) error {
		tries.Add(1)
		if !up.Load() {
			return errors.New("not ready yet")
		}
		return nil
	})
	t.Cleanup(func() { _ = cl.Close() })
	// Let the back-off grow to its cap: 0.1+0.2+0.4+0.8+1.6+3.2 s at most.
	testutil.Eventually(t, 10*time.Second, testutil.Cond("seven failed dials", func() bool { return tries.Load() >= 7 }))
	up.Store(true)
	// The next dial would be 2.5–5 s away; a waiter must not wait for it.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := cl.Conn(ctx); err != nil {
		t.Fatalf("Conn with the server back: %v (the waiter waited out the back-off)", err)
	}
}
