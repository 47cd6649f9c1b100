package procmem

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/procfs"
)

// TestProcFake reads a fake /proc laid out like the real one.
func TestProcFake(t *testing.T) {
	dir := t.TempDir()
	write := func(pid int, stat, rollup string) {
		d := filepath.Join(dir, strconv.Itoa(pid))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(d, "stat"), []byte(stat), 0o644)
		os.WriteFile(filepath.Join(d, "smaps_rollup"), []byte(rollup), 0o644)
	}
	write(100, "100 (chromium) S 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 4242 0 0", "Pss: 1000 kB\n")
	write(101, "101 (chromium) S 100 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 4242 0 0", "Pss: 200 kB\n")
	write(102, "102 (chromium) S 101 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 4242 0 0", "Pss: 30 kB\n")
	write(103, "103 (other) S 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 4242 0 0", "Pss: 4 kB\n")
	os.MkdirAll(filepath.Join(dir, "self"), 0o755) // non-numeric entries are skipped

	old := procfs.Dir
	procfs.Dir = dir
	defer func() { procfs.Dir = old }()
	procs, err := procfs.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(procs) != 4 {
		t.Fatalf("procs %v", procs)
	}
	n, total := new(Cache).Usage(procs, []int{100}, time.Now())
	if n != 3 || total != 1230*1024 {
		t.Fatalf("n=%d total=%d", n, total)
	}
}

// TestProcSelf checks the real /proc: this test process is listed with its
// parent and has a non-zero PSS.
func TestProcSelf(t *testing.T) {
	procs, err := procfs.ReadAll()
	if err != nil {
		t.Skip("no /proc:", err)
	}
	me, ok := procs[os.Getpid()]
	if !ok || me.PPid != os.Getppid() {
		t.Fatalf("self %+v (ok=%v), want ppid %d", me, ok, os.Getppid())
	}
	n, total := new(Cache).Usage(procs, []int{os.Getpid()}, time.Now())
	if n < 1 || total == 0 {
		t.Fatalf("n=%d pss=%d", n, total)
	}
}

// TestPSSCache: PSS is read again only when it is old or the RSS moved by
// more than an eighth; in between the RSS change moves the last reading.
func TestPSSCache(t *testing.T) {
	dir := t.TempDir()
	page := uint64(os.Getpagesize())
	write := func(start, rssPages uint64, pssKB int) {
		d := filepath.Join(dir, "100")
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		stat := fmt.Sprintf("100 (chromium) S 1 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 %d 0 %d", start, rssPages)
		os.WriteFile(filepath.Join(d, "stat"), []byte(stat), 0o644)
		os.WriteFile(filepath.Join(d, "smaps_rollup"), fmt.Appendf(nil, "Pss: %d kB\n", pssKB), 0o644)
	}
	old := procfs.Dir
	procfs.Dir = dir
	defer func() { procfs.Dir = old }()
	var c Cache
	t0 := time.Unix(1000, 0)
	usage := func(at time.Duration) uint64 {
		t.Helper()
		procs, err := procfs.ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		n, total := c.Usage(procs, []int{100}, t0.Add(at))
		if n != 1 {
			t.Fatalf("%d processes", n)
		}
		return total
	}
	const kB = 1024
	steps := []struct {
		name        string
		start, rss  uint64 // rss in pages
		pssKB       int    // what smaps_rollup says now
		at          time.Duration
		wantKB      uint64 // in kB, plus wantPages
		wantPlusRSS int64  // pages of RSS change added to the cached PSS
	}{
		{"first reading", 4242, 800, 1000, 0, 1000, 0},
		{"RSS the same: cached", 4242, 800, 5000, time.Second, 1000, 0},
		{"RSS up a little: cached, moved", 4242, 850, 5000, 2 * time.Second, 1000, 50},
		{"RSS up a quarter: read again", 4242, 1000, 5000, 3 * time.Second, 5000, 0},
		{"old: read again", 4242, 1000, 6000, 3*time.Second + pssMaxAge, 6000, 0},
		{"another process with that pid: read again", 9999, 1000, 7000, 14 * time.Second, 7000, 0},
	}
	for _, s := range steps {
		write(s.start, s.rss, s.pssKB)
		want := uint64(int64(s.wantKB*kB) + s.wantPlusRSS*int64(page))
		if got := usage(s.at); got != want {
			t.Fatalf("%s: %d bytes, want %d", s.name, got, want)
		}
	}
	if len(c.m) != 1 {
		t.Fatalf("cache holds %d processes", len(c.m))
	}
	os.RemoveAll(filepath.Join(dir, "100"))
	procs, _ := procfs.ReadAll()
	if n, _ := c.Usage(procs, []int{100}, t0); n != 0 || len(c.m) != 0 {
		t.Fatalf("after the process ended: n=%d, cache %d", n, len(c.m))
	}
}
