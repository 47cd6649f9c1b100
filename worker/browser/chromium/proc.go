package chromium

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// procDir is where the process table is read from; tests point it at a fake.
var procDir = "/proc"

// procStat is what Stats and cleanup need from /proc/<pid>/stat.
type procStat struct {
	pid, ppid int
	state     byte   // R, S, D, Z, ...
	start     uint64 // start time in clock ticks since boot; 0 if not read
}

// parseStat parses /proc/<pid>/stat. The command name is in parentheses and
// may itself contain spaces and parentheses, so fields are read after the
// last ')'.
func parseStat(b []byte) (procStat, error) {
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 1 || end < open {
		return procStat{}, fmt.Errorf("proc stat %q: no command", b)
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return procStat{}, fmt.Errorf("proc stat pid: %w", err)
	}
	f := bytes.Fields(b[end+1:])
	if len(f) < 2 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("proc stat %q: short", b)
	}
	ppid, err := strconv.Atoi(string(f[1]))
	if err != nil {
		return procStat{}, fmt.Errorf("proc stat ppid: %w", err)
	}
	st := procStat{pid: pid, ppid: ppid, state: f[0][0]}
	if len(f) >= 20 { // field 22, starttime: tells a pid's reuse apart
		st.start, _ = strconv.ParseUint(string(f[19]), 10, 64)
	}
	return st, nil
}

// readProcs reads every process's stat. Processes that exit while we read
// are skipped.
func readProcs() (map[int]procStat, error) {
	ents, err := os.ReadDir(procDir)
	if err != nil {
		return nil, err
	}
	procs := make(map[int]procStat, len(ents))
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(procDir, e.Name(), "stat"))
		if err != nil {
			continue
		}
		st, err := parseStat(b)
		if err != nil {
			continue
		}
		procs[st.pid] = st
	}
	return procs, nil
}

// tree returns root and all its live descendants (zombies excluded: they
// use no memory and are about to go).
func tree(procs map[int]procStat, root int) []int {
	children := make(map[int][]int, len(procs))
	for _, p := range procs {
		children[p.ppid] = append(children[p.ppid], p.pid)
	}
	var out []int
	queue := []int{root}
	seen := map[int]bool{}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if seen[pid] {
			continue
		}
		seen[pid] = true
		if p, ok := procs[pid]; !ok || p.state == 'Z' {
			continue
		}
		out = append(out, pid)
		queue = append(queue, children[pid]...)
	}
	return out
}

// parsePSS returns the Pss line of smaps_rollup in bytes.
func parsePSS(b []byte) (uint64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) >= 2 && string(f[0]) == "Pss:" {
			kb, err := strconv.ParseUint(string(f[1]), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("smaps_rollup Pss: %w", err)
			}
			return kb * 1024, nil
		}
	}
	return 0, errors.New("smaps_rollup: no Pss line")
}

// pss reads the proportional set size of pid in bytes.
func pss(pid int) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(procDir, strconv.Itoa(pid), "smaps_rollup"))
	if err != nil {
		return 0, err
	}
	return parsePSS(b)
}

// treeUsage sums PSS over root and its descendants and counts them.
// Processes that exit meanwhile are skipped.
func treeUsage(procs map[int]procStat, root int) (n int, total uint64) {
	for _, pid := range tree(procs, root) {
		v, err := pss(pid)
		if err != nil {
			continue
		}
		n++
		total += v
	}
	return n, total
}

// cmdlineHas reports whether a /proc/<pid>/cmdline contains arg as a whole
// argument. Chromium's children rewrite their argv into one space-separated
// string, so both NUL and space count as separators.
func cmdlineHas(cmdline []byte, arg string) bool {
	for i := 0; ; {
		j := bytes.Index(cmdline[i:], []byte(arg))
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(arg)
		sepBefore := start == 0 || cmdline[start-1] == 0 || cmdline[start-1] == ' '
		sepAfter := end == len(cmdline) || cmdline[end] == 0 || cmdline[end] == ' '
		if sepBefore && sepAfter {
			return true
		}
		i = start + 1
	}
}

// killMatching SIGKILLs every live process (not us) whose command line has
// one of args, and returns how many it found.
func killMatching(procs map[int]procStat, args ...string) int {
	self := os.Getpid()
	n := 0
	for pid, p := range procs {
		if pid == self || p.state == 'Z' {
			continue
		}
		b, err := os.ReadFile(filepath.Join(procDir, strconv.Itoa(pid), "cmdline"))
		if err != nil || !slices.ContainsFunc(args, func(a string) bool { return cmdlineHas(b, a) }) {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n
}

// killLeftovers kills what is left of a dead Chromium: once its main
// process is gone, its children are re-parented away and only their command
// line (args, see leftoverArgs) still ties them to it. A child may fork
// while we look, so look until a few passes find nothing.
func killLeftovers(args ...string) {
	deadline := time.Now().Add(3 * time.Second)
	for quiet := 0; quiet < 3 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		procs, err := readProcs()
		if err != nil {
			return
		}
		if killMatching(procs, args...) == 0 {
			quiet++
		} else {
			quiet = 0
		}
	}
}

// removeAllRetry removes dir; a dying child may still create files in it.
func removeAllRetry(dir string) error {
	var err error
	for range 50 {
		if err = os.RemoveAll(dir); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

// liveArgs returns the command-line arguments of every live process but
// us (NUL- or space-separated, see cmdlineHas).
func liveArgs(procs map[int]procStat) map[string]bool {
	args := map[string]bool{}
	self := os.Getpid()
	for pid, p := range procs {
		if p.state == 'Z' || pid == self {
			continue
		}
		b, err := os.ReadFile(filepath.Join(procDir, strconv.Itoa(pid), "cmdline"))
		if err != nil {
			continue
		}
		for _, arg := range bytes.FieldsFunc(b, func(r rune) bool { return r == 0 || r == ' ' }) {
			args[string(arg)] = true
		}
	}
	return args
}

// ownerTag names a process for as long as it lives: pid and start time,
// so a reused pid is not taken for the old process.
func ownerTag(pid int, start uint64) string { return fmt.Sprintf("%d.%d", pid, start) }

// parseOwnerTag is the inverse of ownerTag.
func parseOwnerTag(tag string) (pid int, start uint64, ok bool) {
	p, st, found := strings.Cut(tag, ".")
	if !found {
		return 0, 0, false
	}
	pid, err := strconv.Atoi(p)
	if err != nil || pid <= 0 {
		return 0, 0, false
	}
	start, err = strconv.ParseUint(st, 10, 64)
	return pid, start, err == nil
}

// selfTag is ownerTag of this process.
var selfTag = sync.OnceValue(func() string {
	var start uint64
	if b, err := os.ReadFile(filepath.Join(procDir, strconv.Itoa(os.Getpid()), "stat")); err == nil {
		if st, err := parseStat(b); err == nil {
			start = st.start
		}
	}
	return ownerTag(os.Getpid(), start)
})
