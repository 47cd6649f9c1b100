// Package procfs reads what the cluster needs to know about a process from
// Linux's /proc: whether a pid is still the process we started (its start
// time tells a reused pid apart), with which arguments, its descendants,
// their memory (PSS) and CPU time.
package procfs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// Dir is the proc file system's mount point (tests point it elsewhere).
var Dir = "/proc"

// ErrNoProcess means the pid does not exist (or /proc is not available).
var ErrNoProcess = errors.New("procfs: no such process")

// Stat is the part of /proc/<pid>/stat we use.
type Stat struct {
	Pid, PPid int
	// State is the one-letter state: R, S, D, Z (zombie), X (dead), ...
	State byte
	// Start is the start time in clock ticks after boot (field 22): with
	// the pid it names one process for the life of the machine.
	Start uint64
	// UTime and STime are the CPU time the process spent in user and
	// kernel mode, all its threads, in clock ticks (fields 14 and 15).
	UTime, STime uint64
	// RSS is the resident set size in bytes (field 24; 0 if the line has
	// no such field). Unlike PSS it is a counter, free to read.
	RSS uint64
}

// TicksPerSecond is the unit of Stat's times (USER_HZ, 100 on every
// architecture Linux runs Go on).
const TicksPerSecond = 100

// Alive reports whether the process runs (exists and is not a zombie).
func (s Stat) Alive() bool { return s.State != 'Z' && s.State != 'X' }

// ReadStat reads /proc/<pid>/stat.
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile(filepath.Join(Dir, strconv.Itoa(pid), "stat"))
	if errors.Is(err, os.ErrNotExist) {
		return Stat{}, fmt.Errorf("%w: %d", ErrNoProcess, pid)
	}
	if err != nil {
		return Stat{}, fmt.Errorf("procfs: %w", err)
	}
	return ParseStat(b)
}

// ParseStat parses a stat line. The command (field 2) may contain spaces
// and parentheses, so fields are counted after its last ')'.
func ParseStat(b []byte) (Stat, error) {
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 1 || end < open {
		return Stat{}, fmt.Errorf("procfs: stat %q: no command", b)
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return Stat{}, fmt.Errorf("procfs: stat pid: %w", err)
	}
	f := bytes.Fields(b[end+1:])
	if len(f) < 20 || len(f[0]) != 1 {
		return Stat{}, fmt.Errorf("procfs: stat %q: short", b)
	}
	ppid, err := strconv.Atoi(string(f[1]))
	if err != nil {
		return Stat{}, fmt.Errorf("procfs: stat ppid: %w", err)
	}
	var num [3]uint64 // utime, stime, starttime
	for i, field := range []int{11, 12, 19} {
		if num[i], err = strconv.ParseUint(string(f[field]), 10, 64); err != nil {
			return Stat{}, fmt.Errorf("procfs: stat field %d: %w", field+3, err)
		}
	}
	st := Stat{Pid: pid, PPid: ppid, State: f[0][0], UTime: num[0], STime: num[1], Start: num[2]}
	if len(f) > 21 {
		if pages, err := strconv.ParseUint(string(f[21]), 10, 64); err == nil {
			st.RSS = pages * uint64(os.Getpagesize())
		}
	}
	return st, nil
}

// Tree returns root and all its live descendants in procs (zombies
// excluded: they use no memory and are about to go), root first.
func Tree(procs map[int]Stat, root int) []int {
	children := make(map[int][]int, len(procs))
	for _, p := range procs {
		children[p.PPid] = append(children[p.PPid], p.Pid)
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
		if p, ok := procs[pid]; !ok || !p.Alive() {
			continue
		}
		out = append(out, pid)
		queue = append(queue, children[pid]...)
	}
	return out
}

// PSS reads the proportional set size of pid in bytes
// (/proc/<pid>/smaps_rollup).
func PSS(pid int) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(Dir, strconv.Itoa(pid), "smaps_rollup"))
	if errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("%w: %d", ErrNoProcess, pid)
	}
	if err != nil {
		return 0, fmt.Errorf("procfs: %w", err)
	}
	return ParsePSS(b)
}

// ParsePSS returns the Pss line of smaps_rollup in bytes.
func ParsePSS(b []byte) (uint64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) >= 2 && string(f[0]) == "Pss:" {
			kb, err := strconv.ParseUint(string(f[1]), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("procfs: smaps_rollup Pss: %w", err)
			}
			return kb * 1024, nil
		}
	}
	return 0, errors.New("procfs: smaps_rollup has no Pss line")
}

// ReadAll reads every process's stat. Processes that exit while it reads
// are skipped.
func ReadAll() (map[int]Stat, error) {
	ents, err := os.ReadDir(Dir)
	if err != nil {
		return nil, fmt.Errorf("procfs: %w", err)
	}
	procs := make(map[int]Stat, len(ents))
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(Dir, e.Name(), "stat"))
		if err != nil {
			continue
		}
		if st, err := ParseStat(b); err == nil {
			procs[st.Pid] = st
		}
	}
	return procs, nil
}

// Cmdline returns the process's arguments (argv).
func Cmdline(pid int) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(Dir, strconv.Itoa(pid), "cmdline"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %d", ErrNoProcess, pid)
	}
	if err != nil {
		return nil, fmt.Errorf("procfs: %w", err)
	}
	b = bytes.TrimSuffix(b, []byte{0})
	if len(b) == 0 {
		return nil, nil
	}
	parts := bytes.Split(b, []byte{0})
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = string(p)
	}
	return out, nil
}

// MemAvailable returns the kernel's estimate of memory available for new
// work (MemAvailable in /proc/meminfo), in bytes.
func MemAvailable() (uint64, error) {
	b, err := os.ReadFile(filepath.Join(Dir, "meminfo"))
	if err != nil {
		return 0, fmt.Errorf("procfs: %w", err)
	}
	return parseMemAvailable(b)
}

func parseMemAvailable(b []byte) (uint64, error) {
	for line := range bytes.Lines(b) {
		rest, ok := bytes.CutPrefix(line, []byte("MemAvailable:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) != 2 || string(f[1]) != "kB" {
			break
		}
		kb, err := strconv.ParseUint(string(f[0]), 10, 64)
		if err != nil {
			break
		}
		return kb * 1024, nil
	}
	return 0, errors.New("procfs: meminfo has no MemAvailable line in kB")
}
