package testutil

import (
	"testing"

	"go.uber.org/goleak"
)

// Main is every package's TestMain: it runs the tests and, when they
// passed, fails the package if goroutines are left over. opts are the
// package's own ignores. A package that sets up shared fixtures passes a
// wrapper whose Run sets them up, runs m and tears them down, so the check
// sees the teardown.
func Main(m goleak.TestingM, opts ...goleak.Option) {
	goleak.VerifyTestMain(m, opts...)
}

// NoLeaks fails t if goroutines are left when t's other cleanups ran: for
// tests whose leaks Main would blame on the package. Call it first, so its
// cleanup runs last.
func NoLeaks(t testing.TB, opts ...goleak.Option) {
	t.Helper()
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) })
}
