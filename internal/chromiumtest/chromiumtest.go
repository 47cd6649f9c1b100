// Package chromiumtest helps tests that need a real Chromium.
package chromiumtest

import (
	"os"
	"testing"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium"
)

// Need skips the test when no Chromium binary is found, except on CI
// (CI=true), where a missing Chromium is a failure.
func Need(t testing.TB) {
	t.Helper()
	if _, err := chromium.Find(""); err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("CI=true but no Chromium binary (install chromium or set CB_CHROMIUM)")
	}
	t.Skip("no Chromium binary")
}
