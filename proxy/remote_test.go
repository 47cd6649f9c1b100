package proxy

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/urlkind"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

func TestMasterError(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"unknown app", wire.Err(wire.CodeUnknownApp, "x"), ErrUnknownApp},
		{"unknown instance over rmi", &rmi.RemoteError{Code: wire.CodeUnknownInstance, Message: "x"}, ErrUnknownInstance},
		{"instance lost", &rmi.RemoteError{Code: wire.CodeInstanceLost}, ErrInstanceLost},
		{"no workers", wire.Err(wire.CodeNoWorkers, "x"), ErrNoWorkers},
		{"starting", wire.Err(wire.CodeStarting, "x"), ErrStarting},
		{"unknown worker", wire.Err(wire.CodeUnknownWorker, "x"), ErrWorkerGone},
		{"connection closed", rmi.ErrClosed, ErrMasterUnavailable},
		{"deadline", context.DeadlineExceeded, ErrMasterUnavailable},
		{"local coded error without a known code", wire.Err("weird", "x"), ErrMasterUnavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := MasterError(tc.err)
			if !errors.Is(got, tc.want) {
				t.Fatalf("MasterError(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
	// A remote error with an unknown code stays itself (a 502 "routing
	// failed" page), not "master unavailable".
	re := &rmi.RemoteError{Code: "rmi.panic", Message: "boom"}
	if got := MasterError(re); errors.Is(got, ErrMasterUnavailable) || !errors.As(got, &re) {
		t.Fatalf("MasterError(panic) = %v", got)
	}
}

// TestRemoteRouterFailsFastWithoutMaster: with no master connection, a
// question waits ConnectWait, not the caller's whole deadline, so users
// get the "unavailable" page at once during an outage.
func TestRemoteRouterFailsFastWithoutMaster(t *testing.T) {
	node, err := rmi.New(rmi.Config{Name: "p", Secret: []byte("0123456789abcdef0123456789abcdef")})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	addr := testutil.RefusedAddr(t) // nobody answers there
	r := &RemoteRouter{Client: node.NewClient(addr, nil)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := r.Route(ctx, urlkind.Target{Kind: urlkind.KindApp, App: "hello"}); !errors.Is(err, ErrMasterUnavailable) {
		t.Fatalf("Route = %v, want ErrMasterUnavailable", err)
	}
	if _, err := r.Apps(ctx); !errors.Is(err, ErrMasterUnavailable) {
		t.Fatalf("Apps = %v, want ErrMasterUnavailable", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the router waited for the caller's whole deadline")
	}
}
