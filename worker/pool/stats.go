package pool

import (
	"maps"
	"slices"
	"strings"
	"time"
)

// Counters are cumulative statistics of a pool or of a whole manager.
type Counters struct {
	Created   int64 `json:"created"`   // browsers started (TTL replacements included)
	Destroyed int64 `json:"destroyed"` // browsers closed (TTL replacements included)
	// ShiftedIn counts browsers a specific pool got by shifting (a free
	// general-pool browser destroyed at the global limit); ShiftedOut the
	// general pool's browsers destroyed for it.
	ShiftedIn  int64 `json:"shiftedIn"`
	ShiftedOut int64 `json:"shiftedOut"`
	Recycled   int64 `json:"recycled"` // TTL replacements
	Touches    int64 `json:"touches"`  // touch session sequences that succeeded
	// Backs counts back sequences that succeeded (a returned browser made
	// ready for the next user).
	Backs int64 `json:"backs"`
	// Reused counts general-pool browsers reset after a lease and made
	// free for the next one (Lease.Reuse) instead of being closed.
	Reused int64 `json:"reused"`
	// Expired counts free browsers past their TTL destroyed when a lease
	// would have taken them.
	Expired int64 `json:"expired"`
	Leases  int64 `json:"leases"`
	Returns int64 `json:"returns"`
	// CreateFailures counts browsers the runtime failed to make.
	CreateFailures int64 `json:"createFailures"`
	// LeaseFailures by reason (ReasonGlobalMax, ReasonPoolMax, ...).
	LeaseFailures map[string]int64 `json:"leaseFailures"`
	// SequenceFailures by sequence (SeqInit, SeqBack, SeqTouch, SeqTTL,
	// SeqReset).
	SequenceFailures map[string]int64 `json:"sequenceFailures"`
	// AvgLeaseWaitMs is the mean time successful leases waited.
	AvgLeaseWaitMs float64 `json:"avgLeaseWaitMs"`

	waitTotal time.Duration
}

func newCounters() Counters {
	return Counters{LeaseFailures: map[string]int64{}, SequenceFailures: map[string]int64{}}
}

func (c Counters) snapshot() Counters {
	c.LeaseFailures = maps.Clone(c.LeaseFailures)
	c.SequenceFailures = maps.Clone(c.SequenceFailures)
	if c.Leases > 0 {
		c.AvgLeaseWaitMs = float64(c.waitTotal) / float64(c.Leases) / float64(time.Millisecond)
	}
	c.waitTotal = 0
	return c
}

// Gauges are a pool's (or the manager's) current browsers.
type Gauges struct {
	Size    int `json:"size"`    // all browsers, whatever their state
	Free    int `json:"free"`    // unlocked, ready to lease
	Locked  int `json:"locked"`  // leased
	Busy    int `json:"busy"`    // being created, or running back/touch/TTL work
	Waiting int `json:"waiting"` // leases waiting for a browser being prepared
}

func (g *Gauges) add(p *pool) {
	g.Size += len(p.entries)
	g.Waiting += len(p.waiters)
	for _, e := range p.entries {
		switch e.st {
		case stFree:
			g.Free++
		case stLocked:
			g.Locked++
		default:
			g.Busy++
		}
	}
}

// Stats describe one pool.
type Stats struct {
	App         string `json:"app,omitempty"` // "" for a general pool
	General     bool   `json:"general,omitempty"`
	BrowserType string `json:"browserType"`
	MinSize     int    `json:"minSize"`
	MaxSize     int    `json:"maxSize"`
	Gauges
	Counters
}

// TypeStats describe the global limit of one browser type.
type TypeStats struct {
	Type     string `json:"type"`
	Max      int    `json:"max"`
	Browsers int    `json:"browsers"`
}

// ManagerStats describe a worker's pools: totals (counters include
// pools since replaced), each browser type's limit, and each pool.
type ManagerStats struct {
	Gauges
	Counters
	Types []TypeStats `json:"types"`
	Pools []Stats     `json:"pools"` // general pools first, then by app
}

// Stats returns a snapshot of the statistics.
func (m *Manager) Stats() ManagerStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := ManagerStats{Counters: m.total.snapshot(), Types: []TypeStats{}, Pools: []Stats{}}
	for p := range m.all {
		out.Gauges.add(p)
	}
	var pools []*pool
	for _, ts := range m.types {
		out.Types = append(out.Types, TypeStats{Type: ts.name, Max: ts.bt.Max, Browsers: ts.count})
		pools = append(pools, ts.general)
	}
	for _, p := range m.pools {
		pools = append(pools, p)
	}
	slices.SortFunc(out.Types, func(a, b TypeStats) int { return strings.Compare(a.Type, b.Type) })
	slices.SortFunc(pools, func(a, b *pool) int {
		if a.general != b.general {
			if a.general {
				return -1
			}
			return 1
		}
		return strings.Compare(a.app+"\x00"+a.ts.name, b.app+"\x00"+b.ts.name)
	})
	for _, p := range pools {
		s := Stats{App: p.app, General: p.general, BrowserType: p.ts.name, MinSize: p.cfg.MinSize,
			MaxSize: p.cfg.MaxSize, Counters: p.c.snapshot()}
		s.Gauges.add(p)
		out.Pools = append(out.Pools, s)
	}
	return out
}
