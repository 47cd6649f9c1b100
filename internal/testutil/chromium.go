package testutil

import (
	"os"
	"os/exec"
	"testing"
)

// ChromiumRequired reports whether a missing Chromium must fail the tests
// instead of skipping them: in CI, or with CB_REQUIRE_CHROMIUM=1
// (scripts/test.sh sets it in CI).
func ChromiumRequired() bool {
	return os.Getenv("CB_REQUIRE_CHROMIUM") == "1" || CI()
}

// ChromiumPath finds Chromium as the product does (chromium.Find and
// chromium.Binaries, which this package may not import): CB_CHROMIUM if
// set, else the headless shell, else full Chromium. "" if none.
func ChromiumPath() string {
	names := []string{"/usr/lib/chromium/chromium-headless-shell", "chromium-headless-shell", "chrome-headless-shell",
		"chromium", "chromium-browser", "google-chrome"}
	if p := os.Getenv("CB_CHROMIUM"); p != "" {
		names = []string{p}
	}
	for _, name := range names {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// NeedChromium skips the test when no Chromium is found, unless
// ChromiumRequired: then a missing Chromium is a failure, so CI cannot pass
// by skipping every browser test.
func NeedChromium(t testing.TB) {
	t.Helper()
	if ChromiumPath() != "" {
		return
	}
	if ChromiumRequired() {
		t.Fatal("Chromium is required here (CI or CB_REQUIRE_CHROMIUM=1) but none was found (install chromium or set CB_CHROMIUM)")
	}
	t.Skip("no Chromium binary (install chromium or set CB_CHROMIUM)")
}
