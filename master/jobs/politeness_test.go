package jobs

import (
	"container/heap"
	"context"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/state"
)

// PolitenessHost is one simulated site: its limits and its jobs' duration.
type PolitenessHost struct {
	Limits   Limits
	Duration time.Duration
}

// PolitenessResult is what one simulated run measured, per host and overall.
type PolitenessResult struct {
	PeakConcurrent []int // the most attempts running at once
	MaxStartsInSec []int // the most starts in any one-second window [t, t+1s)
	Total          []time.Duration
	Ideal          []time.Duration // the ideal schedule for the host's limits
	Makespan       time.Duration
	IdealMakespan  time.Duration
	Efficiency     float64 // IdealMakespan / Makespan
	// HostEfficiency is the worst host's Ideal/Total.
	HostEfficiency float64
}

// idealSchedule is the shortest time n jobs of duration d can take under
// l: the last start is no earlier than the rate (or interval) allows, and
// at most Concurrent run at once.
func idealSchedule(n int, l Limits, d time.Duration) time.Duration {
	gap := time.Duration(0)
	if l.StartsPerSec > 0 {
		gap = emitInterval(l.StartsPerSec)
	}
	gap = max(gap, l.Interval)
	burst := max(l.Burst, 1)
	rateBound := time.Duration(max(n-burst, 0))*gap + d
	concBound := d
	if l.Concurrent > 0 {
		concBound = time.Duration((n+l.Concurrent-1)/l.Concurrent) * d
	}
	return max(rateBound, concBound)
}

type simEvent struct {
	at     time.Time
	worker string
	run    wire.JobRun
	host   int
}

type simHeap []simEvent

func (h simHeap) Len() int           { return len(h) }
func (h simHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h simHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *simHeap) Push(x any)        { *h = append(*h, x.(simEvent)) }
func (h *simHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// SimulatePoliteness runs n jobs spread round robin over hosts through a
// queue on a fake clock, with workers×slots job slots and a fake runner
// that ends each attempt after its host's duration, and measures what the
// sites saw. It is the "1,000 URLs over 5 hosts" politeness benchmark.
func SimulatePoliteness(tb testing.TB, n int, hosts []PolitenessHost, workers, slots int) PolitenessResult {
	tb.Helper()
	clk := newClock()
	start := clk.Now()
	var mu sync.Mutex
	var events simHeap
	running := make([]int, len(hosts))
	res := PolitenessResult{PeakConcurrent: make([]int, len(hosts)), MaxStartsInSec: make([]int, len(hosts)),
		Total: make([]time.Duration, len(hosts)), Ideal: make([]time.Duration, len(hosts))}
	starts := make([][]time.Time, len(hosts))
	hostOf := func(u string) int {
		var h int
		fmt.Sscanf(strings.TrimPrefix(u, "http://h"), "%d", &h)
		return h
	}
	r := &runner{}
	r.onRun = func(worker string, run wire.JobRun) {
		mu.Lock()
		defer mu.Unlock()
		h := hostOf(run.Spec.URL)
		now := clk.Now()
		running[h]++
		res.PeakConcurrent[h] = max(res.PeakConcurrent[h], running[h])
		starts[h] = append(starts[h], now)
		heap.Push(&events, simEvent{at: now.Add(hosts[h].Duration), worker: worker, run: run, host: h})
	}
	cfg := DefaultConfig()
	cfg.Clock, cfg.Runner = clk, r
	cfg.LeftoverMax = n
	cfg.Resolver = func(_ context.Context, host string) ([]netip.Addr, error) {
		var h int
		fmt.Sscanf(host, "h%d.test", &h)
		return []netip.Addr{netip.AddrFrom4([4]byte{93, 184, 216, byte(h + 1)})}, nil
	}
	cfg.Robots = func(context.Context, string, string) ([]byte, int, error) { return nil, 404, nil }
	for i, h := range hosts {
		l := h.Limits
		cfg.Classes = append(cfg.Classes, ClassRule{Pattern: fmt.Sprintf("h%d.test", i), Limits: &l})
	}
	st, err := state.Open("")
	if err != nil {
		tb.Fatal(err)
	}
	defer st.Close()
	q, err := New(cfg, st)
	if err != nil {
		tb.Fatal(err)
	}
	for w := range workers {
		q.Workers().Set(fmt.Sprintf("w%d", w), slots)
	}
	specs := make([]wire.JobSpec, n)
	for i := range n {
		specs[i] = wire.JobSpec{Kind: wire.JobCheck, URL: fmt.Sprintf("http://h%d.test/%d", i%len(hosts), i)}
	}
	if _, err := q.SubmitBatch(context.Background(), admitAll(tb, specs)); err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	finished := 0
	for finished < n {
		q.Tick(ctx)
		mu.Lock()
		next := q.NextWake()
		if len(events) > 0 && (next.IsZero() || events[0].at.Before(next)) {
			next = events[0].at
		}
		mu.Unlock()
		if next.IsZero() {
			tb.Fatalf("stalled with %d of %d finished", finished, n)
		}
		if next.After(clk.Now()) {
			clk.Set(next)
		}
		for {
			mu.Lock()
			if len(events) == 0 || events[0].at.After(clk.Now()) {
				mu.Unlock()
				break
			}
			ev := heap.Pop(&events).(simEvent)
			running[ev.host]--
			if d := ev.at.Sub(start); d > res.Total[ev.host] {
				res.Total[ev.host] = d
			}
			mu.Unlock()
			if err := q.Workers().Done(ctx, ev.worker, wire.JobOutcome{ID: ev.run.ID, Attempt: ev.run.Attempt, Check: wire.CheckOK}); err != nil {
				tb.Fatal(err)
			}
			finished++
		}
	}
	for h := range hosts {
		s := starts[h]
		slices.SortFunc(s, func(a, b time.Time) int { return a.Compare(b) })
		for i := range s {
			j := sort.Search(len(s), func(k int) bool { return !s[k].Before(s[i].Add(time.Second)) })
			res.MaxStartsInSec[h] = max(res.MaxStartsInSec[h], j-i)
		}
		per := n / len(hosts)
		if h < n%len(hosts) {
			per++
		}
		res.Ideal[h] = idealSchedule(per, hosts[h].Limits, hosts[h].Duration)
		res.Makespan = max(res.Makespan, res.Total[h])
		res.IdealMakespan = max(res.IdealMakespan, res.Ideal[h])
	}
	res.Efficiency = float64(res.IdealMakespan) / float64(res.Makespan)
	res.HostEfficiency = 1
	for h := range hosts {
		res.HostEfficiency = min(res.HostEfficiency, float64(res.Ideal[h])/float64(res.Total[h]))
	}
	return res
}

// politenessHosts are five sites with different limits (rate-bound,
// concurrency-bound, interval-bound).
var politenessHosts = []PolitenessHost{
	{Limits{Concurrent: 2, StartsPerSec: 1}, time.Second},
	{Limits{Concurrent: 3, StartsPerSec: 5}, time.Second},
	{Limits{Concurrent: 1, StartsPerSec: 10}, 300 * time.Millisecond},
	{Limits{Concurrent: 5, StartsPerSec: 2}, 1500 * time.Millisecond},
	{Limits{Concurrent: 4, StartsPerSec: 3, Interval: 400 * time.Millisecond}, 700 * time.Millisecond},
}

// checkPoliteness fails when a site saw more than its limits allow.
func checkPoliteness(tb testing.TB, res PolitenessResult) {
	tb.Helper()
	for h, p := range politenessHosts {
		l := p.Limits
		maxStarts := int(math.Ceil(l.StartsPerSec))
		if l.Interval > 0 {
			maxStarts = min(maxStarts, int(math.Ceil(float64(time.Second)/float64(l.Interval))))
		}
		if res.PeakConcurrent[h] > l.Concurrent || res.MaxStartsInSec[h] > maxStarts {
			tb.Errorf("host %d: peak %d (limit %d), %d starts in one second (limit %d)",
				h, res.PeakConcurrent[h], l.Concurrent, res.MaxStartsInSec[h], maxStarts)
		}
	}
}

// TestPolitenessSchedule: 1,000 URLs over 5 hosts never exceed any host's
// limits, and finish within 10% of the ideal schedule for those limits.
func TestPolitenessSchedule(t *testing.T) {
	res := SimulatePoliteness(t, 1000, politenessHosts, 4, 8)
	checkPoliteness(t, res)
	for h := range politenessHosts {
		t.Logf("host %d: peak %d/%d, max starts/s %d/%.0f, time %v, ideal %v (%.3f)", h,
			res.PeakConcurrent[h], politenessHosts[h].Limits.Concurrent, res.MaxStartsInSec[h], politenessHosts[h].Limits.StartsPerSec,
			res.Total[h], res.Ideal[h], float64(res.Ideal[h])/float64(res.Total[h]))
	}
	t.Logf("makespan %v, ideal %v, efficiency %.3f (worst host %.3f)", res.Makespan, res.IdealMakespan, res.Efficiency, res.HostEfficiency)
	if res.Efficiency < 0.9 || res.HostEfficiency < 0.9 {
		t.Fatalf("efficiency %.3f, worst host %.3f: want >= 0.9", res.Efficiency, res.HostEfficiency)
	}
}

// BenchmarkPolitenessSchedule reports the efficiency of the schedule and
// the scheduler's own cost per job.
func BenchmarkPolitenessSchedule(b *testing.B) {
	var res PolitenessResult
	for b.Loop() {
		res = SimulatePoliteness(b, 1000, politenessHosts, 4, 8)
	}
	checkPoliteness(b, res)
	b.ReportMetric(res.Efficiency, "efficiency")
	b.ReportMetric(res.HostEfficiency, "worst-host-efficiency")
	b.ReportMetric(res.Makespan.Seconds(), "sim-s")
	b.ReportMetric(res.IdealMakespan.Seconds(), "ideal-s")
}
