package worker

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cloudbrowser-go/cloudbrowser/internal/metrics"
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
	return reg
}
