package chromium

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/egress"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// TestEgressGuard: a browser with an egress endpoint sends everything
// through it, loopback included: its app's internal origin is served by the
// endpoint (Chromium could not resolve the name), and a loopback service
// is reached by no navigation, fetch, image or WebSocket until the app
// allows it.
func TestEgressGuard(t *testing.T) {
	rt := shared(t)
	ctx := testCtx(t)
	var hits atomic.Int64
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, "<title>loopback secret</title>")
	}))
	defer svc.Close()
	_, port, _ := net.SplitHostPort(svc.Listener.Addr().String())
	var blocked atomic.Int64
	g, err := egress.New(egress.Config{InternalSuffix: ".app.test.internal",
		OnBlock: func(app, reason, target string) { blocked.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	page := `<!doctype html><title>start</title><img src="http://127.0.0.1:` + port + `/img">
<script>
var ws = new WebSocket("ws://127.0.0.1:` + port + `/ws");
ws.onerror = ws.onopen = function () { window.wsDone = true; };
fetch("http://localhost:` + port + `/fetch", {mode: "no-cors"}).catch(function () {}).then(function () {
  fetch("http://[::ffff:127.0.0.1]:` + port + `/fetch2", {mode: "no-cors"}).catch(function () {}).then(function () { document.title = "done"; });
});
</script>`
	internal := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, page)
	})
	tenant := &egress.Tenant{App: "a", Internal: internal}
	e, err := g.Open(tenant)
	if err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, rt, browser.Options{URL: "http://a.app.test.internal/index.html", Egress: e})
	if b.Egress() != e {
		t.Fatal("Egress() is not the endpoint")
	}
	testutil.Eventually(t, 30*time.Second, testutil.Cond("page done", func() bool { return b.Page().Title == "done" }))
	testutil.Eventually(t, 30*time.Second, testutil.Cond("websocket settled", func() bool { return eval[bool](t, b, "window.wsDone === true") }))
	if err := b.Navigate(ctx, "http://x@127.0.0.2:"+port+"/"); err != nil {
		t.Logf("navigate: %v", err)
	}
	waitLoaded(t, b)
	if n := hits.Load(); n != 0 {
		t.Fatalf("the loopback service got %d requests through the guard", n)
	}
	if text := eval[string](t, b, "document.body.innerText"); !strings.Contains(text, "blocked by CloudBrowser") {
		t.Fatalf("navigation to loopback shows %q", text)
	}
	if blocked.Load() < 4 {
		t.Fatalf("only %d refusals reported", blocked.Load())
	}
	// Other apps' internal origins are refused too.
	if err := b.Navigate(ctx, "http://b.app.test.internal/app.json"); err != nil {
		t.Logf("navigate: %v", err)
	}
	waitLoaded(t, b)
	if text := eval[string](t, b, "document.body.innerText"); !strings.Contains(text, "own app") {
		t.Fatalf("other app's origin shows %q", text)
	}

	// The app opts the service back in.
	rules, err := egress.ParseRules("allow", []string{"127.0.0.1:" + port})
	if err != nil {
		t.Fatal(err)
	}
	e.Assign(&egress.Tenant{App: "a", Internal: internal, Allow: rules})
	if err := b.Navigate(ctx, "http://127.0.0.1:"+port+"/"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, testutil.Cond("allowed page", func() bool { return b.Page().Title == "loopback secret" }))
	if hits.Load() == 0 {
		t.Fatal("allowed service not reached")
	}
	// Closing the browser closes its endpoint.
	_ = b.Close(ctx)
	if _, err := net.Dial("tcp", strings.TrimPrefix(e.ProxyURL(), "http://")); err == nil {
		t.Fatal("endpoint still listening after the browser closed")
	}
}

// BenchmarkEgressLoad: the guard's cost on a page with 50 subresources
// (svgImages): the same page loaded in a browser without an exit and in one
// behind an egress endpoint (with a rule that allows the loopback test
// server), alternating, in the same run. Reported: median load times and
// their ratio.
func BenchmarkEgressLoad(b *testing.B) {
	ctx := context.Background()
	rt := shared(b)
	srv := svgPages(b)
	g, err := egress.New(egress.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	rules, err := egress.ParseRules("allow", []string{"127.0.0.1"})
	if err != nil {
		b.Fatal(err)
	}
	load := func(br browser.Browser, n int) time.Duration {
		d, err := loadSVGPage(ctx, br, srv, n)
		if err != nil {
			b.Fatal(err)
		}
		return d
	}
	var plain, guarded browser.Browser
	closeBoth := func() {
		for _, br := range []browser.Browser{plain, guarded} {
			if br != nil {
				br.Close(ctx)
			}
		}
	}
	defer closeBoth()
	var none, guard []time.Duration
	n := 0
	for b.Loop() {
		if n%5 == 0 {
			closeBoth()
			e, err := g.Open(&egress.Tenant{App: "bench", Allow: rules})
			if err != nil {
				b.Fatal(err)
			}
			if plain, err = rt.NewBrowser(ctx, browser.Options{}); err != nil {
				b.Fatal(err)
			}
			if guarded, err = rt.NewBrowser(ctx, browser.Options{Egress: e}); err != nil {
				b.Fatal(err)
			}
		}
		n++
		if n%2 == 0 {
			none = append(none, load(plain, n))
			guard = append(guard, load(guarded, n))
		} else {
			guard = append(guard, load(guarded, n))
			none = append(none, load(plain, n))
		}
	}
	median := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2]) / 1e6
	}
	mn, mg := median(none), median(guard)
	b.ReportMetric(mn, "ms/load-direct")
	b.ReportMetric(mg, "ms/load-guard")
	b.ReportMetric(mg/mn, "guard/direct")
}
