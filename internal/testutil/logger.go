package testutil

import (
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
)

// Logger returns a debug-level logger writing into t's log, shown with -v
// or when the test fails.
func Logger(t testing.TB) zerolog.Logger {
	return zerolog.New(zerolog.ConsoleWriter{Out: LogWriter(t), NoColor: true, TimeFormat: "15:04:05.000"}).
		Level(zerolog.DebugLevel).With().Timestamp().Logger()
}

// LogWriter writes each Write as a line of t's log: for tests that also
// keep the raw log lines (io.MultiWriter with a SyncBuffer). Writes after
// the test ended (by goroutines that outlive it) are dropped: t.Log would
// panic.
func LogWriter(t testing.TB) io.Writer {
	w := &testWriter{t: t}
	t.Cleanup(w.end)
	return w
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
