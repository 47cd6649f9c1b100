package chromium

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func TestParseStat(t *testing.T) {
	st, err := parseStat([]byte("1234 (chrome (renderer) x) S 77 1234 1234 0 -1 4194560 100 0 0 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if st.pid != 1234 || st.ppid != 77 || st.state != 'S' {
		t.Fatalf("%+v", st)
	}
	for _, bad := range []string{"", "12 chrome S 1", "x (c) S 1", "12 (c) S", "12 (c) S x"} {
		if _, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestParsePSS(t *testing.T) {
	const rollup = `55d0c0a00000-7ffd5a1fe000 ---p 00000000 00:00 0                          [rollup]
Rss:              123456 kB
Pss:               45678 kB
Pss_Anon:          30000 kB
Shared_Clean:      10000 kB
`
	v, err := parsePSS([]byte(rollup))
	if err != nil || v != 45678*1024 {
		t.Fatalf("%d %v", v, err)
	}
	if _, err := parsePSS([]byte("Rss: 1 kB\n")); err == nil {
		t.Fatal("missing Pss accepted")
	}
}

func TestTree(t *testing.T) {
	procs := map[int]procStat{
		1:  {1, 0, 'S'},
		10: {10, 1, 'S'},  // chromium main
		11: {11, 10, 'S'}, // zygote
		12: {12, 11, 'S'}, // renderer
		13: {13, 11, 'Z'}, // exited renderer
		14: {14, 10, 'S'}, // utility
		20: {20, 1, 'S'},  // unrelated
		21: {21, 20, 'S'},
	}
	got := tree(procs, 10)
	slices.Sort(got)
	if !slices.Equal(got, []int{10, 11, 12, 14}) {
		t.Fatalf("tree %v", got)
	}
	if got := tree(procs, 99); len(got) != 0 {
		t.Fatalf("tree of missing pid %v", got)
	}
}

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
	write(100, "100 (chromium) S 1 0 0", "Pss: 1000 kB\n")
	write(101, "101 (chromium) S 100 0 0", "Pss: 200 kB\n")
	write(102, "102 (chromium) S 101 0 0", "Pss: 30 kB\n")
	write(103, "103 (other) S 1 0 0", "Pss: 4 kB\n")
	os.MkdirAll(filepath.Join(dir, "self"), 0o755) // non-numeric entries are skipped

	old := procDir
	procDir = dir
	defer func() { procDir = old }()
	procs, err := readProcs()
	if err != nil {
		t.Fatal(err)
	}
	if len(procs) != 4 {
		t.Fatalf("procs %v", procs)
	}
	n, total := treeUsage(procs, 100)
	if n != 3 || total != 1230*1024 {
		t.Fatalf("n=%d total=%d", n, total)
	}
}

// TestProcSelf checks the real /proc: this test process is listed with its
// parent and has a non-zero PSS.
func TestProcSelf(t *testing.T) {
	procs, err := readProcs()
	if err != nil {
		t.Skip("no /proc:", err)
	}
	me, ok := procs[os.Getpid()]
	if !ok || me.ppid != os.Getppid() {
		t.Fatalf("self %+v (ok=%v), want ppid %d", me, ok, os.Getppid())
	}
	n, total := treeUsage(procs, os.Getpid())
	if n < 1 || total == 0 {
		t.Fatalf("n=%d pss=%d", n, total)
	}
}

func TestRemoveStaleDirs(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	old := time.Now().Add(-time.Hour)
	mk := func(name string, mtime time.Time) string {
		d := filepath.Join(tmp, tempPrefix+name)
		if err := os.MkdirAll(profileDir(d), 0o700); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(d, mtime, mtime)
		return d
	}
	stale, fresh, inUse := mk("stale", old), mk("fresh", time.Now()), mk("inuse", old)
	other := filepath.Join(tmp, "unrelated")
	os.Mkdir(other, 0o700)
	os.Chtimes(other, old, old)

	// A process that names inUse's profile on its command line.
	cmd := exec.Command("sh", "-c", "sleep 60; true", "--user-data-dir="+profileDir(inUse))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()

	removeStaleDirs(zerolog.Nop())
	for _, c := range []struct {
		dir  string
		gone bool
	}{{stale, true}, {fresh, false}, {inUse, false}, {other, false}} {
		_, err := os.Stat(c.dir)
		if gone := os.IsNotExist(err); gone != c.gone {
			t.Errorf("%s: gone=%v, want %v", c.dir, gone, c.gone)
		}
	}
}
