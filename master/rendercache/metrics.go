package rendercache

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	requests  *prometheus.CounterVec
	evictions prometheus.Counter
	bytes     prometheus.GaugeFunc
	entries   prometheus.GaugeFunc
}

func newMetrics(c *Cache) metrics {
	m := metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cloudbrowser_render_cache_requests_total",
			Help: "Render cache requests by result (hit, miss, stale, generating = waited for another request's render).",
		}, []string{"result"}),
		evictions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cloudbrowser_render_cache_evictions_total",
			Help: "Render cache entries evicted to stay under the size bound.",
		}),
		bytes: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cloudbrowser_render_cache_bytes",
			Help: "Total size of the cached render bodies.",
		}, func() float64 { return float64(c.bytes.Load()) }),
		entries: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "cloudbrowser_render_cache_entries",
			Help: "Cached renders.",
		}, func() float64 { return float64(c.entries.Load()) }),
	}
	// Every result shows from the start, at 0.
	for _, s := range []Status{Hit, Miss, Stale, Generating} {
		m.requests.WithLabelValues(s.String())
	}
	return m
}

// Collectors are the cache's Prometheus metrics, for the master's
// registry: cloudbrowser_render_cache_requests_total{result},
// cloudbrowser_render_cache_bytes, cloudbrowser_render_cache_entries,
// cloudbrowser_render_cache_evictions_total.
func (c *Cache) Collectors() []prometheus.Collector {
	return []prometheus.Collector{c.m.requests, c.m.evictions, c.m.bytes, c.m.entries}
}
