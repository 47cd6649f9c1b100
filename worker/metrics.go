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
	reg.MustRegister(
		newLoadCollector(w),
		metrics.One("cloudbrowser_screencast_frames_total", "Screencast frames painted while watched.", c, func() float64 { return float64(w.counters.Stats().Produced) }),
		metrics.One("cloudbrowser_screencast_frames_sent_total", "Frame messages sent to clients.", c, func() float64 { return float64(w.counters.Stats().Sent) }),
		metrics.One("cloudbrowser_screencast_frames_dropped_total", "Frames replaced by a newer one before a slow client took them.", c,
			func() float64 { return float64(w.counters.Stats().Dropped) }),
		metrics.One("cloudbrowser_screencast_frames_held_total", "Times a frame waited for its client to acknowledge earlier ones (pacing).", c,
			func() float64 { return float64(w.counters.Stats().Held) }),
		metrics.One("cloudbrowser_screencast_acks_total", "Frame acknowledgements received from client engines.", c,
			func() float64 { return float64(w.counters.Stats().Acks) }),
		metrics.One("cloudbrowser_input_events_total", "Input events dispatched to virtual browsers.", c, func() float64 { return float64(w.counters.Stats().Inputs) }),
		metrics.One("cloudbrowser_browsers_released_idle_total", "Virtual browsers released (given back to their pool) after the app's idleTimeout without a client.", c,
			func() float64 { return float64(w.idleReleased.Load()) }),
		metrics.One("cloudbrowser_browsers_resting", "Virtual browsers resting now: no client for RestAfter, page hidden.", g,
			func() float64 { return float64(w.counters.Stats().Resting) }),
		metrics.One("cloudbrowser_browser_rests_total", "Times a browser without a client started resting.", c, func() float64 { return float64(w.counters.Stats().Rests) }),
		metrics.One("cloudbrowser_browser_wakes_total", "Times a resting browser was woken (a client came, or it went back to its pool).", c,
			func() float64 { return float64(w.counters.Stats().Wakes) }),
		metrics.One("cloudbrowser_screencast_scroll_restarts_total", "Screencasts restarted because their last frame missed where the page was scrolled (Chromium dropped it).", c,
			func() float64 { return float64(w.counters.Stats().ScrollRestarts) }),
		metrics.One("cloudbrowser_screencast_frame_scale", "Scale of the screencast frames now (1 = full size; smaller while input→frame latency is high, worker/grade).", g,
			func() float64 { return w.grade.Scale() }),
		metrics.One("cloudbrowser_screencast_link_graded_browsers", "Browsers whose frames are smaller and coarser because even their best-connected viewer takes over 250 ms per frame.", g,
			func() float64 { return float64(w.counters.Stats().LinkGraded) }),
		metrics.One("cloudbrowser_input_events_ignored_total", "Input events ignored (read-only clients).", c, func() float64 { return float64(w.counters.Stats().Ignored) }),
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
	// poolCounts is a by-pool-and-key family from a count map of each pool.
	poolCounts := func(counts func(p poolRow) map[string]int64) func() []metrics.Sample {
		return func() []metrics.Sample {
			var out []metrics.Sample
			for _, p := range w.poolRows() {
				for k, n := range counts(p) {
					out = append(out, metrics.Sample{Labels: []string{p.name, k}, Value: float64(n)})
				}
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
		metrics.NewFunc("cloudbrowser_pool_returns_total", "Leased browsers given back to a pool.", c, pl, poolSamples(func(p poolRow) float64 { return float64(p.Returns) })),
		metrics.NewFunc("cloudbrowser_pool_backs_total", "Back sequences that made a returned browser ready again.", c, pl, poolSamples(func(p poolRow) float64 { return float64(p.Backs) })),
		metrics.NewFunc("cloudbrowser_pool_expired_total", "Free browsers past their TTL destroyed instead of leased.", c, pl, poolSamples(func(p poolRow) float64 { return float64(p.Expired) })),
		metrics.NewFunc("cloudbrowser_pool_lease_failures_total", "Leases that failed, by pool and reason.", c, []string{"pool", "reason"},
			poolCounts(func(p poolRow) map[string]int64 { return p.LeaseFailures })),
		metrics.NewFunc("cloudbrowser_pool_sequence_failures_total", "Sequences that failed, by pool and sequence.", c, []string{"pool", "sequence"},
			poolCounts(func(p poolRow) map[string]int64 { return p.SequenceFailures })),
		w.leaseSeconds,
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

// loadCollector exports the worker's load with one measurement (a walk of
// /proc for Chromium's processes) per scrape for all its families.
type loadCollector struct {
	w                                   *Worker
	load, insts, browsers, clients, blk *prometheus.Desc
	resizeRestarts                      *prometheus.Desc
}

func newLoadCollector(w *Worker) *loadCollector {
	return &loadCollector{w: w,
		load:     prometheus.NewDesc("cloudbrowser_worker_local_load_bytes", "This worker's load, by part (go_heap, browser_pss).", []string{"part"}, nil),
		insts:    prometheus.NewDesc("cloudbrowser_worker_local_instances", "App instances hosted.", nil, nil),
		browsers: prometheus.NewDesc("cloudbrowser_worker_local_browsers", "Virtual browsers open.", nil, nil),
		clients:  prometheus.NewDesc("cloudbrowser_worker_local_clients", "Client engines connected.", nil, nil),
		blk:      prometheus.NewDesc("cloudbrowser_navigation_blocked_total", "Requests of virtual browsers denied by their app's navigation policy.", nil, nil),
		resizeRestarts: prometheus.NewDesc("cloudbrowser_screencast_resize_restarts_total",
			"Screencasts restarted because a resized page sent no frame of its new size in time.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *loadCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.load, c.insts, c.browsers, c.clients, c.blk, c.resizeRestarts} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *loadCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	l, st := c.w.measure(ctx)
	g := prometheus.GaugeValue
	ch <- prometheus.MustNewConstMetric(c.load, g, float64(l.GoHeap), "go_heap")
	ch <- prometheus.MustNewConstMetric(c.load, g, float64(l.BrowserPSS), "browser_pss")
	ch <- prometheus.MustNewConstMetric(c.insts, g, float64(l.Instances))
	ch <- prometheus.MustNewConstMetric(c.browsers, g, float64(l.Browsers))
	ch <- prometheus.MustNewConstMetric(c.clients, g, float64(l.Clients))
	ch <- prometheus.MustNewConstMetric(c.blk, prometheus.CounterValue, float64(st.Blocked))
	ch <- prometheus.MustNewConstMetric(c.resizeRestarts, prometheus.CounterValue, float64(st.ResizeRestarts))
}
