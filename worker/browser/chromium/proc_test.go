package chromium

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/procfs"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

func TestCmdlineHas(t *testing.T) {
	const arg = "--user-data-dir=/tmp/p1"
	for _, c := range []struct {
		cmdline string
		want    bool
	}{
		{"/usr/lib/chromium/chromium\x00--user-data-dir=/tmp/p1\x00about:blank\x00", true},
		{"/usr/lib/chromium/chromium --type=renderer --user-data-dir=/tmp/p1 --lang=en", true},
		{"chromium --user-data-dir=/tmp/p1", true},
		{"chromium --user-data-dir=/tmp/p10 --x", false},
		{"chromium --user-data-dir=/tmp/p1x --user-data-dir=/tmp/p1", true},
		{"chromium", false},
	} {
		if got := cmdlineHas([]byte(c.cmdline), arg); got != c.want {
			t.Errorf("%q: %v", c.cmdline, got)
		}
	}
}

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
	n, total := new(pssCache).usage(procs, []int{100}, time.Now())
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
	n, total := new(pssCache).usage(procs, []int{os.Getpid()}, time.Now())
	if n < 1 || total == 0 {
		t.Fatalf("n=%d pss=%d", n, total)
	}
}

// shellProc starts a shell that waits on its stdin (no child process) with
// extra arguments on its command line, and returns it running.
func shellProc(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sh", append([]string{"-c", "read x", "sh"}, args...)...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// tagOf is the ownerTag of a live process.
func tagOf(t *testing.T, pid int) string {
	t.Helper()
	st, err := procfs.ReadStat(pid)
	if err != nil || st.Start == 0 {
		t.Fatalf("stat of %d: %+v %v", pid, st, err)
	}
	return ownerTag(pid, st.Start)
}

// TestRemoveStaleDirs: at startup every dir of a dead owner goes, however
// young, and with it any process still using it; dirs of live owners and
// of this process's runtimes stay.
func TestRemoveStaleDirs(t *testing.T) {
	if _, err := procfs.ReadAll(); err != nil {
		t.Skip("no /proc:", err)
	}
	tmp := t.TempDir()
	mk := func(name string) string {
		d := filepath.Join(tmp, tempPrefix+name)
		if err := os.MkdirAll(profileDir(d), 0o700); err != nil {
			t.Fatal(err)
		}
		return d
	}
	// A process that has exited: its pid and start time name a dead owner.
	done := exec.Command("true")
	if err := done.Run(); err != nil {
		t.Fatal(err)
	}
	deadTag := ownerTag(done.Process.Pid, 12345)
	alive := shellProc(t)
	pid, start, _ := parseOwnerTag(selfTag())

	deadFresh := mk(deadTag + "-1")                     // a worker killed a second ago
	deadUsed := mk(deadTag + "-2")                      // ... whose Chromium child lives on
	liveOwner := mk(tagOf(t, alive.Process.Pid) + "-3") // another worker, running
	reused := mk(ownerTag(pid, start+1) + "-4")         // an earlier process with our pid
	legacy := mk("123456")                              // an older version's, unused
	legacyUsed := mk("654321")                          // an older version's, in use
	other := filepath.Join(tmp, "unrelated")
	os.Mkdir(other, 0o700)
	mine := mk(selfTag() + "-5") // a runtime of this process
	dirsMu.Lock()
	ownDirs[mine] = true
	dirsMu.Unlock()
	t.Cleanup(func() { dirsMu.Lock(); delete(ownDirs, mine); dirsMu.Unlock() })

	orphan := shellProc(t, "--user-data-dir="+profileDir(deadUsed))
	shellProc(t, "--user-data-dir="+profileDir(legacyUsed))

	removeStaleDirs(tmp, zerolog.Nop())
	for _, c := range []struct {
		dir  string
		gone bool
	}{
		{deadFresh, true}, {deadUsed, true}, {reused, true}, {legacy, true},
		{liveOwner, false}, {legacyUsed, false}, {other, false}, {mine, false},
	} {
		_, err := os.Stat(c.dir)
		if gone := os.IsNotExist(err); gone != c.gone {
			t.Errorf("%s: gone=%v, want %v", filepath.Base(c.dir), gone, c.gone)
		}
	}
	// The orphan was killed: Wait returns (the cleanup's Kill is then a no-op).
	waited := make(chan error, 1)
	go func() { waited <- orphan.Wait() }()
	select {
	case <-waited:
	case <-time.After(30 * time.Second):
		t.Fatal("the process using a dead owner's dir was not killed")
	}
}

func TestOwnerTag(t *testing.T) {
	for _, tc := range []struct {
		tag   string
		pid   int
		start uint64
		ok    bool
	}{
		{"12.345", 12, 345, true},
		{ownerTag(7, 0), 7, 0, true},
		{"12", 0, 0, false},
		{"x.1", 0, 0, false},
		{"0.1", 0, 0, false},
		{"1.x", 0, 0, false},
	} {
		pid, start, ok := parseOwnerTag(tc.tag)
		if ok != tc.ok || ok && (pid != tc.pid || start != tc.start) {
			t.Errorf("%q: %d %d %v", tc.tag, pid, start, ok)
		}
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
	var c pssCache
	t0 := time.Unix(1000, 0)
	usage := func(at time.Duration) uint64 {
		t.Helper()
		procs, err := procfs.ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		n, total := c.usage(procs, []int{100}, t0.Add(at))
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
	if n, _ := c.usage(procs, []int{100}, t0); n != 0 || len(c.m) != 0 {
		t.Fatalf("after the process ended: n=%d, cache %d", n, len(c.m))
	}
}

// BenchmarkStatsPSS: what a load report's memory reading costs with 10
// live browsers, reading every process's PSS (uncached, as before) and
// with the cache (within pssMaxAge and with steady RSS, no smaps_rollup).
func BenchmarkStatsPSS(b *testing.B) {
	rt := shared(b)
	ctx := context.Background()
	for range 10 {
		br, err := rt.NewBrowser(ctx, browser.Options{URL: "data:text/html,<p>hello"})
		if err != nil {
			b.Fatal(err)
		}
		defer br.Close(ctx)
	}
	rt.mu.Lock()
	var pids []int
	for _, s := range rt.slots {
		if s.proc != nil {
			pids = append(pids, s.proc.pid)
		}
	}
	rt.mu.Unlock()
	for _, bc := range []struct {
		name   string
		cached bool
	}{{"uncached", false}, {"cached", true}} {
		b.Run(bc.name, func(b *testing.B) {
			var c pssCache
			now := time.Now()
			for b.Loop() {
				procs, err := procfs.ReadAll()
				if err != nil {
					b.Fatal(err)
				}
				if !bc.cached {
					c = pssCache{}
				}
				if n, _ := c.usage(procs, pids, now); n == 0 {
					b.Fatal("no processes")
				}
			}
		})
	}
}
