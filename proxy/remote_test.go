package proxy

import (
	"context"
	"errors"
	"testing"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

func TestMasterError(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"unknown app", wire.Errorf(wire.CodeUnknownApp, "x"), ErrUnknownApp},
		{"unknown instance over rmi", &rmi.RemoteError{Code: wire.CodeUnknownInstance, Message: "x"}, ErrUnknownInstance},
		{"instance lost", &rmi.RemoteError{Code: wire.CodeInstanceLost}, ErrInstanceLost},
		{"no workers", wire.Errorf(wire.CodeNoWorkers, "x"), ErrNoWorkers},
		{"unknown worker", wire.Errorf(wire.CodeUnknownWorker, "x"), ErrWorkerGone},
		{"connection closed", rmi.ErrClosed, ErrMasterUnavailable},
		{"deadline", context.DeadlineExceeded, ErrMasterUnavailable},
		{"local coded error without a known code", wire.Errorf("weird", "x"), ErrMasterUnavailable},
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
