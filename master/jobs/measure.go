package jobs

import (
	"slices"
	"time"
)

// MaxStartsIn is the most of starts that fall in any window [t, t+d): what
// a site sees of a starts-per-second limit. Tests and benchmarks judge the
// queue's politeness with it at the site.
func MaxStartsIn(starts []time.Time, d time.Duration) int {
	starts = slices.Clone(starts)
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	best, lo := 0, 0
	for hi := range starts {
		for starts[hi].Sub(starts[lo]) >= d {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}
