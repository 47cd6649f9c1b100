// Package chromiumtest holds the policy for tests that need a real
// Chromium; worker/browser/chromium/chromiumtest.Need applies it.
package chromiumtest

import (
	"os"
	"strings"
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
