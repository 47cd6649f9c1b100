package e2e

import (
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
)

// With a race-built binary (raceBinary), GORACE=log_path sends every
// report of every process the tests start, directly or not, to a file
// race.<pid> in raceDir. checkRaces turns reports that appeared since the
// last check into failures of the test at hand; TestMain fails the run for
// any left over (e.g. from a process that outlived its test).
var (
	raceDir  string
	raceMu   sync.Mutex
	raceSeen = map[string]bool{}
)

// newRaceReports returns the reports not returned before, whole.
func newRaceReports() []string {
	if raceDir == "" {
		return nil
	}
	raceMu.Lock()
	defer raceMu.Unlock()
	files, _ := filepath.Glob(filepath.Join(raceDir, "race.*"))
	sort.Strings(files)
	var out []string
	for _, f := range files {
		if raceSeen[f] {
			continue
		}
		raceSeen[f] = true
		b, err := os.ReadFile(f)
		if err != nil || len(b) == 0 {
			continue
		}
		out = append(out, filepath.Base(f)+":\n"+string(b))
	}
	return out
}

// checkRaces fails t for every data race reported since the last check.
func checkRaces(t *testing.T) {
	t.Helper()
	for _, r := range newRaceReports() {
		if len(r) > 8000 {
			r = r[:8000] + "\n…"
		}
		t.Errorf("a process of the binary under test reported a data race:\n%s", r)
	}
}

// TestRaceReportsCollected: a report file appears once, whole, and only
// once (so a later test is not blamed for it).
func TestRaceReportsCollected(t *testing.T) {
	saved := raceDir
	raceDir = t.TempDir()
	defer func() { raceDir = saved }()
	if got := newRaceReports(); len(got) != 0 {
		t.Fatalf("reports in an empty dir: %q", got)
	}
	report := "==================\nWARNING: DATA RACE\nWrite at 0x00c000 by goroutine 7:\n"
	if err := os.WriteFile(filepath.Join(raceDir, "race.4242"), []byte(report), 0o644); err != nil {
		t.Fatal(err)
	}
	got := newRaceReports()
	if len(got) != 1 || got[0] != "race.4242:\n"+report {
		t.Fatalf("reports = %q", got)
	}
	if again := newRaceReports(); len(again) != 0 {
		t.Fatalf("the same report twice: %q", again)
	}
}
