package chromium

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/procfs"
)

// pssCache spares most load reports the page-table walk of smaps_rollup:
// reading PSS for every Chromium process once a second was half of the Go
// worker's CPU at capacity (docs/benchmarks.md, "Capacity"). A process's
// PSS is read again after pssMaxAge, or when its RSS (from the stat line
// already read) moved by more than an eighth; in between it is the last
// PSS moved by the RSS change since.
type pssCache struct {
	mu sync.Mutex
	m  map[int]pssEntry
}

type pssEntry struct {
	start, pss, rss uint64
	at              time.Time
}

const pssMaxAge = 10 * time.Second

// usage is treeUsage over several roots, with the cache; it forgets
// processes no longer in those trees.
func (c *pssCache) usage(procs map[int]procfs.Stat, roots []int, now time.Time) (n int, total uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := make(map[int]pssEntry, len(c.m))
	for _, root := range roots {
		for _, pid := range procfs.Tree(procs, root) {
			st := procs[pid]
			e, ok := c.m[pid]
			if !ok || e.start != st.Start || st.RSS == 0 || now.Sub(e.at) >= pssMaxAge || moved(e.rss, st.RSS) {
				v, err := procfs.PSS(pid)
				if err != nil {
					continue
				}
				e = pssEntry{start: st.Start, pss: v, rss: st.RSS, at: now}
			}
			seen[pid] = e
			n++
			total += uint64(max(0, int64(e.pss)+int64(st.RSS)-int64(e.rss)))
		}
	}
	c.m = seen
	return n, total
}

// moved reports whether RSS changed by more than an eighth.
func moved(then, now uint64) bool {
	d := max(then, now) - min(then, now)
	return d > then/8
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
func killMatching(procs map[int]procfs.Stat, args ...string) int {
	self := os.Getpid()
	n := 0
	for pid, p := range procs {
		if pid == self || !p.Alive() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(procfs.Dir, strconv.Itoa(pid), "cmdline"))
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
		procs, err := procfs.ReadAll()
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
func liveArgs(procs map[int]procfs.Stat) map[string]bool {
	args := map[string]bool{}
	self := os.Getpid()
	for pid, p := range procs {
		if !p.Alive() || pid == self {
			continue
		}
		b, err := os.ReadFile(filepath.Join(procfs.Dir, strconv.Itoa(pid), "cmdline"))
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
	if st, err := procfs.ReadStat(os.Getpid()); err == nil {
		start = st.Start
	}
	return ownerTag(os.Getpid(), start)
})
