package chromium

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/memory"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// svgImages is how many SVG images svgPages' /bench page has. Each SVG
// image is a document of its own in the renderer.
const svgImages = 50

// svgPages serves /bench?<n>: a page with svgImages SVG images, all
// no-store and named after n, so every load fetches all of them anew.
func svgPages(tb testing.TB) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/bench", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		fmt.Fprint(w, "<!doctype html><title>bench</title>")
		for i := range svgImages {
			fmt.Fprintf(w, `<img src="/img/%d.svg?%s">`, i, r.URL.RawQuery)
		}
	})
	mux.HandleFunc("/img/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/svg+xml")
		w.Header().Set("Cache-Control", "no-store")
		fmt.Fprint(w, `<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8"/>`)
	})
	srv := httptest.NewServer(mux)
	tb.Cleanup(srv.Close)
	return srv
}

// loadSVGPage loads /bench?n in br and waits until the load event and all
// images are in. It returns how long that took.
func loadSVGPage(ctx context.Context, br browser.Browser, srv *httptest.Server, n int) (time.Duration, error) {
	t0 := time.Now()
	if err := br.Navigate(ctx, fmt.Sprintf("%s/bench?%d", srv.URL, n)); err != nil {
		return 0, err
	}
	var images int
	err := br.Evaluate(ctx, `new Promise(r => document.readyState === "complete" ? r() : addEventListener("load", r))
		.then(() => [...document.images].filter(i => i.complete && i.naturalWidth > 0).length)`, &images)
	if err != nil {
		return 0, err
	}
	if images != svgImages {
		return 0, fmt.Errorf("load %d: %d of %d images loaded", n, images, svgImages)
	}
	return time.Since(t0), nil
}

// documents is the renderer's document count, dead ones not collected yet
// included.
func documents(ctx context.Context, br browser.Browser) (int64, error) {
	cb := br.(*cbrowser)
	c, err := pageCall(ctx, cb, memory.GetDOMCounters, cdp.Empty{})
	return c.Documents, err
}

// A browser that keeps loading pages has its renderer's garbage collected:
// the dead documents do not pile up (see gc.go).
func TestRendererGarbageCollected(t *testing.T) {
	ctx := testCtx(t)
	srv := svgPages(t)
	b := newBrowser(t, shared(t), browser.Options{})
	cb := b.(*cbrowser)
	// Every load adds svgImages+1 documents; without collections they pile
	// up (measured: about 2000 after 30 loads, until Chromium's own
	// collection).
	const loads = 30
	var most int64
	for n := range loads {
		if _, err := loadSVGPage(ctx, b, srv, n); err != nil {
			t.Fatal(err)
		}
		docs, err := documents(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		most = max(most, docs)
	}
	// The check after the last load runs in the background.
	testutil.Eventually(t, 30*time.Second, testutil.Cond("a renderer collection", func() bool { return cb.gcs.Load() > 0 }))
	// Live: the page and the back-forward cache's pages (up to 6), each
	// with its images. A collection is asked for once the new documents
	// outnumber the live ones, and Chromium may collect by itself too.
	// The check runs in the background, so allow for some lag.
	limit := int64(3*7*(svgImages+1) + defaultMinGarbageDocs)
	if most > limit {
		t.Errorf("renderer had %d documents during %d loads, want at most %d", most, loads, limit)
	}
	t.Logf("%d loads: %d collections, at most %d documents", loads, cb.gcs.Load(), most)
}

// A browser that loads few documents is not collected for nothing.
func TestRendererGarbageNotCollectedForLittle(t *testing.T) {
	ctx := testCtx(t)
	b := newBrowser(t, shared(t), browser.Options{})
	for i := range 10 {
		if err := b.Navigate(ctx, fmt.Sprintf("%s/title?few%d", testSrv.URL, i)); err != nil {
			t.Fatal(err)
		}
		waitLoaded(t, b)
	}
	if n := b.(*cbrowser).gcs.Load(); n != 0 {
		t.Fatalf("%d collections for 10 small documents", n)
	}
}

// BenchmarkLoadGrowth loads the same page (svgImages SVG images, no-store)
// 51 times in one browser and reports how much slower the 50th load is than
// the first: load50/load1 is the median of loads 49-51 over the median of
// loads 1-3 (a fresh browser's first load also starts its renderer), and
// load50/load10 the same against loads 9-11 (the back-forward cache is
// full by then, so that ratio shows growth without it). Each
// iteration is a new browser; the metrics are medians over iterations.
// Variants: plain, a navigation policy, an installed script and binding, a
// screencast running; and plain without the renderer collections (nogc),
// with the back-forward cache (bfcache), and with neither change (before).
//
//	go test ./worker/browser/chromium -run '^$' -bench LoadGrowth -benchtime 3x
func BenchmarkLoadGrowth(b *testing.B) {
	const loads = 51
	srv := svgPages(b)
	runtimes := map[string]*Runtime{}
	runtimeFor := func(b *testing.B, cfg Config) *Runtime {
		key := fmt.Sprint(cfg.gcMinGarbage, cfg.ExtraFlags)
		if rt := runtimes[key]; rt != nil {
			return rt
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cfg.Logger = testutil.Logger(b)
		rt, err := New(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		runtimes[key] = rt
		return rt
	}
	defer func() {
		for _, rt := range runtimes {
			rt.Close()
		}
	}()
	for _, v := range []struct {
		name string
		cfg  Config
		opts browser.Options
		cast bool
	}{
		{name: "before", cfg: Config{gcMinGarbage: -1, ExtraFlags: []string{bfcacheOn}}},
		{name: "nogc", cfg: Config{gcMinGarbage: -1}},
		{name: "bfcache", cfg: Config{ExtraFlags: []string{bfcacheOn}}},
		{name: "plain"},
		{name: "policy", opts: browser.Options{Allow: func(u string) bool { return !strings.Contains(u, "/deny/") }}},
		{name: "install", opts: browser.Options{
			Script:   `window.installed = true`,
			Bindings: map[string]func(string){"hook": func(string) {}},
		}},
		{name: "screencast", cast: true},
	} {
		b.Run(v.name, func(b *testing.B) {
			testutil.NeedChromium(b)
			ctx := context.Background()
			rt := runtimeFor(b, v.cfg)
			var first, tenth, fiftieth, ratio, plateau, docs []float64
			var gcs uint64
			for b.Loop() {
				br, err := rt.NewBrowser(ctx, v.opts)
				if err != nil {
					b.Fatal(err)
				}
				stopCast := func() {}
				if v.cast {
					cctx, cancel := context.WithCancel(ctx)
					stopCast = cancel
					go br.Screencast(cctx, browser.ScreencastOptions{}, func(browser.Frame) {})
				}
				times := make([]float64, loads)
				for n := range loads {
					d, err := loadSVGPage(ctx, br, srv, n)
					if err != nil {
						b.Fatal(err)
					}
					times[n] = float64(d) / 1e6
				}
				d, err := documents(ctx, br)
				if err != nil {
					b.Fatal(err)
				}
				gcs += br.(*cbrowser).gcs.Load()
				stopCast()
				br.Close(ctx)
				f, m, l := median(times[:3]), median(times[8:11]), median(times[loads-3:])
				first, tenth, fiftieth = append(first, f), append(tenth, m), append(fiftieth, l)
				ratio, plateau, docs = append(ratio, l/f), append(plateau, l/m), append(docs, float64(d))
			}
			b.ReportMetric(median(first), "ms/load1")
			b.ReportMetric(median(tenth), "ms/load10")
			b.ReportMetric(median(fiftieth), "ms/load50")
			b.ReportMetric(median(ratio), "load50/load1")
			b.ReportMetric(median(plateau), "load50/load10")
			b.ReportMetric(median(docs), "docs/load50")
			b.ReportMetric(float64(gcs)/float64(len(ratio)), "gcs/browser")
		})
	}
}

const bfcacheOn = "--enable-features=BackForwardCache"

// The back-forward cache is off: going back loads the page again instead of
// restoring the frozen one.
func TestNoBackForwardCache(t *testing.T) {
	ctx := testCtx(t)
	b := newBrowser(t, shared(t), browser.Options{URL: testSrv.URL + "/title?first"})
	waitLoaded(t, b)
	eval[any](t, b, `window.marker = 1`)
	if err := b.Navigate(ctx, testSrv.URL+"/title?second"); err != nil {
		t.Fatal(err)
	}
	waitLoaded(t, b)
	if err := b.Input(ctx, browser.InputEvent{Type: browser.InputBack}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, testutil.Cond("back", func() bool { return b.Page().Title == "first" }))
	waitLoaded(t, b)
	if got := eval[string](t, b, `String(window.marker) + " " + performance.getEntriesByType("navigation")[0].type`); got != "undefined back_forward" {
		t.Fatalf("after back: marker and navigation type %q, want a new document", got)
	}
}

// ExtraFlags can turn the back-forward cache back on (with full Chromium:
// the headless shell has none); a restored page keeps its state and still
// gets its title reported.
func TestBackForwardCacheOptIn(t *testing.T) {
	testutil.NeedChromium(t)
	full, err := findChromium("", true)
	if err != nil {
		if testutil.ChromiumRequired() {
			t.Fatal(err)
		}
		t.Skip("full Chromium is not installed:", err)
	}
	ctx := testCtx(t)
	rt, err := New(ctx, Config{Path: full, Logger: testutil.Logger(t), ExtraFlags: []string{bfcacheOn}})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	b := newBrowser(t, rt, browser.Options{URL: testSrv.URL + "/title?first"})
	waitLoaded(t, b)
	eval[any](t, b, `window.marker = 1`)
	if err := b.Navigate(ctx, testSrv.URL+"/title?second"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, testutil.Cond("title second", func() bool { return b.Page().Title == "second" }))
	if err := b.Input(ctx, browser.InputEvent{Type: browser.InputBack}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, testutil.Cond("back", func() bool { return b.Page() == browser.Page{URL: testSrv.URL + "/title?first", Title: "first"} }))
	if m := eval[int](t, b, `window.marker`); m != 1 {
		t.Fatalf("marker %d: not restored from the back-forward cache", m)
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
