// Package testutil is what the tests of every package share: polling with a
// CI time multiplier (Eventually), the Chromium rule (NeedChromium), a
// logger into the test's log, a goroutine-safe buffer, the goroutine-leak
// check (Main, NoLeaks) and whether -race is on (Race).
//
// It imports only the standard library, zerolog, goleak and nothing of
// proxy/, worker/ or master/, so tests anywhere can use it.
package testutil

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// CI reports whether the tests run in CI: CI set to anything but "false",
// "0" or "no" (CI systems say "true", "1", "yes"...).
func CI() bool {
	switch strings.ToLower(strings.TrimSpace(os.Getenv("CI"))) {
	case "", "false", "0", "no":
		return false
	}
	return true
}

// Scale stretches a test's patience: d times CB_TEST_TIME_SCALE if set,
// else 3 in CI (shared, slower machines), else 1. Only bounds that guard
// against a hang are scaled; a test never asserts a duration.
func Scale(d time.Duration) time.Duration {
	if s := os.Getenv("CB_TEST_TIME_SCALE"); s != "" {
		if f, err := strconv.ParseFloat(s, 64); err == nil && f > 0 {
			return time.Duration(float64(d) * f)
		}
	}
	if CI() {
		return 3 * d
	}
	return d
}
