// Package balance chooses the worker that hosts a new app instance.
//
// It implements the two strategies of the CloudBrowser 2.0 paper: round-robin,
// and least-load over periodic load reports (Go heap + Chromium PSS). Reports
// are stale between two reports, so least-load adds a projection of the load
// each not-yet-reported placement will add; unlike the paper's fixed +10 MB,
// the per-instance cost is learned from the reports themselves (see
// docs/balancer.md for the design and a simulation).
//
// A Balancer is a plain data structure guarded by a mutex: it starts no
// goroutines and is safe for concurrent use.
package balance

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Strategy is a placement strategy.
type Strategy string

const (
	// RoundRobin places instances on eligible workers in turn, ignoring load.
	RoundRobin Strategy = "round-robin"
	// LeastLoad places an instance on the worker with the lowest (projected)
	// load.
	LeastLoad Strategy = "least-load"
)

// ParseStrategy parses a strategy name as given on a command line or in a
// config file (case-insensitive).
func ParseStrategy(s string) (Strategy, error) {
	switch st := Strategy(strings.ToLower(strings.TrimSpace(s))); st {
	case RoundRobin, LeastLoad:
		return st, nil
	}
	return "", fmt.Errorf("balance: unknown strategy %q (want %q or %q)", s, RoundRobin, LeastLoad)
}

const (
	mib = 1 << 20
	// DefaultCost is the per-instance cost assumed before anything is learned:
	// a little above a typical Chromium browser context (~40 MiB PSS), because
	// underpredicting herds a burst onto one worker while overpredicting only
	// spreads it a little wider than needed.
	DefaultCost = 48 * mib
	// DefaultMinCost is the default floor of the learned cost.
	DefaultMinCost = 8 * mib
)

// Options configures a Balancer. The zero value is least-load WITHOUT
// projection; production should set Project.
type Options struct {
	// Strategy defaults to LeastLoad.
	Strategy Strategy
	// Project applies the load projection (least-load only). False gives the
	// paper's "naive" least-load, kept for comparison.
	Project bool
	// DefaultCost is the per-instance cost estimate in bytes before anything
	// is learned (default DefaultCost). The learned estimate is capped at
	// 4×DefaultCost to resist outliers.
	DefaultCost uint64
	// MinCost is the floor of the learned estimate (default DefaultMinCost,
	// lowered to DefaultCost if above it).
	MinCost uint64
}

var (
	// ErrNoWorkers is returned by Pick when no worker is eligible.
	ErrNoWorkers = errors.New("balance: no eligible workers")
	// ErrUnknownWorker is returned for a worker that was never added or was
	// removed.
	ErrUnknownWorker = errors.New("balance: unknown worker")
)

// WorkerLoad is one worker's state as the balancer sees it.
type WorkerLoad struct {
	ID string `json:"id"`
	// Reported is the load of the last report (0 until the first one).
	Reported uint64 `json:"reported"`
	// Projected is Reported + Cost × Pending. It is computed even when
	// Options.Project is false, for display.
	Projected uint64 `json:"projected"`
	// Instances is the balancer's count: the last report's count plus
	// placements and minus releases since.
	Instances int `json:"instances"`
	// ReportedInstances is the instance count of the last report.
	ReportedInstances int `json:"reportedInstances"`
	// Pending is the number of placements not yet visible in a report.
	Pending   int  `json:"pending"`
	HasReport bool `json:"hasReport"`
	Draining  bool `json:"draining"`
	// Cost is the cluster-wide per-instance estimate used for the projection.
	Cost uint64 `json:"cost"`
}

type worker struct {
	id       string
	draining bool
	reported bool
	load     uint64 // last report's load
	repInst  int    // last report's instance count
	// count is the balancer's instance count, resynchronised at every report
	// so that missed Release calls or crashed instances cannot skew it for
	// long.
	count int
	// fresh counts placements since the last report; carried counts
	// placements made before it that it did not show. Together they cap the
	// pending projection: a placement is projected for at most two report
	// periods, so a lost placement cannot inflate a worker forever.
	fresh, carried int
	// released counts Release calls since the last report. An interval with
	// releases mixes freed memory (which lags: GC, process teardown) into the
	// load delta, so it is not used to learn the cost.
	released int
}

// pending is the number of placements the last report did not show. The
// difference between the balancer's count and the reported one is the net of
// unreported placements and releases; since the reported load has exactly the
// same staleness, netting releases against placements keeps the projection
// right in total. A negative difference (unreported removals) is not
// subtracted: freed memory shows up late, so erring high is safer.
func (w *worker) pending() int {
	return min(max(w.count-w.repInst, 0), w.fresh+w.carried)
}

func (w *worker) projected(cost uint64) uint64 {
	p := uint64(w.pending())
	if p == 0 {
		return w.load
	}
	if cost > (math.MaxUint64-w.load)/p {
		return math.MaxUint64
	}
	return w.load + cost*p
}

// Balancer places new instances on workers. Create it with New.
type Balancer struct {
	mu      sync.Mutex
	opts    Options
	workers map[string]*worker
	ids     []string      // sorted; the order of round-robin and of tie rotation
	last    string        // id of the last pick: rotation resumes after it
	peeks   atomic.Uint64 // Peek's turn
	cost    estimator
	// fixed disables learning (the paper's constant projection); only the
	// simulation sets it, for comparison.
	fixed bool
}

// New returns a Balancer with no workers. It panics on an unknown strategy;
// validate user input with ParseStrategy.
func New(opts Options) *Balancer {
	if opts.Strategy == "" {
		opts.Strategy = LeastLoad
	}
	if opts.Strategy != RoundRobin && opts.Strategy != LeastLoad {
		panic(fmt.Sprintf("balance: unknown strategy %q", opts.Strategy))
	}
	if opts.DefaultCost == 0 {
		opts.DefaultCost = DefaultCost
	}
	if opts.MinCost == 0 {
		opts.MinCost = DefaultMinCost
	}
	opts.MinCost = min(opts.MinCost, opts.DefaultCost)
	maxCost := opts.DefaultCost * 4
	if maxCost/4 != opts.DefaultCost { // overflow
		maxCost = math.MaxUint64
	}
	return &Balancer{
		opts:    opts,
		workers: make(map[string]*worker),
		cost:    newEstimator(opts.DefaultCost, opts.MinCost, maxCost),
	}
}

// Add registers a worker. Its load counts as 0 until its first report, so it
// is eligible at once (the projection still spreads a burst). Adding a known
// worker is a no-op.
func (b *Balancer) Add(workerID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.workers[workerID]; ok {
		return
	}
	b.workers[workerID] = &worker{id: workerID}
	i, _ := slices.BinarySearch(b.ids, workerID)
	b.ids = slices.Insert(b.ids, i, workerID)
}

// Remove forgets a worker (dead or left); it gets no placement from now on.
// Removing an unknown worker is a no-op.
func (b *Balancer) Remove(workerID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.workers[workerID]; !ok {
		return
	}
	delete(b.workers, workerID)
	if i, ok := slices.BinarySearch(b.ids, workerID); ok {
		b.ids = slices.Delete(b.ids, i, i+1)
	}
}

// SetDraining marks a worker as draining (no new placements) or not.
func (b *Balancer) SetDraining(workerID string, draining bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	w, ok := b.workers[workerID]
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownWorker, workerID)
	}
	w.draining = draining
	return nil
}

// Report records a load report: load in bytes and the number of instances the
// worker hosted when it measured load. It replaces the projection of the
// placements it shows and feeds the cost estimate.
func (b *Balancer) Report(workerID string, load uint64, instances int) error {
	if instances < 0 {
		return fmt.Errorf("balance: report from %q: negative instance count %d", workerID, instances)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	w, ok := b.workers[workerID]
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownWorker, workerID)
	}
	// Learn only from clean growth: a previous report to compare with, more
	// instances than then, and no releases in between.
	if !b.fixed && w.reported && instances > w.repInst && w.released == 0 {
		b.cost.observe(float64(load)-float64(w.load), instances-w.repInst)
	}
	// Placements this report does not show stay pending, but only those made
	// since the previous report: older ones have had a whole period to show
	// up, so they are presumed reflected (or lost) rather than projected on.
	unseen := min(max(w.count-instances, 0), w.fresh+w.carried)
	w.carried = min(unseen, w.fresh)
	w.fresh = 0
	w.released = 0
	w.count = instances + w.carried
	w.load, w.repInst, w.reported = load, instances, true
	return nil
}

// Pick chooses the worker for a new instance and records the placement, so the
// next Pick sees its projected load. The caller must Release the placement if
// creating the instance fails.
func (b *Balancer) Pick() (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(b.ids)
	if n == 0 {
		return "", ErrNoWorkers
	}
	// Scan in id order starting just after the last pick: round-robin takes
	// the first eligible worker, least-load keeps the first of equals, so
	// equal workers take turns and adding or removing one keeps it fair.
	start, found := slices.BinarySearch(b.ids, b.last)
	if found {
		start++
	}
	cost := b.costLocked()
	var best *worker
	var bestLoad uint64
	for i := range n {
		w := b.workers[b.ids[(start+i)%n]]
		if w.draining {
			continue
		}
		if b.opts.Strategy == RoundRobin {
			best = w
			break
		}
		load := w.load
		if b.opts.Project {
			load = w.projected(cost)
		}
		if best == nil || load < bestLoad || load == bestLoad && w.count < best.count {
			best, bestLoad = w, load
		}
	}
	if best == nil {
		return "", ErrNoWorkers
	}
	best.count++
	best.fresh++
	b.last = best.id
	return best.id, nil
}

// Peek chooses the worker for a request that places nothing (an
// Application URL, which the worker then places through Pick): among cands,
// the workers that can serve now, the least projected load, or under
// round-robin the next in turn. Draining workers are skipped. Peeks take
// turns among equals and record nothing else; ok is false when no
// candidate is eligible.
func (b *Balancer) Peek(cands []WorkerLoad) (best WorkerLoad, ok bool) {
	cands = slices.DeleteFunc(slices.Clone(cands), func(w WorkerLoad) bool { return w.Draining })
	if len(cands) == 0 {
		return WorkerLoad{}, false
	}
	best = cands[int(b.peeks.Add(1)%uint64(len(cands)))]
	if b.opts.Strategy != RoundRobin {
		for _, c := range cands {
			if c.Projected < best.Projected {
				best = c
			}
		}
	}
	return best, true
}

// Release records that an instance on workerID went away, whether it was
// removed or its creation failed. A failed creation's projection disappears at
// once; a removed instance's memory is still in the last report, so one less
// projected placement keeps the estimate right in total. Unknown workers are
// ignored (the worker may have been removed first).
func (b *Balancer) Release(workerID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	w, ok := b.workers[workerID]
	if !ok {
		return
	}
	if w.count > 0 {
		w.count--
	}
	w.released++
}

// Snapshot returns every worker's state, sorted by id.
func (b *Balancer) Snapshot() []WorkerLoad {
	b.mu.Lock()
	defer b.mu.Unlock()
	cost := b.costLocked()
	out := make([]WorkerLoad, 0, len(b.ids))
	for _, id := range b.ids {
		w := b.workers[id]
		out = append(out, WorkerLoad{
			ID:                id,
			Reported:          w.load,
			Projected:         w.projected(cost),
			Instances:         w.count,
			ReportedInstances: w.repInst,
			Pending:           w.pending(),
			HasReport:         w.reported,
			Draining:          w.draining,
			Cost:              cost,
		})
	}
	return out
}

// Cost returns the current per-instance cost estimate in bytes.
func (b *Balancer) Cost() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.costLocked()
}

// costLocked is the learned marginal cost, bounded above by the fleet's mean
// load per instance: with non-negative base loads (runtime, browser process)
// the mean can only exceed the marginal cost, so the bound corrects a default
// that is too high as soon as instances exist, before any growth is observed.
func (b *Balancer) costLocked() uint64 {
	c := b.cost.value()
	if b.fixed {
		return c
	}
	var load float64
	var inst int
	for _, w := range b.workers {
		if w.reported && w.repInst > 0 {
			load += float64(w.load)
			inst += w.repInst
		}
	}
	if inst > 0 {
		if avg := load / float64(inst); avg < float64(c) {
			c = uint64(avg)
		}
	}
	return max(c, b.opts.MinCost)
}
