package balance

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// op is one step of a scripted scenario; load and insts matter only for
// reports.
type op struct {
	kind  string // add, remove, drain, undrain, report, release, pick
	id    string // worker; for pick, the expected result ("" = ErrNoWorkers)
	load  uint64 // report: MiB
	insts int    // report
}

func add(id string) op     { return op{kind: "add", id: id} }
func remove(id string) op  { return op{kind: "remove", id: id} }
func drain(id string) op   { return op{kind: "drain", id: id} }
func undrain(id string) op { return op{kind: "undrain", id: id} }
func release(id string) op { return op{kind: "release", id: id} }
func pick(want string) op  { return op{kind: "pick", id: want} }
func report(id string, loadMiB uint64, n int) op {
	return op{kind: "report", id: id, load: loadMiB, insts: n}
}

func run(t *testing.T, b *Balancer, ops []op) {
	t.Helper()
	for i, o := range ops {
		var err error
		switch o.kind {
		case "add":
			b.Add(o.id)
		case "remove":
			b.Remove(o.id)
		case "drain", "undrain":
			err = b.SetDraining(o.id, o.kind == "drain")
		case "report":
			err = b.Report(o.id, o.load*mib, o.insts)
		case "release":
			b.Release(o.id)
		case "pick":
			got, perr := b.Pick()
			if o.id == "" {
				if !errors.Is(perr, ErrNoWorkers) {
					t.Fatalf("step %d: Pick() = %q, %v; want ErrNoWorkers", i, got, perr)
				}
			} else if perr != nil || got != o.id {
				t.Fatalf("step %d: Pick() = %q, %v; want %q", i, got, perr, o.id)
			}
		default:
			t.Fatalf("step %d: bad op %q", i, o.kind)
		}
		if err != nil {
			t.Fatalf("step %d (%s %s): %v", i, o.kind, o.id, err)
		}
	}
}

func TestParseStrategy(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Strategy
		ok   bool
	}{
		{"round-robin", RoundRobin, true},
		{"least-load", LeastLoad, true},
		{" Least-Load ", LeastLoad, true},
		{"", "", false},
		{"random", "", false},
	} {
		got, err := ParseStrategy(tc.in)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("ParseStrategy(%q) = %q, %v; want %q, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestNewDefaults(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     Options
		strategy Strategy
		cost     uint64
		minCost  uint64
	}{
		{"zero", Options{}, LeastLoad, DefaultCost, DefaultMinCost},
		{"custom", Options{Strategy: RoundRobin, DefaultCost: 100 * mib, MinCost: 20 * mib}, RoundRobin, 100 * mib, 20 * mib},
		{"min above default", Options{DefaultCost: 4 * mib}, LeastLoad, 4 * mib, 4 * mib},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := New(tc.opts)
			if b.opts.Strategy != tc.strategy || b.Cost() != tc.cost || b.opts.MinCost != tc.minCost {
				t.Errorf("strategy %q cost %d min %d; want %q %d %d",
					b.opts.Strategy, b.Cost(), b.opts.MinCost, tc.strategy, tc.cost, tc.minCost)
			}
		})
	}
	defer func() {
		if recover() == nil {
			t.Error("New with an unknown strategy did not panic")
		}
	}()
	New(Options{Strategy: "random"})
}

func TestRoundRobin(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []op
	}{
		{"in id order", []op{add("b"), add("a"), add("c"),
			pick("a"), pick("b"), pick("c"), pick("a")}},
		{"ignores load", []op{add("a"), add("b"), report("a", 900, 9), report("b", 1, 0),
			pick("a"), pick("b"), pick("a")}},
		{"skips draining", []op{add("a"), add("b"), add("c"), drain("b"),
			pick("a"), pick("c"), pick("a"), undrain("b"), pick("b"), pick("c")}},
		{"skips removed", []op{add("a"), add("b"), add("c"),
			pick("a"), remove("b"), pick("c"), pick("a"), pick("c")}},
		{"removing the last pick keeps the turn", []op{add("a"), add("b"), add("c"),
			pick("a"), pick("b"), remove("b"), pick("c"), pick("a")}},
		{"added worker gets its turn in the same cycle", []op{add("a"), add("c"),
			pick("a"), add("b"), pick("b"), pick("c"), pick("a")}},
		{"worker added behind the cursor waits one cycle", []op{add("b"), add("c"),
			pick("b"), add("a"), pick("c"), pick("a"), pick("b")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run(t, New(Options{Strategy: RoundRobin}), tc.ops)
		})
	}
}

func TestLeastLoad(t *testing.T) {
	for _, tc := range []struct {
		name    string
		project bool
		ops     []op
	}{
		{"picks the lowest", true, []op{add("a"), add("b"), add("c"),
			report("a", 300, 0), report("b", 100, 0), report("c", 200, 0), pick("b")}},
		{"skips a draining lowest", true, []op{add("a"), add("b"),
			report("a", 300, 0), report("b", 100, 0), drain("b"), pick("a")}},
		{"unreported counts as zero", true, []op{add("a"), add("b"),
			report("a", 100, 0), pick("b")}},
		{"naive herds until the next report", false, []op{add("a"), add("b"),
			report("a", 100, 0), report("b", 200, 0),
			pick("a"), pick("a"), pick("a"), pick("a"),
			report("a", 300, 4), pick("b")}},
		{"equal workers share a burst", true, []op{add("a"), add("b"), add("c"),
			pick("a"), pick("b"), pick("c"), pick("a"), pick("b"), pick("c")}},
		{"naive equal loads: fewest instances, then rotation", false, []op{add("a"), add("b"), add("c"),
			pick("a"), pick("b"), pick("c"), pick("a")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run(t, New(Options{Strategy: LeastLoad, Project: tc.project}), tc.ops)
		})
	}
}

// The projection with a known cost: DefaultCost 50 MiB, and the tests report
// no instances before placing, so neither learning nor the fleet bound moves
// it unless a case means to.
func TestProjection(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []op
		// a's expected snapshot afterwards
		projected uint64 // MiB
		pending   int
		instances int
	}{
		{"placement raises the picked worker", []op{pick("a")}, 150, 1, 1},
		{"burst alternates as projections pass", []op{pick("a"), pick("a"), pick("b"), pick("a")}, 250, 3, 3},
		{"report showing the placement replaces the projection",
			[]op{pick("a"), report("a", 130, 1)}, 130, 0, 1},
		{"report taken before the instance existed keeps it pending",
			[]op{pick("a"), report("a", 100, 0)}, 150, 1, 1},
		{"a placement no report shows expires after two reports",
			[]op{pick("a"), report("a", 100, 0), report("a", 100, 0)}, 100, 0, 0},
		{"release of a failed creation undoes the projection",
			[]op{pick("a"), release("a")}, 100, 0, 0},
		{"release of one of two pending, then a report showing the other",
			[]op{pick("a"), pick("a"), release("a"), report("a", 140, 1)}, 140, 0, 1},
		{"release of a reported instance nets against a new placement",
			[]op{report("a", 150, 2), release("a"), pick("a")}, 150, 0, 2},
		{"removals the report does not show are not subtracted",
			[]op{report("a", 200, 2), release("a"), release("a")}, 200, 0, 0},
		{"instances the master never placed resync the count",
			[]op{report("a", 180, 3), pick("a")}, 230, 1, 4},
		{"instances that vanished without release resync the count",
			[]op{pick("a"), report("a", 150, 1), report("a", 100, 0)}, 100, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := New(Options{Strategy: LeastLoad, Project: true, DefaultCost: 50 * mib})
			b.fixed = true
			run(t, b, append([]op{add("a"), add("b"), report("a", 100, 0), report("b", 200, 0)}, tc.ops...))
			a := b.Snapshot()[0]
			if a.Projected != tc.projected*mib || a.Pending != tc.pending || a.Instances != tc.instances {
				t.Errorf("a: projected %d MiB pending %d instances %d; want %d, %d, %d",
					a.Projected/mib, a.Pending, a.Instances, tc.projected, tc.pending, tc.instances)
			}
		})
	}
}

func TestSnapshot(t *testing.T) {
	b := New(Options{Strategy: LeastLoad, Project: true, DefaultCost: 50 * mib})
	run(t, b, []op{add("b"), add("a"), report("a", 100, 0), drain("b"), pick("a"), pick("a")})
	want := []WorkerLoad{
		{ID: "a", Reported: 100 * mib, Projected: 200 * mib, Instances: 2, Pending: 2, HasReport: true, Cost: 50 * mib},
		{ID: "b", Draining: true, Cost: 50 * mib},
	}
	if got := b.Snapshot(); !slices.Equal(got, want) {
		t.Errorf("Snapshot() =\n%+v\nwant\n%+v", got, want)
	}
}

func TestCostLearning(t *testing.T) {
	for _, tc := range []struct {
		name     string
		trueCost float64 // MiB per instance
		noise    float64 // ± fraction per instance
		perStep  int     // instances added between two reports
	}{
		{"down to a lighter app", 40, 0.2, 4},
		{"up to a heavier app", 120, 0.2, 4},
		{"one instance per report", 40, 0.2, 1},
		{"large steps", 40, 0.2, 20},
		{"tiny instances", 12, 0.1, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := New(Options{Strategy: LeastLoad, Project: true})
			b.Add("w")
			rng := rand.New(rand.NewPCG(7, 0))
			load, n := 300.0*mib, 0 // a base load the fleet bound must not confuse
			for range 40 {
				if err := b.Report("w", uint64(load), n); err != nil {
					t.Fatal(err)
				}
				for range tc.perStep {
					load += tc.trueCost * mib * (1 + tc.noise*(2*rng.Float64()-1))
					n++
				}
			}
			got := float64(b.Cost()) / mib
			// Erring high is by design; erring low is not.
			if got < 0.95*tc.trueCost || got > 1.15*tc.trueCost {
				t.Errorf("learned %.1f MiB; true cost %.1f MiB", got, tc.trueCost)
			}
		})
	}
}

func TestCostResistsOutliers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		dLoad   int64 // MiB, over one interval adding 2 instances
		atLeast uint64
		atMost  uint64
	}{
		{"GC drop", -300, 24, 48},
		{"spike", 2000, 48, 96},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := New(Options{Strategy: LeastLoad, Project: true})
			run(t, b, []op{add("w"), report("w", 1000, 0)})
			run(t, b, []op{report("w", uint64(1000+tc.dLoad), 2)})
			c := b.Cost() / mib
			if c < tc.atLeast || c > tc.atMost {
				t.Errorf("cost after one %s = %d MiB; want within [%d, %d]", tc.name, c, tc.atLeast, tc.atMost)
			}
		})
	}
}

func TestCostNotLearnedFromReleases(t *testing.T) {
	b := New(Options{Strategy: LeastLoad, Project: true})
	// +3 placed, -2 released (memory not yet freed): Δload/Δn would say 120 MiB.
	run(t, b, []op{add("w"), report("w", 1000, 10), release("w"), release("w"), report("w", 1120, 11)})
	if c := b.Cost(); c != DefaultCost {
		t.Errorf("cost = %d MiB; want the default %d MiB", c/mib, DefaultCost/mib)
	}
}

func TestFleetBound(t *testing.T) {
	// 8 MiB per instance on average, base load included: the 48 MiB default
	// must give way before any growth is observed.
	b := New(Options{Strategy: LeastLoad, Project: true})
	run(t, b, []op{add("a"), add("b"), report("a", 400, 50), report("b", 400, 50)})
	if c := b.Cost(); c != DefaultMinCost {
		t.Errorf("cost = %d MiB; want %d MiB", c/mib, DefaultMinCost/mib)
	}
	b = New(Options{Strategy: LeastLoad, Project: true})
	run(t, b, []op{add("a"), report("a", 2000, 100)})
	if c := b.Cost(); c != 20*mib {
		t.Errorf("cost = %d MiB; want 20 MiB", c/mib)
	}
}

func TestNoWorkers(t *testing.T) {
	for _, strategy := range []Strategy{RoundRobin, LeastLoad} {
		for _, tc := range []struct {
			name string
			ops  []op
		}{
			{"empty", []op{pick("")}},
			{"all draining", []op{add("a"), add("b"), drain("a"), drain("b"), pick(""), undrain("b"), pick("b")}},
			{"all removed", []op{add("a"), pick("a"), remove("a"), pick("")}},
		} {
			t.Run(string(strategy)+"/"+tc.name, func(t *testing.T) {
				run(t, New(Options{Strategy: strategy, Project: true}), tc.ops)
			})
		}
	}
}

func TestUnknownWorker(t *testing.T) {
	b := New(Options{Project: true})
	b.Add("a")
	b.Remove("a")
	if err := b.Report("a", 1, 0); !errors.Is(err, ErrUnknownWorker) {
		t.Errorf("Report: %v; want ErrUnknownWorker", err)
	}
	if err := b.SetDraining("x", true); !errors.Is(err, ErrUnknownWorker) {
		t.Errorf("SetDraining: %v; want ErrUnknownWorker", err)
	}
	// Release and Remove race with a worker's departure, so they are no-ops.
	b.Release("x")
	b.Remove("x")
	b.Add("a")
	if err := b.Report("a", 1, -1); err == nil {
		t.Error("Report with a negative instance count succeeded")
	}
	if s := b.Snapshot(); len(s) != 1 || s[0].HasReport {
		t.Errorf("Snapshot after re-add = %+v; want one fresh worker", s)
	}
}

func TestConcurrent(t *testing.T) {
	b := New(Options{Strategy: LeastLoad, Project: true})
	for i := range 4 {
		b.Add(fmt.Sprintf("w%d", i))
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			id := fmt.Sprintf("w%d", g%4)
			for i := range 500 {
				switch i % 5 {
				case 0:
					if err := b.Report(id, uint64(i)*mib, i/10); err != nil {
						t.Error(err)
					}
				case 1:
					b.Release(id)
				case 2:
					_ = b.Snapshot()
				default:
					if _, err := b.Pick(); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Go(func() {
		for range 200 {
			b.Add("extra")
			_ = b.SetDraining("w0", true)
			_ = b.SetDraining("w0", false)
			b.Remove("extra")
		}
	})
	wg.Wait()
	for _, w := range b.Snapshot() {
		if w.Instances < 0 || w.Pending < 0 || w.Pending > w.Instances {
			t.Errorf("inconsistent state %+v", w)
		}
	}
}

func TestPeek(t *testing.T) {
	a, b, c := WorkerLoad{ID: "a", Projected: 30}, WorkerLoad{ID: "b", Projected: 10}, WorkerLoad{ID: "c", Projected: 10}
	drained := WorkerLoad{ID: "d", Projected: 0, Draining: true}
	tests := []struct {
		name     string
		strategy Strategy
		cands    []WorkerLoad
		want     []string // ids of successive peeks; nil: none eligible
	}{
		{"none", LeastLoad, nil, nil},
		{"only draining", RoundRobin, []WorkerLoad{drained}, nil},
		{"round-robin takes turns", RoundRobin, []WorkerLoad{a, b, c, drained}, []string{"b", "c", "a", "b"}},
		{"least load, equals take turns", LeastLoad, []WorkerLoad{a, b, c, drained}, []string{"b", "c", "b", "b"}},
		{"least load, one", LeastLoad, []WorkerLoad{a}, []string{"a", "a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bal := New(Options{Strategy: tt.strategy})
			if tt.want == nil {
				if w, ok := bal.Peek(tt.cands); ok {
					t.Fatalf("Peek = %v, want none", w.ID)
				}
				return
			}
			var got []string
			for range tt.want {
				w, ok := bal.Peek(tt.cands)
				if !ok {
					t.Fatal("Peek found none")
				}
				got = append(got, w.ID)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("peeks %v, want %v", got, tt.want)
			}
			if len(bal.Snapshot()) != 0 {
				t.Error("Peek registered workers")
			}
		})
	}
}
