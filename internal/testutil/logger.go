package testutil

import (
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
)

// Logger returns a debug-level logger writing into t's log, shown with -v
// or when the test fails. Lines logged after the test ended (by goroutines
// that outlive it) are dropped: t.Log would panic.
func Logger(t testing.TB) zerolog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(w.end)
	return zerolog.New(zerolog.ConsoleWriter{Out: w, NoColor: true, TimeFormat: "15:04:05.000"}).
		Level(zerolog.DebugLevel).With().Timestamp().Logger()
}

type testWriter struct {
	t     testing.TB
	mu    sync.Mutex
	ended bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.ended {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// end runs as a cleanup, so before the test counts as finished.
func (w *testWriter) end() {
	w.mu.Lock()
	w.ended = true
	w.mu.Unlock()
}
