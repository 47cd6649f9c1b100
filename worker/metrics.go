package worker

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cloudbrowser-go/cloudbrowser/internal/metrics"
	"github.com/cloudbrowser-go/cloudbrowser/worker/pool"
)

// newMetrics builds the worker's registry: its load as reported to the
// master, frames, input and RMI counters.
func (w *Worker) newMetrics() *prometheus.Registry {
	reg := metrics.NewRegistry()
	g, c := prometheus.GaugeValue, prometheus.CounterValue
	load := func() (l struct{ heap, pss, insts, browsers, clients float64 }) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		r := w.load(ctx)
		l.heap, l.pss = float64(r.GoHeap), float64(r.BrowserPSS)
		l.insts, l.browsers, l.clients = float64(r.Instances), float64(r.Browsers), float64(r.Clients)
		return l
	}
	reg.MustRegister(
		metrics.NewFunc("cloudbrowser_worker_local_load_bytes", "This worker's load, by part (go_heap, browser_pss).", g,
			[]string{"part"}, func() []metrics.Sample {
				l := load()
				return []metrics.Sample{{Labels: []string{"go_heap"}, Value: l.heap}, {Labels: []string{"browser_pss"}, Value: l.pss}}
			}),
		metrics.One("cloudbrowser_worker_local_instances", "App instances hosted.", g, func() float64 { return load().insts }),
		metrics.One("cloudbrowser_worker_local_browsers", "Virtual browsers open.", g, func() float64 { return load().browsers }),
		metrics.One("cloudbrowser_worker_local_clients", "Client engines connected.", g, func() float64 { return load().clients }),
		metrics.One("cloudbrowser_screencast_frames_total", "Screencast frames painted while watched.", c, func() float64 { return float64(w.frames.snapshot().Produced) }),
		metrics.One("cloudbrowser_screencast_frames_sent_total", "Frame messages sent to clients.", c, func() float64 { return float64(w.frames.snapshot().Sent) }),
		metrics.One("cloudbrowser_screencast_frames_dropped_total", "Frames replaced by a newer one before a slow client took them.", c,
			func() float64 { return float64(w.frames.snapshot().Dropped) }),
		metrics.One("cloudbrowser_input_events_total", "Input events dispatched to virtual browsers.", c, func() float64 { return float64(w.frames.inputs.Load()) }),
		metrics.One("cloudbrowser_input_events_ignored_total", "Input events ignored (read-only clients).", c, func() float64 { return float64(w.frames.ignored.Load()) }),
	)
	poolSamples := func(val func(p poolRow) float64) func() []metrics.Sample {
		return func() []metrics.Sample {
			var out []metrics.Sample
			for _, p := range w.poolRows() {
				out = append(out, metrics.Sample{Labels: []string{p.name}, Value: val(p)})
			}
			return out
		}
	}
	pl := []string{"pool"}
	reg.MustRegister(
		metrics.NewFunc("cloudbrowser_pool_browsers", "Browsers in a pool (free, leased or being prepared).", g, pl, poolSamples(func(p poolRow) float64 { return float64(p.Size) })),
		metrics.NewFunc("cloudbrowser_pool_free_browsers", "Free browsers in a pool.", g, pl, poolSamples(func(p poolRow) float64 { return float64(p.Free) })),
		metrics.NewFunc("cloudbrowser_pool_leased_browsers", "Leased browsers in a pool.", g, pl, poolSamples(func(p poolRow) float64 { return float64(p.Locked) })),
		metrics.NewFunc("cloudbrowser_pool_created_total", "Browsers a pool created.", c, pl, poolSamples(func(p poolRow) float64 { return float64(p.Created) })),
		metrics.NewFunc("cloudbrowser_pool_destroyed_total", "Browsers a pool destroyed.", c, pl, poolSamples(func(p poolRow) float64 { return float64(p.Destroyed) })),
		metrics.NewFunc("cloudbrowser_pool_shifted_total", "Browsers shifted from the general pool into a specific pool.", c, pl, poolSamples(func(p poolRow) float64 { return float64(p.ShiftedIn) })),
		metrics.NewFunc("cloudbrowser_pool_leases_total", "Leases served by a pool.", c, pl, poolSamples(func(p poolRow) float64 { return float64(p.Leases) })),
		metrics.NewFunc("cloudbrowser_pool_lease_failures_total", "Leases that failed, by pool and reason.", c, []string{"pool", "reason"}, func() []metrics.Sample {
			var out []metrics.Sample
			for _, p := range w.poolRows() {
				for r, n := range p.LeaseFailures {
					out = append(out, metrics.Sample{Labels: []string{p.name, r}, Value: float64(n)})
				}
			}
			return out
		}),
		metrics.NewFunc("cloudbrowser_pool_sequence_failures_total", "Sequences that failed, by pool and sequence.", c, []string{"pool", "sequence"}, func() []metrics.Sample {
			var out []metrics.Sample
			for _, p := range w.poolRows() {
				for q, n := range p.SequenceFailures {
					out = append(out, metrics.Sample{Labels: []string{p.name, q}, Value: float64(n)})
				}
			}
			return out
		}),
		w.leaseSeconds,
		metrics.One("cloudbrowser_navigation_blocked_total", "Requests of virtual browsers denied by their app's navigation policy.", c, func() float64 {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			st, _ := w.runtime.Stats(ctx)
			return float64(st.Blocked)
		}),
	)
	return reg
}

// poolRow is one pool's statistics with a label name.
type poolRow struct {
	name string
	pool.Stats
}

func (w *Worker) poolRows() []poolRow {
	if w.pools == nil {
		return nil
	}
	st := w.pools.Stats()
	out := make([]poolRow, 0, len(st.Pools))
	for _, p := range st.Pools {
		name := p.App
		if p.General {
			name = "(general)"
		}
		out = append(out, poolRow{name: name, Stats: p})
	}
	return out
}
