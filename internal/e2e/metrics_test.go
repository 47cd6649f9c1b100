package e2e

import (
	"net/http"
	"path/filepath"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// scrape fetches and parses a /metrics page.
func scrape(t *testing.T, url, token string) map[string]*dto.MetricFamily {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("%s is not in the Prometheus text format: %v", url, err)
	}
	return fams
}

// value sums the samples of a family whose labels include want.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f, ok := fams[name]
	if !ok {
		return -1
	}
	sum := 0.0
	for _, m := range f.GetMetric() {
		match := true
		for k, v := range want {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == k && l.GetValue() == v {
					found = true
				}
			}
			match = match && found
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		case m.Untyped != nil:
			sum += m.Untyped.GetValue()
		}
	}
	return sum
}

// TestMetrics: /metrics of master, worker and a proxy parse with the
// Prometheus text parser, and the counters move when users make requests.
func TestMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	c := startCluster(t, clusterOpts{proxies: 0, workers: 1})
	pa := c.start("proxy-m", "proxy", "--master", c.rmi, "--listen", anyPort, "--admin", anyPort,
		"--secret-file", filepath.Join(c.dir, "data", "cluster.secret"), "--name", "metrics-proxy").addrs(t)
	proxyPublic, proxyAdmin := pa["public"], pa["admin"]
	st := c.waitFor("proxy subscribed", 20*time.Second, func(st *wire.ClusterStatus) bool { return len(st.Proxies) == 2 })
	workerAddr := st.Workers[0].HTTPAddr
	waitHTTP(t, "http://"+proxyAdmin+"/readyz", 20*time.Second)

	masterURL, workerURL, proxyURL := "http://"+c.admin+"/metrics", "http://"+workerAddr+"/metrics", "http://"+proxyAdmin+"/metrics"
	m0, w0, p0 := scrape(t, masterURL, ""), scrape(t, workerURL, c.metricsToken()), scrape(t, proxyURL, "")
	// On the public port the metrics need the admin token.
	resp, err := http.Get("http://" + c.public + "/metrics")
	if err != nil {
		t.Fatalf("public /metrics without a token: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("public /metrics without a token: %s, want 401", resp.Status)
	}
	scrape(t, "http://"+c.public+"/metrics", c.token)

	for i := 0; i < 3; i++ {
		hops := newUser(t, "http://"+proxyPublic).open("/notes")
		if hops[len(hops)-1].status != 200 {
			t.Fatalf("notes: %+v", hops)
		}
	}
	c.waitFor("a load report after the placements", 10*time.Second, func(st *wire.ClusterStatus) bool {
		return len(st.Workers) == 1 && st.Workers[0].Load.Instances >= 3
	})
	m1, w1, p1 := scrape(t, masterURL, ""), scrape(t, workerURL, c.metricsToken()), scrape(t, proxyURL, "")

	for _, tc := range []struct {
		name   string
		before map[string]*dto.MetricFamily
		after  map[string]*dto.MetricFamily
		metric string
		labels map[string]string
		grew   float64
	}{
		{"placements", m0, m1, "cloudbrowser_master_placements_total", map[string]string{"strategy": "singleInstancePerUser", "outcome": "created"}, 3},
		{"route lookups", m0, m1, "cloudbrowser_master_route_lookup_seconds", map[string]string{"kind": "app"}, 3},
		{"master rmi calls", m0, m1, "cloudbrowser_rmi_calls_total", map[string]string{"direction": "in"}, 3},
		{"worker instances", m0, m1, "cloudbrowser_worker_instances", nil, 3},
		{"proxy requests", p0, p1, "cloudbrowser_proxy_requests_total", nil, 6},
		// The Application URL (its placement asked of the master off the
		// event loop) and the Browser URL: both relayed by the proxy's edge.
		{"proxy edge requests", p0, p1, "cloudbrowser_proxy_edge_requests_total", nil, 6},
		{"proxy route lookups", p0, p1, "cloudbrowser_proxy_route_lookups_total", nil, 1},
		{"worker local instances", w0, w1, "cloudbrowser_worker_local_instances", nil, 3},
		{"worker rmi calls out", w0, w1, "cloudbrowser_rmi_calls_total", map[string]string{"direction": "out"}, 3},
	} {
		b, a := value(tc.before, tc.metric, tc.labels), value(tc.after, tc.metric, tc.labels)
		if a < 0 || a-max(b, 0) < tc.grew {
			t.Errorf("%s: %s went %v -> %v, want +%v", tc.name, tc.metric, b, a, tc.grew)
		}
	}
	for _, name := range []string{"cloudbrowser_worker_load_bytes", "cloudbrowser_worker_projected_load_bytes", "go_goroutines", "process_resident_memory_bytes"} {
		if value(m1, name, nil) <= 0 {
			t.Errorf("master: %s missing or zero", name)
		}
	}
	if value(w1, "cloudbrowser_worker_local_load_bytes", map[string]string{"part": "go_heap"}) <= 0 {
		t.Error("worker: go heap load missing")
	}
}
