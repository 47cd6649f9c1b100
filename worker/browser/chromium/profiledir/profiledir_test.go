package profiledir

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/procfs"
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
		if err := os.MkdirAll(Profile(d), 0o700); err != nil {
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

	orphan := shellProc(t, "--user-data-dir="+Profile(deadUsed))
	shellProc(t, "--user-data-dir="+Profile(legacyUsed))

	RemoveStale(tmp, zerolog.Nop())
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
