package testutil

import (
	"testing"

	"github.com/cloudbrowser-go/cloudbrowser/internal/reserve"
)

// RefusedAddr returns a loopback address where connections are refused,
// for as long as the test runs: a socket bound there, never listening,
// holds the port (internal/reserve). A port that was free a moment ago may
// be taken by anything by the time the test dials it.
func RefusedAddr(t testing.TB) string {
	t.Helper()
	p, err := reserve.Bind("127.0.0.1:0")
	if err != nil {
		t.Fatalf("RefusedAddr: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p.Addr()
}
