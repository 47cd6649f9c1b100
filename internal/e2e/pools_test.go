package e2e

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// TestPools: an app with a specific pool gets a pre-warmed browser; its
// maximum and the worker's global limit reach users as clear 503 pages; the
// statistics reach `cloudbrowser status`.
func TestPools(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	needChromium(t)
	apps, _ := filepath.Abs("testdata/pools")
	c := startCluster(t, clusterOpts{proxies: 0, workers: 1, runtime: "chromium",
		extra: []string{"--apps", apps}, worker: []string{"--max-browsers", "2"}})
	base := "http://" + c.public

	// The first user of /pooled leases the pool's browser, already on the
	// page its initialization sequence opened.
	alice := newUser(t, base)
	hops := alice.open("/pooled")
	if last := hops[len(hops)-1]; last.status != 200 || browserURL.FindStringSubmatch(last.path) == nil {
		t.Fatalf("pooled app: %+v", hops)
	}
	// A second user finds the pool (max 1) empty.
	h := newUser(t, base).get("/pooled")
	if h.status != http.StatusServiceUnavailable || !strings.Contains(h.body, "maximum number of browsers in the specific pool has been reached") {
		t.Fatalf("full pool: %d %s", h.status, h.body)
	}
	// /hello uses the general pool: one more browser fits the global limit
	// of 2, the next does not.
	if hs := newUser(t, base).open("/hello"); hs[len(hs)-1].status != 200 {
		t.Fatalf("general pool: %+v", hs)
	}
	h = newUser(t, base).get("/hello")
	if h.status != http.StatusServiceUnavailable || !strings.Contains(h.body, "global maximum number of browsers has been reached") {
		t.Fatalf("global limit: %d %s", h.status, h.body)
	}
	c.waitFor("pool statistics in the load report", 10*time.Second, func(st *wire.ClusterStatus) bool {
		// Both refusals above must have reached a report, not just the pool.
		if len(st.Workers) != 1 {
			return false
		}
		pools := strings.ReplaceAll(string(st.Workers[0].Pools), " ", "")
		return strings.Contains(pools, `"app":"pooled"`) && strings.Contains(pools, "globalMax")
	})
	// Prometheus sees the pools too.
	st := c.mustStatus()
	fams := scrape(t, "http://"+st.Workers[0].HTTPAddr+"/metrics", c.metricsToken())
	if v := value(fams, "cloudbrowser_pool_lease_failures_total", map[string]string{"pool": "pooled", "reason": "poolMax"}); v != 1 {
		t.Errorf("pool max failures in metrics: %v", v)
	}
	if v := value(fams, "cloudbrowser_pool_lease_seconds", map[string]string{"kind": "specific", "outcome": "ok"}); v < 1 {
		t.Errorf("lease latency histogram: %v samples", v)
	}
	out, err := c.cli(t, "status")
	if err != nil {
		t.Fatalf("status: %v %s", err, out)
	}
	for _, want := range []string{"POOL", "/pooled", "(general)", "poolMax=1", "globalMax=1"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
}

// TestPoolDemoSample: the pooldemo sample app's pool signs into its bundled
// site before the user arrives; the user lands on the search page.
func TestPoolDemoSample(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	needChromium(t)
	c := startCluster(t, clusterOpts{proxies: 0, workers: 1, runtime: "chromium"})
	// The pool starts on the app's first use on the worker (the document's
	// rule): the first user waits for a browser to sign in.
	users := userBrowsers(t)
	u := open(t, users, "http://"+c.public+"/pooldemo")
	eventually(t, u, "engine live", "document.body.dataset.status", "live")
	eventually(t, u, "already signed in", "document.title", "Search · signed in as demo · CloudBrowser")
}

// poolStats is what the e2e tests read of a pool's statistics
// (worker/pool.Stats as JSON).
type poolStats struct {
	General bool `json:"general"`
	MinSize int  `json:"minSize"`
	Free    int  `json:"free"`
	Locked  int  `json:"locked"`
	Leases  int  `json:"leases"`
	Created int  `json:"created"`
}

// generalPool reads the general pool's statistics from a worker's report.
func generalPool(st *wire.ClusterStatus) (poolStats, bool) {
	if len(st.Workers) != 1 || len(st.Workers[0].Pools) == 0 {
		return poolStats{}, false
	}
	var ms struct{ Pools []poolStats }
	if json.Unmarshal(st.Workers[0].Pools, &ms) != nil {
		return poolStats{}, false
	}
	for _, p := range ms.Pools {
		if p.General {
			return p, true
		}
	}
	return poolStats{}, false
}

// TestWarmFirstVisit: with the default general pool (sized from memory;
// this machine has plenty), a worker keeps two blank browsers ready, a new
// user's first visit takes one and gets a working browser, and the pool
// makes the next user's at once.
func TestWarmFirstVisit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	needChromium(t)
	apps, _ := filepath.Abs("../../apps")
	c := startCluster(t, clusterOpts{proxies: 1, workers: 1, runtime: "chromium", extra: []string{"--apps", apps},
		worker: []string{"--general-pool-min", "-1"}}) // the default; the harness sets 0 for the other tests
	c.waitFor("two browsers ready", 60*time.Second, func(st *wire.ClusterStatus) bool {
		g, ok := generalPool(st)
		return ok && g.Free == 2 && g.MinSize == 2
	})
	u := newUser(t, "http://"+c.public)
	path := lastHop(t, u.open("/notes"))
	conn := dialSocket(t, u, "ws://"+c.public+path+"/ws")
	waitMessage(t, conn, "hello", "")
	c.waitFor("the next user's browser ready", 60*time.Second, func(st *wire.ClusterStatus) bool {
		g, ok := generalPool(st)
		return ok && g.Leases == 1 && g.Free == 2 && g.Locked == 1 && g.Created == 3
	})
}
