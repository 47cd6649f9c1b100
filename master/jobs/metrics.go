package jobs

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// metrics are the queue's Prometheus collectors (Collectors).
type metrics struct {
	q        *Queue
	total    *prometheus.CounterVec
	backoffs *prometheus.CounterVec
	wait     prometheus.Histogram
	run      prometheus.Histogram

	queuedDesc, slotsDesc, pausedDesc, crawlDesc *prometheus.Desc
}

func newMetrics() *metrics {
	buckets := []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 3600}
	return &metrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cloudbrowser_jobs_total",
			Help: "Jobs that reached an end state, by kind and outcome (done, failed, disallowed, cancelled)."}, []string{"kind", "outcome"}),
		backoffs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cloudbrowser_jobs_backoffs_total",
			Help: "Times a site's answer (429 or 503) paused its politeness budget, by status."}, []string{"status"}),
		pausedDesc: prometheus.NewDesc("cloudbrowser_jobs_budgets_paused",
			"Politeness budgets paused now by their site's back-off (429/503).", nil, nil),
		crawlDesc: prometheus.NewDesc("cloudbrowser_jobs_budgets_crawl_delayed",
			"Politeness budgets whose interval a robots.txt Crawl-delay raised.", nil, nil),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cloudbrowser_job_wait_seconds",
			Help: "Time from a job's submission to its first attempt's start.", Buckets: buckets}),
		run: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cloudbrowser_job_run_seconds",
			Help: "Duration of job attempts, from hand-over to the worker's report (or loss).", Buckets: buckets}),
		queuedDesc: prometheus.NewDesc("cloudbrowser_jobs_queued",
			"Queued jobs by class: the classes holding a host slot, the rest as \"leftover\".", []string{"class"}, nil),
		slotsDesc: prometheus.NewDesc("cloudbrowser_job_slots",
			"Job slots of each worker, used and free.", []string{"worker", "state"}, nil),
	}
}

// Collectors returns the queue's Prometheus collectors for the master's
// registry: cloudbrowser_jobs_total{kind,outcome},
// cloudbrowser_jobs_queued{class}, cloudbrowser_job_slots{worker,state},
// cloudbrowser_job_wait_seconds and cloudbrowser_job_run_seconds.
func (q *Queue) Collectors() []prometheus.Collector {
	return []prometheus.Collector{q.m.total, q.m.backoffs, q.m.wait, q.m.run, gauges{q.m}}
}

// gauges reads the queue's current figures at scrape time. Their label
// sets stay bounded: at most QueueCount classes plus "leftover", and the
// registered workers.
type gauges struct{ m *metrics }

func (g gauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.m.queuedDesc
	ch <- g.m.slotsDesc
	ch <- g.m.pausedDesc
	ch <- g.m.crawlDesc
}

func (g gauges) Collect(ch chan<- prometheus.Metric) {
	s := g.m.q.Stats()
	for class, n := range s.Queued {
		ch <- prometheus.MustNewConstMetric(g.m.queuedDesc, prometheus.GaugeValue, float64(n), class)
	}
	for _, w := range s.Workers {
		ch <- prometheus.MustNewConstMetric(g.m.slotsDesc, prometheus.GaugeValue, float64(w.Used), w.ID, "used")
		ch <- prometheus.MustNewConstMetric(g.m.slotsDesc, prometheus.GaugeValue, float64(w.Free), w.ID, "free")
	}
	var paused, delayed int
	for _, p := range s.Polite {
		if !p.PausedUntil.IsZero() {
			paused++
		}
		if p.CrawlDelayMs > 0 {
			delayed++
		}
	}
	ch <- prometheus.MustNewConstMetric(g.m.pausedDesc, prometheus.GaugeValue, float64(paused))
	ch <- prometheus.MustNewConstMetric(g.m.crawlDesc, prometheus.GaugeValue, float64(delayed))
}

// Histograms returns the wait and run time histograms (status, dashboard).
func (q *Queue) Histograms() (wait, run wire.Histogram) {
	return histogramOf(q.m.wait), histogramOf(q.m.run)
}

func histogramOf(h prometheus.Histogram) wire.Histogram {
	var m dto.Metric
	if err := h.Write(&m); err != nil || m.Histogram == nil {
		return wire.Histogram{}
	}
	out := wire.Histogram{Count: m.Histogram.GetSampleCount(), Sum: m.Histogram.GetSampleSum()}
	for _, b := range m.Histogram.Bucket {
		out.Buckets = append(out.Buckets, wire.HistogramBucket{Le: b.GetUpperBound(), Count: b.GetCumulativeCount()})
	}
	return out
}
