package master

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cloudbrowser-go/cloudbrowser/internal/metrics"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/auth"
	"github.com/cloudbrowser-go/cloudbrowser/master/registry"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// masterMetrics are the master's own instruments; the rest is read from
// the components at scrape time.
type masterMetrics struct {
	reg        *prometheus.Registry
	placements *prometheus.CounterVec
	lookups    *prometheus.HistogramVec
	members    *prometheus.CounterVec
	logins     *prometheus.CounterVec
	lockouts   *prometheus.CounterVec
	refusals   *prometheus.CounterVec
}

func newMasterMetrics() *masterMetrics {
	mm := &masterMetrics{
		reg: metrics.NewRegistry(),
		placements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cloudbrowser_master_placements_total",
			Help: "Placement requests, by the app's strategy and outcome (created, existing, failed).",
		}, []string{"strategy", "outcome"}),
		lookups: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cloudbrowser_master_route_lookup_seconds",
			Help:    "Route lookups answered for the proxies, by kind (app, instance), and how long they took.",
			Buckets: []float64{.00001, .00003, .0001, .0003, .001, .003, .01, .03, .1},
		}, []string{"kind"}),
		members: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cloudbrowser_membership_events_total",
			Help: "Gossip membership events, by member role and event (joined, updated, left, failed).",
		}, []string{"role", "event"}),
		logins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cloudbrowser_master_logins_total",
			Help: "Login checks for the workers, by outcome (ok, failed, locked: refused unchecked during a lockout).",
		}, []string{"outcome"}),
		lockouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cloudbrowser_master_login_lockouts_total",
			Help: "Lockouts started after repeated failed logins, by key (user: a user name, ip: a client address).",
		}, []string{"by"}),
		refusals: metrics.QuotaRefusals(),
	}
	// Known label values start at 0, so rate() and alerts see them at once.
	for _, o := range []string{auth.LoginOK, auth.LoginFailed, auth.LoginLocked} {
		mm.logins.WithLabelValues(o)
	}
	for _, by := range []string{"user", "ip"} {
		mm.lockouts.WithLabelValues(by)
	}
	for _, l := range []string{wire.QuotaInstancesPerUser, wire.QuotaInstancesPerIP, wire.QuotaNewIdentities} {
		mm.refusals.WithLabelValues(l)
	}
	mm.reg.MustRegister(mm.placements, mm.lookups, mm.members, mm.logins, mm.lockouts, mm.refusals)
	return mm
}

// readFrom adds the collectors that read the master's state: the workers'
// loads, the table's and the apps' sizes, the RMI node's calls.
func (mm *masterMetrics) readFrom(workers *registry.Registry, apps *AppManager, node *rmi.Node) {
	g := prometheus.GaugeValue
	wl := []string{"worker"}
	perWorker := func(name, help string, typ prometheus.ValueType, val func(w registry.WorkerView) float64) prometheus.Collector {
		return metrics.NewFunc(name, help, typ, wl, func() []metrics.Sample {
			var out []metrics.Sample
			for _, w := range workers.Views() {
				out = append(out, metrics.Sample{Labels: []string{w.ID}, Value: val(w)})
			}
			return out
		})
	}
	mm.reg.MustRegister(
		metrics.NewFunc("cloudbrowser_worker_load_bytes", "Reported worker load, by part (total, go_heap, browser_pss).", g,
			[]string{"worker", "part"}, func() []metrics.Sample {
				var out []metrics.Sample
				for _, w := range workers.Views() {
					out = append(out,
						metrics.Sample{Labels: []string{w.ID, "total"}, Value: float64(w.Load.Total)},
						metrics.Sample{Labels: []string{w.ID, "go_heap"}, Value: float64(w.Load.GoHeap)},
						metrics.Sample{Labels: []string{w.ID, "browser_pss"}, Value: float64(w.Load.BrowserPSS)})
				}
				return out
			}),
		perWorker("cloudbrowser_worker_projected_load_bytes", "Load the balancer uses for the worker: reported plus projected placements.", g,
			func(w registry.WorkerView) float64 { return float64(w.Projected) }),
		perWorker("cloudbrowser_worker_instances", "App instances on the worker (last report).", g, func(w registry.WorkerView) float64 { return float64(w.Load.Instances) }),
		perWorker("cloudbrowser_worker_browsers", "Virtual browsers on the worker (last report).", g, func(w registry.WorkerView) float64 { return float64(w.Load.Browsers) }),
		perWorker("cloudbrowser_worker_clients", "Client engines connected to the worker (last report).", g, func(w registry.WorkerView) float64 { return float64(w.Load.Clients) }),
		perWorker("cloudbrowser_worker_frames_sent_total", "Screencast frames sent to clients (last report).", prometheus.CounterValue,
			func(w registry.WorkerView) float64 { return float64(w.Load.FramesSent) }),
		perWorker("cloudbrowser_worker_frames_dropped_total", "Frames replaced before a slow client took them (last report).", prometheus.CounterValue,
			func(w registry.WorkerView) float64 { return float64(w.Load.FramesDropped) }),
		perWorker("cloudbrowser_worker_draining", "1 if the worker gets no new instances.", g, func(w registry.WorkerView) float64 {
			if w.Draining {
				return 1
			}
			return 0
		}),
		metrics.One("cloudbrowser_master_workers", "Workers registered and connected.", g, func() float64 { return float64(len(workers.Views())) }),
		metrics.One("cloudbrowser_master_instances", "App instances in the table.", g, func() float64 { return float64(workers.InstanceCount()) }),
		metrics.One("cloudbrowser_master_apps", "Applications deployed.", g, func() float64 { return float64(len(apps.List())) }),
	)
	mm.reg.MustRegister(metrics.RMI(node)...)
}

// Lookup, Placed and Refused feed the registry's observations in
// (registry.Observer).
func (mm *masterMetrics) Lookup(kind string, start time.Time) {
	mm.lookups.WithLabelValues(kind).Observe(time.Since(start).Seconds())
}

func (mm *masterMetrics) Placed(strategy, outcome string) {
	mm.placements.WithLabelValues(strategy, outcome).Inc()
}

func (mm *masterMetrics) Refused(limit string) { mm.refusals.WithLabelValues(limit).Inc() }
