// Package chromiumtest helps tests that need a real Chromium. It lives
// next to the chromium package, which it asks for the binary; the policy
// of when a missing Chromium fails (internal/chromiumtest.Required) stays
// in internal/.
package chromiumtest

import (
	"testing"

	policy "github.com/cloudbrowser-go/cloudbrowser/internal/chromiumtest"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium"
)

// Need skips the test when no Chromium binary is found, unless
// the internal chromiumtest.Required says so, where a missing Chromium is a failure.
func Need(t testing.TB) {
	t.Helper()
	if _, err := chromium.Find(""); err == nil {
		return
	}
	if policy.Required() {
		t.Fatal("Chromium is required here (CI or CB_REQUIRE_CHROMIUM=1) but no Chromium binary was found (install chromium or set CB_CHROMIUM)")
	}
	t.Skip("no Chromium binary")
}
