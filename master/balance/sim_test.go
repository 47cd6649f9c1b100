package balance

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// The burst simulation: placements arrive one per step on workers with
// unequal starting loads; every instance really costs a hidden, noisy amount;
// each worker reports its true load only every reportEvery steps, at its own
// phase. It is deterministic (fixed seeds), so its outcome can be asserted.

type simScenario struct {
	name        string
	workers     int
	placements  int
	reportEvery int     // steps between two reports of one worker
	lag         int     // steps before a placed instance shows in its worker's reports
	meanCost    float64 // true bytes per instance (hidden from the balancer)
	noise       float64 // ± fraction of meanCost, uniform
}

type simStrategy struct {
	name  string
	opts  Options
	fixed bool // do not learn: the paper's constant projection
}

type simResult struct {
	maxOverMean float64 // max/mean of final true loads; 1.0 is perfect
	maxInst     int     // instances on the busiest worker
	maxRun      int     // longest run of consecutive placements on one worker
	cost        uint64  // the balancer's cost estimate at the end
}

var simScenarios = []simScenario{
	// The brief's model: reports every 3 s, placements at ~100/s, compressed
	// to a report every 30 placements per worker.
	{name: "stale30", workers: 8, placements: 500, reportEvery: 30, meanCost: 40 * mib, noise: 0.2},
	// Literally 3 s at 100/s: each worker reports about once in the burst.
	{name: "stale300", workers: 8, placements: 500, reportEvery: 300, meanCost: 40 * mib, noise: 0.2},
	// Heavy app: instances cost 3× the default estimate.
	{name: "heavy", workers: 8, placements: 500, reportEvery: 30, meanCost: 150 * mib, noise: 0.2},
	// Instance creation takes 15 steps (150 ms) before reports show it.
	{name: "lag15", workers: 8, placements: 500, reportEvery: 30, lag: 15, meanCost: 40 * mib, noise: 0.2},
}

var simStrategies = []simStrategy{
	{name: "round-robin", opts: Options{Strategy: RoundRobin}},
	{name: "naive", opts: Options{Strategy: LeastLoad}},
	{name: "fixed10MB", opts: Options{Strategy: LeastLoad, Project: true, DefaultCost: 10e6, MinCost: 10e6}, fixed: true},
	{name: "projected", opts: Options{Strategy: LeastLoad, Project: true}},
}

func simulate(sc simScenario, st simStrategy, seed uint64) simResult {
	b := New(st.opts)
	b.fixed = st.fixed
	rng := rand.New(rand.NewPCG(seed, 0))

	type instance struct {
		ready int // step from which reports include it
		cost  float64
	}
	ids := make([]string, sc.workers)
	base := make([]float64, sc.workers)
	placed := make([][]instance, sc.workers)
	index := map[string]int{}
	for i := range ids {
		ids[i] = fmt.Sprintf("w%d", i)
		base[i] = float64(100+50*i) * mib
		index[ids[i]] = i
		b.Add(ids[i])
		// Workers were up before the burst, so the master knows their loads.
		if err := b.Report(ids[i], uint64(base[i]), 0); err != nil {
			panic(err)
		}
	}
	// trueLoad is what worker i would report at step t.
	trueLoad := func(i, t int) (uint64, int) {
		load, n := base[i], 0
		for _, in := range placed[i] {
			if in.ready <= t {
				load += in.cost
				n++
			}
		}
		return uint64(load), n
	}

	var res simResult
	run, prev := 0, -1
	for t := range sc.placements {
		for i := range ids {
			if t%sc.reportEvery == i*sc.reportEvery/sc.workers {
				load, n := trueLoad(i, t)
				if err := b.Report(ids[i], load, n); err != nil {
					panic(err)
				}
			}
		}
		id, err := b.Pick()
		if err != nil {
			panic(err)
		}
		i := index[id]
		// Drawn in placement order whatever the strategy, so every strategy
		// faces the same sequence of instance costs.
		cost := sc.meanCost * (1 + sc.noise*(2*rng.Float64()-1))
		placed[i] = append(placed[i], instance{ready: t + 1 + sc.lag, cost: cost})
		if i == prev {
			run++
		} else {
			run, prev = 1, i
		}
		res.maxRun = max(res.maxRun, run)
	}

	var sum, top float64
	for i := range ids {
		load, n := trueLoad(i, sc.placements+sc.lag)
		sum += float64(load)
		top = max(top, float64(load))
		res.maxInst = max(res.maxInst, n)
	}
	res.maxOverMean = top / (sum / float64(sc.workers))
	res.cost = b.Cost()
	return res
}

const simSeed = 1

// TestBurstSimulation logs the results table and asserts the behaviour the
// projection exists for. The simulation is deterministic, so these are not
// timing assertions.
func TestBurstSimulation(t *testing.T) {
	var tbl strings.Builder
	fmt.Fprintf(&tbl, "\n| scenario | strategy | max/mean | max inst | max run | cost MiB |\n|---|---|---|---|---|---|\n")
	for _, sc := range simScenarios {
		for _, st := range simStrategies {
			r := simulate(sc, st, simSeed)
			fmt.Fprintf(&tbl, "| %s | %s | %.3f | %d | %d | %.1f |\n",
				sc.name, st.name, r.maxOverMean, r.maxInst, r.maxRun, float64(r.cost)/mib)
		}
	}
	t.Log(tbl.String())

	for _, sc := range simScenarios {
		for seed := uint64(1); seed <= 5; seed++ {
			naive := simulate(sc, simStrategies[1], seed)
			proj := simulate(sc, simStrategies[3], seed)
			if proj.maxOverMean >= naive.maxOverMean {
				t.Errorf("%s seed %d: projected max/mean %.3f not below naive %.3f",
					sc.name, seed, proj.maxOverMean, naive.maxOverMean)
			}
			if proj.maxOverMean > 1.05 {
				t.Errorf("%s seed %d: projected max/mean %.3f > 1.05", sc.name, seed, proj.maxOverMean)
			}
		}
	}
}

// BenchmarkBurst reports the simulation's quality metrics; ns/op is the cost
// of one whole burst (500 picks plus the reports).
//
//	go test ./master/balance -run=^$ -bench=Burst
func BenchmarkBurst(b *testing.B) {
	for _, sc := range simScenarios {
		for _, st := range simStrategies {
			b.Run(sc.name+"/"+st.name, func(b *testing.B) {
				var r simResult
				for b.Loop() {
					r = simulate(sc, st, simSeed)
				}
				b.ReportMetric(r.maxOverMean, "max/mean")
				b.ReportMetric(float64(r.maxInst), "max-inst")
				b.ReportMetric(float64(r.maxRun), "max-run")
				b.ReportMetric(float64(r.cost)/mib, "cost-MiB")
			})
		}
	}
}
