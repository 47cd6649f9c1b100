// Package chromiumtest helps tests that need a real Chromium.
package chromiumtest

import (
	"os"
	"strings"
	"testing"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium"
)

// Required reports whether a missing Chromium must fail the tests instead
// of skipping them: CB_REQUIRE_CHROMIUM=1 (scripts/test.sh sets it in CI),
// or any CI value that is not "false", "0" or "no" (CI systems say "true",
// "1", "yes"...).
func Required() bool {
	if os.Getenv("CB_REQUIRE_CHROMIUM") == "1" {
		return true
	}
	switch strings.ToLower(strings.TrimSpace(os.Getenv("CI"))) {
	case "", "false", "0", "no":
		return false
	}
	return true
}

// Need skips the test when no Chromium binary is found, unless Required,
// where a missing Chromium is a failure.
func Need(t testing.TB) {
	t.Helper()
	if _, err := chromium.Find(""); err == nil {
		return
	}
	if Required() {
		t.Fatal("Chromium is required here (CI or CB_REQUIRE_CHROMIUM=1) but no Chromium binary was found (install chromium or set CB_CHROMIUM)")
	}
	t.Skip("no Chromium binary")
}
