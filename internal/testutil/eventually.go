package testutil

import (
	"errors"
	"testing"
	"time"
)

// Eventually calls f until it returns nil, and fails the test with f's last
// error when Scale(timeout) has passed. f runs on the caller's goroutine, so
// it may call t.Fatal. The timeout only guards against a hang: pass a
// generous one.
func Eventually(t testing.TB, timeout time.Duration, f func() error) {
	t.Helper()
	limit := Scale(timeout)
	deadline := time.Now().Add(limit)
	// Short first waits keep fast conditions fast; the growth keeps a slow
	// one from spinning.
	wait := 10 * time.Millisecond
	for {
		err := f()
		if err == nil {
			return
		}
		if !time.Now().Before(deadline) {
			t.Fatalf("still failing after %v: %v", limit, err)
			return
		}
		time.Sleep(wait)
		wait = min(wait*3/2, 200*time.Millisecond)
	}
}

// Cond adapts a boolean condition to Eventually; what names it in the
// failure.
func Cond(what string, cond func() bool) func() error {
	err := errors.New("not yet: " + what)
	return func() error {
		if cond() {
			return nil
		}
		return err
	}
}
