// Package procmem measures the memory of process trees: the proportional
// set size (PSS) of every process in them, read from /proc and cached, so
// that measuring often stays cheap.
package procmem

import (
	"sync"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/procfs"
)

// Cache spares most load reports the page-table walk of smaps_rollup:
// reading PSS for every Chromium process once a second was half of the Go
// worker's CPU at capacity (docs/benchmarks.md, "Capacity"). A process's
// PSS is read again after pssMaxAge, or when its RSS (from the stat line
// already read) moved by more than an eighth; in between it is the last
// PSS moved by the RSS change since.
type Cache struct {
	mu sync.Mutex
	m  map[int]pssEntry
}

type pssEntry struct {
	start, pss, rss uint64
	at              time.Time
}

const pssMaxAge = 10 * time.Second

// Usage is the number of processes in the trees of roots (procfs.Tree)
// and their PSS in bytes; it forgets processes no longer in those trees.
func (c *Cache) Usage(procs map[int]procfs.Stat, roots []int, now time.Time) (n int, total uint64) {
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
