// Package profiledir owns the temporary dirs of the runtime's Chromium
// processes (profile, XDG config and cache, crash dumps) and what a dead
// Chromium leaves behind: its children, found by their command lines, and
// the dirs of workers that are gone.
package profiledir

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

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/procfs"
)

const tempPrefix = "cloudbrowser-chromium-"

// Profile is the Chromium profile (--user-data-dir) in dir.
func Profile(dir string) string { return filepath.Join(dir, "profile") }

// Env puts Chromium's XDG config and cache dirs, where it keeps crash
// dumps and some state outside the profile, in dir too, so they go with it.
func Env(dir string) []string {
	return []string{"XDG_CONFIG_HOME=" + filepath.Join(dir, "xdg-config"), "XDG_CACHE_HOME=" + filepath.Join(dir, "xdg-cache")}
}

// A Chromium's temporary dir is named tempPrefix+<owner>-<random>, where
// owner is the ownerTag of the process that runs it. The owner is in the
// name, not in a file, so a dir is never seen without it.
//
// ownDirs holds the dirs this process made and has not removed yet, so a
// runtime starting next to another (tests, or two runtimes in one
// process) leaves the other's alone; dirsMu also covers the gap between
// creating a dir and recording it.
var (
	dirsMu  sync.Mutex
	ownDirs = map[string]bool{}
)

// Make creates and records a temporary dir for a Chromium.
func Make() (string, error) {
	dirsMu.Lock()
	defer dirsMu.Unlock()
	dir, err := os.MkdirTemp("", tempPrefix+selfTag()+"-")
	if err == nil {
		ownDirs[dir] = true
	}
	return dir, err
}

// Drop kills what is left of dir's Chromium and removes the dir.
func Drop(dir string) error {
	killLeftovers(leftoverArgs(dir)...)
	err := removeAllRetry(dir)
	dirsMu.Lock()
	delete(ownDirs, dir)
	dirsMu.Unlock()
	return err
}

// RemoveStale removes every temporary dir under base that a dead
// worker left behind, whatever its age: a dir whose owner process is gone
// (a worker killed with SIGKILL, or an earlier process that had our pid),
// after killing any Chromium child still using it. Dirs of live owners are
// kept; so are dirs of an older version (no owner in the name) while a
// live process uses them.
func RemoveStale(base string, log zerolog.Logger) {
	dirs, _ := filepath.Glob(filepath.Join(base, tempPrefix+"*"))
	if len(dirs) == 0 {
		return
	}
	procs, err := procfs.ReadAll()
	if err != nil {
		log.Warn().Err(err).Msg("no process table: stale chromium dirs kept")
		return
	}
	live := liveArgs(procs)
	dirsMu.Lock()
	defer dirsMu.Unlock()
	for _, dir := range dirs {
		fi, err := os.Stat(dir)
		if err != nil || !fi.IsDir() || ownDirs[dir] {
			continue
		}
		used := slices.ContainsFunc(leftoverArgs(dir), func(a string) bool { return live[a] })
		name := strings.TrimPrefix(filepath.Base(dir), tempPrefix)
		tag, _, hasOwner := strings.Cut(name, "-")
		pid, start, ok := parseOwnerTag(tag)
		switch {
		case hasOwner && ok:
			if p, alive := procs[pid]; alive && p.Alive() && p.Start == start && ownerTag(pid, start) != selfTag() {
				continue // a live worker's
			}
			if used {
				killLeftovers(leftoverArgs(dir)...)
			}
		case used:
			continue // an older version's, in use
		}
		if err := removeAllRetry(dir); err != nil {
			log.Warn().Err(err).Str("dir", dir).Msg("removing stale chromium dir")
			continue
		}
		log.Info().Str("dir", dir).Msg("removed stale chromium dir")
	}
}

// leftoverArgs are command-line arguments that tie a process to the
// Chromium that used dir: its children carry the profile, its crash
// handlers (re-parented to init at start) the crash database.
func leftoverArgs(dir string) []string {
	return []string{
		"--user-data-dir=" + Profile(dir),
		"--database=" + filepath.Join(dir, "xdg-config", "chromium", "Crash Reports"),
	}
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
