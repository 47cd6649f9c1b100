// Package metrics holds the Prometheus plumbing shared by master, workers
// and proxies: one registry per process with the Go and process
// collectors, and collectors that read the components' own counters at
// scrape time (so hot paths keep their cheap atomics).
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// NewRegistry returns a registry with the Go runtime and process metrics.
func NewRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// Handler serves the registry in the Prometheus text format.
func Handler(r *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(r, promhttp.HandlerOpts{Registry: r})
}

// Sample is one value of a Func collector.
type Sample struct {
	Labels []string
	Value  float64
}

// Func is a collector whose samples come from a function at scrape time.
type Func struct {
	desc *prometheus.Desc
	typ  prometheus.ValueType
	fn   func() []Sample
}

// NewFunc describes a metric family read by fn.
func NewFunc(name, help string, typ prometheus.ValueType, labels []string, fn func() []Sample) *Func {
	return &Func{desc: prometheus.NewDesc(name, help, labels, nil), typ: typ, fn: fn}
}

// Describe implements prometheus.Collector.
func (f *Func) Describe(ch chan<- *prometheus.Desc) { ch <- f.desc }

// Collect implements prometheus.Collector.
func (f *Func) Collect(ch chan<- prometheus.Metric) {
	for _, s := range f.fn() {
		m, err := prometheus.NewConstMetric(f.desc, f.typ, s.Value, s.Labels...)
		if err == nil {
			ch <- m
		}
	}
}

// One is a Func with a single unlabelled sample.
func One(name, help string, typ prometheus.ValueType, fn func() float64) *Func {
	return NewFunc(name, help, typ, nil, func() []Sample { return []Sample{{Value: fn()}} })
}

// RMI exports a node's call counters.
func RMI(n *rmi.Node) []prometheus.Collector {
	dir := []string{"direction"}
	return []prometheus.Collector{
		NewFunc("cloudbrowser_rmi_calls_total", "RMI calls, by direction (in: run for a peer, out: made to a peer).",
			prometheus.CounterValue, dir, func() []Sample {
				s := n.Stats()
				return []Sample{{[]string{"in"}, float64(s.CallsIn)}, {[]string{"out"}, float64(s.CallsOut)}}
			}),
		NewFunc("cloudbrowser_rmi_errors_total", "RMI calls that failed, by direction.",
			prometheus.CounterValue, dir, func() []Sample {
				s := n.Stats()
				return []Sample{{[]string{"in"}, float64(s.ErrorsIn)}, {[]string{"out"}, float64(s.ErrorsOut)}}
			}),
	}
}

// QuotaRefusals is cloudbrowser_quota_refusals_total: refusals by the
// quota that was hit (the wire.Quota* names). The master counts the
// instance and identity quotas, each worker its browser and socket ones.
func QuotaRefusals() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cloudbrowser_quota_refusals_total",
		Help: "Requests refused by a per-user or per-address quota, by limit (instances-per-user, instances-per-ip, browsers-per-user, browsers-per-ip, sockets-per-browser, sockets-per-ip, new-identities-per-ip).",
	}, []string{"limit"})
}
