package e2e

import (
	"encoding/json"
	"net"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil/storagesite"
)

// TestJobsBrowserReuse: through the binary, with real Chromium, a job's
// browser from the general pool is reset and lent to the next job (one
// browser made for two jobs, cloudbrowser_jobs_browsers_reused_total),
// and the next job sees none of what the first left: cookies, local and
// session storage, IndexedDB, Cache Storage and service workers of the
// page and of a third-party frame, nor the HTTP cache (the site counts the
// requests for a cacheable script).
func TestJobsBrowserReuse(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	needChromium(t)
	frameAddr := loopbackSite(t, &storagesite.Site{}).Listener.Addr().String()
	_, framePort, _ := net.SplitHostPort(frameAddr)
	// localhost, not 127.0.0.1: another site, so the frame is third-party.
	top := &storagesite.Site{Frame: func() string { return "http://localhost:" + framePort }}
	topAddr := loopbackSite(t, top).Listener.Addr().String()
	// One job slot and no ready browsers: every job leases from the
	// general pool, and a second browser would have to be made.
	c := startCluster(t, clusterOpts{workers: 1, runtime: "chromium",
		extra:  []string{"--apps", "", "--jobs-allow", "127.0.0.1/8"},
		worker: []string{"--job-slots", "1", "--general-pool-min", "0"}})
	tok := c.jobsToken()
	render := func(mode string) (self, fr storagesite.Stored) {
		t.Helper()
		page := "http://" + topAddr + "/page?mode=" + mode
		st, _, b := c.api("GET", "/api/v1/render?format=text&waitSelector=%23done&url="+url.QueryEscape(page), tok, nil)
		text := string(b)
		i, j := strings.Index(text, "RESULT"), strings.LastIndex(text, "END")
		if st != 200 || i < 0 || j < i {
			t.Fatalf("render %s: %d %q", mode, st, text)
		}
		var out storagesite.Page
		if err := json.Unmarshal([]byte(text[i+len("RESULT"):j]), &out); err != nil {
			t.Fatalf("render %s: %v in %q", mode, err, text)
		}
		return out.Self, out.Frame
	}
	metrics := func() (reused, created float64) {
		fams := scrape(t, "http://"+c.mustStatus().Workers[0].HTTPAddr+"/metrics", c.metricsToken())
		return value(fams, "cloudbrowser_jobs_browsers_reused_total", nil),
			value(fams, "cloudbrowser_pool_created_total", map[string]string{"pool": "(general)"})
	}

	self, fr := render("write")
	want := storagesite.Written()
	if !reflect.DeepEqual(self, want) {
		t.Fatalf("the first job's page wrote %+v, want %+v", self, want)
	}
	if fr.Local != "v" || fr.Session != "v" || len(fr.DBs) != 1 || len(fr.Caches) != 1 {
		t.Fatalf("the first job's third-party frame wrote %+v", fr)
	}
	if n := top.Res(); n != 1 {
		t.Fatalf("the first job fetched the cacheable script %d times, want 1 (the second from its cache)", n)
	}
	testutil.Eventually(t, 30*time.Second, testutil.Cond("the first job's browser reset for reuse", func() bool {
		reused, _ := metrics()
		return reused >= 1
	}))

	self, fr = render("read")
	blank := storagesite.Stored{DBs: []string{}, Caches: []string{}, Errs: []string{}}
	if !reflect.DeepEqual(self, blank) {
		t.Errorf("the second job's page found %+v", self)
	}
	if !reflect.DeepEqual(fr, blank) {
		t.Errorf("the second job's third-party frame found %+v", fr)
	}
	if n := top.Res(); n != 2 {
		t.Errorf("the cacheable script was fetched %d times in all, want 2 (the second job's cache was empty)", n)
	}
	// The second job ran in the first one's browser: the pool made one.
	if _, created := metrics(); created != 1 {
		t.Errorf("the general pool created %v browsers for two jobs, want 1 (reused)", created)
	}
}
