package testutil

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestMain(m *testing.M) { Main(m) }

func TestScale(t *testing.T) {
	tests := []struct {
		ci, scale string
		want      time.Duration
	}{
		{"", "", time.Second},
		{"false", "", time.Second},
		{"0", "", time.Second},
		{"no", "", time.Second},
		{"true", "", 3 * time.Second},
		{"1", "", 3 * time.Second},
		{"YES", "", 3 * time.Second},
		{"", "2.5", 2500 * time.Millisecond},
		{"true", "0.5", 500 * time.Millisecond},
		{"true", "junk", 3 * time.Second},
		{"", "-1", time.Second},
	}
	for _, tt := range tests {
		t.Setenv("CI", tt.ci)
		t.Setenv("CB_TEST_TIME_SCALE", tt.scale)
		if got := Scale(time.Second); got != tt.want {
			t.Errorf("CI=%q CB_TEST_TIME_SCALE=%q: Scale(1s) = %v, want %v", tt.ci, tt.scale, got, tt.want)
		}
	}
}

func TestChromiumRequired(t *testing.T) {
	tests := []struct {
		ci, require string
		want        bool
	}{
		{"", "", false},
		{"true", "", true},
		{"false", "", false},
		{"", "1", true},
		{"false", "1", true},
	}
	for _, tt := range tests {
		t.Setenv("CI", tt.ci)
		t.Setenv("CB_REQUIRE_CHROMIUM", tt.require)
		if got := ChromiumRequired(); got != tt.want {
			t.Errorf("CI=%q CB_REQUIRE_CHROMIUM=%q: ChromiumRequired() = %v, want %v", tt.ci, tt.require, got, tt.want)
		}
	}
}

// recorder is a testing.TB that records a failure instead of ending the
// goroutine, so Eventually's failure can be checked.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
}

func TestEventuallyPolls(t *testing.T) {
	n := 0
	r := &recorder{TB: t}
	Eventually(r, time.Minute, func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if r.failed != "" || n != 3 {
		t.Fatalf("failed %q after %d calls", r.failed, n)
	}
}

func TestEventuallyFailsWithLastError(t *testing.T) {
	t.Setenv("CB_TEST_TIME_SCALE", "1")
	n := 0
	r := &recorder{TB: t}
	Eventually(r, time.Nanosecond, func() error { n++; return fmt.Errorf("try %d", n) })
	if !strings.HasSuffix(r.failed, fmt.Sprintf("try %d", n)) {
		t.Fatalf("failure %q does not name the last error (try %d)", r.failed, n)
	}
}

func TestCond(t *testing.T) {
	ok := false
	f := Cond("the flag", func() bool { return ok })
	if err := f(); err == nil || !strings.Contains(err.Error(), "the flag") {
		t.Fatalf("err = %v", err)
	}
	ok = true
	if err := f(); err != nil {
		t.Fatal(err)
	}
}

func TestSyncBuffer(t *testing.T) {
	var b SyncBuffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { fmt.Fprint(&b, "ab") })
	}
	wg.Wait()
	if b.String() != strings.Repeat("ab", 8) || len(b.Bytes()) != 16 || !b.Contains("ba") {
		t.Fatalf("buffer %q", b.String())
	}
}

func TestLoggerDropsAfterEnd(t *testing.T) {
	var log func()
	t.Run("sub", func(t *testing.T) {
		l := Logger(t)
		l.Debug().Msg("during the test")
		log = func() { l.Info().Msg("after the test") }
	})
	log() // would panic if it reached the finished subtest's t.Log
}

func TestRefusedAddr(t *testing.T) {
	addr := RefusedAddr(t)
	for range 3 {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			t.Fatalf("%s accepted a connection", addr)
		}
	}
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		t.Fatalf("%s could be taken by a listener", addr)
	}
}
