package chromium

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// policySite serves the policy tests' pages and records what it was asked
// for. Everything under /deny/ is what the test policy refuses.
type policySite struct {
	*httptest.Server
	mu   sync.Mutex
	hits []string
}

func newPolicySite(t *testing.T) *policySite {
	s := &policySite{}
	mux := http.NewServeMux()
	page := func(body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "no-store")
			fmt.Fprint(w, "<!doctype html>"+strings.ReplaceAll(body, "OTHERSITE", s.otherSite()))
		}
	}
	// The main page: an allowed script, a denied image, a denied XHR, an
	// image the policy panics on, and a link to a denied page.
	mux.HandleFunc("/page", page(`<title>policy</title>
<script>window.results = {}</script>
<script src="/ok.js"></script>
<img src="/deny/img.png" onload="results.img = 'load'" onerror="results.img = 'error'">
<img src="/panic.png" onload="results.panic = 'load'" onerror="results.panic = 'error'">
<a id=link href="/deny/page">away</a>
<script>
fetch("/deny/xhr").then(() => results.xhr = "ok", () => results.xhr = "error");
fetch("/ok.txt").then(r => r.text()).then(t => results.okxhr = t, () => results.okxhr = "error");
</script>`))
	mux.HandleFunc("/ok.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		fmt.Fprint(w, `results.script = "ok"`)
	})
	mux.HandleFunc("/ok.txt", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/deny/target", http.StatusFound)
	})
	// What a page opens: a cross-site iframe (its own process and target)
	// with a denied image, a worker and a shared worker fetching a denied
	// URL, an allowed popup
	// with a denied image, and denied popups with and without an opener.
	mux.HandleFunc("/opens", page(`<title>opens</title>
<script>
window.results = {};
const note = s => { const [k, v] = s.split(":"); results[k] = v; };
addEventListener("message", e => note(e.data));
new Worker("/worker.js").onmessage = e => note(e.data);
new SharedWorker("/shared.js").port.onmessage = e => note(e.data);
window.open("/popup");
window.open("/deny/popup");
window.open("/deny/popup2", "_blank", "noopener");
</script>
<iframe src="OTHERSITE/frame"></iframe>`))
	mux.HandleFunc("/frame", page(`<img src="/deny/frameimg.png"
 onload="parent.postMessage('frameimg:load', '*')" onerror="parent.postMessage('frameimg:error', '*')">`))
	mux.HandleFunc("/worker.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		fmt.Fprint(w, `fetch("/deny/workerfetch").then(() => postMessage("worker:ok"), () => postMessage("worker:error"))`)
	})
	mux.HandleFunc("/shared.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		fmt.Fprint(w, `onconnect = e => fetch("/deny/sharedfetch").then(() => e.ports[0].postMessage("shared:ok"), () => e.ports[0].postMessage("shared:error"))`)
	})
	mux.HandleFunc("/popup", page(`<title>popup</title><img src="/deny/popupimg.png">`))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, ".png") {
			w.Header().Set("Content-Type", "image/svg+xml")
			fmt.Fprint(w, `<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8"/>`)
			return
		}
		fmt.Fprint(w, "x")
	})
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.hits = append(s.hits, r.URL.Path)
		s.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// otherSite is the server under another site (localhost instead of
// 127.0.0.1), so its frames get their own renderer and target.
func (s *policySite) otherSite() string { return strings.Replace(s.URL, "127.0.0.1", "localhost", 1) }

func (s *policySite) hit(path string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.hits, path)
}

func (s *policySite) deniedHits() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, h := range s.hits {
		if strings.HasPrefix(h, "/deny/") || h == "/panic.png" {
			out = append(out, h)
		}
	}
	return out
}

// testPolicy denies /deny/ URLs and panics on /panic; it records what it
// denied.
type testPolicy struct {
	mu     sync.Mutex
	denied []string
}

func (p *testPolicy) allow(u string) bool {
	ok := !strings.Contains(u, "/deny/")
	if !ok || strings.Contains(u, "/panic") {
		p.mu.Lock()
		p.denied = append(p.denied, u)
		p.mu.Unlock()
	}
	if strings.Contains(u, "/panic") {
		panic("test policy panics")
	}
	return ok
}

// deniedPaths returns the paths of the URLs denied so far.
func (p *testPolicy) deniedPaths() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, u := range p.denied {
		if i := strings.Index(u, "://"); i >= 0 {
			u = u[i+3:]
			u = u[strings.Index(u, "/"):]
		}
		out = append(out, u)
	}
	slices.Sort(out)
	return out
}

// results waits until the page recorded all keys, and returns what it did.
func results(t *testing.T, b browser.Browser, keys ...string) map[string]string {
	t.Helper()
	var r map[string]string
	testutil.Eventually(t, 30*time.Second, testutil.Cond("page results "+strings.Join(keys, ","), func() bool {
		r = eval[map[string]string](t, b, "window.results || {}")
		for _, k := range keys {
			if r[k] == "" {
				return false
			}
		}
		return true
	}))
	return r
}

func TestNavigationPolicy(t *testing.T) {
	rt := shared(t)
	ctx := testCtx(t)
	site := newPolicySite(t)
	pol := &testPolicy{}
	blocked0 := statsBlocked(t, rt)

	// The initial URL is checked like any navigation.
	if _, err := rt.NewBrowser(ctx, browser.Options{URL: site.URL + "/deny/first", Allow: pol.allow}); !errors.Is(err, browser.ErrBlocked) {
		t.Fatalf("denied initial URL: %v", err)
	}

	b := newBrowser(t, rt, browser.Options{URL: site.URL + "/page", Allow: pol.allow})
	got := results(t, b, "script", "img", "panic", "xhr", "okxhr")
	want := map[string]string{"script": "ok", "img": "error", "panic": "error", "xhr": "error", "okxhr": "ok"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	testutil.Eventually(t, 30*time.Second, testutil.Cond("3 blocked", func() bool { return b.Blocked() >= 3 }))

	// A link to a denied page fails in the browser.
	eval[any](t, b, `document.getElementById("link").click()`)
	testutil.Eventually(t, 30*time.Second, testutil.Cond("4 blocked", func() bool { return b.Blocked() >= 4 }))

	// Navigate and Input refuse before asking Chromium; nothing is counted.
	if err := b.Navigate(ctx, site.URL+"/deny/nav"); !errors.Is(err, browser.ErrBlocked) {
		t.Fatalf("navigate to a denied URL: %v", err)
	}
	if err := b.Input(ctx, browser.InputEvent{Type: browser.InputNavigate, URL: site.URL + "/deny/input"}); !errors.Is(err, browser.ErrBlocked) {
		t.Fatalf("input navigate to a denied URL: %v", err)
	}
	// A redirect from an allowed URL to a denied one is stopped at the hop.
	if err := b.Navigate(ctx, site.URL+"/redirect"); !errors.Is(err, browser.ErrBlocked) {
		t.Fatalf("redirect to a denied URL: %v", err)
	}
	if !site.hit("/redirect") {
		t.Fatal("the allowed first hop was not requested")
	}
	if err := b.Navigate(ctx, "data:text/html,<title>data</title>"); err != nil {
		t.Fatalf("data: URL: %v", err)
	}

	// Popups (with and without opener), a cross-site iframe, a worker and
	// a shared worker are filtered too.
	if err := b.Navigate(ctx, site.URL+"/opens"); err != nil {
		t.Fatal(err)
	}
	got = results(t, b, "frameimg", "worker", "shared")
	if got["frameimg"] != "error" || got["worker"] != "error" || got["shared"] != "error" {
		t.Errorf("iframe image %q, worker fetch %q, shared worker fetch %q; want errors", got["frameimg"], got["worker"], got["shared"])
	}
	testutil.Eventually(t, 30*time.Second, testutil.Cond("the allowed popup", func() bool { return site.hit("/popup") }))

	// The filter stays across a cross-site (cross-process) navigation.
	if err := b.Navigate(ctx, site.otherSite()+"/page"); err != nil {
		t.Fatal(err)
	}
	if got := results(t, b, "script", "img", "xhr"); got["img"] != "error" || got["xhr"] != "error" {
		t.Errorf("after a cross-site navigation: %v", got)
	}

	wantDenied := []string{"/deny/first", "/deny/frameimg.png", "/deny/img.png", "/deny/img.png", "/deny/input", "/deny/nav",
		"/deny/page", "/deny/popup", "/deny/popup2", "/deny/popupimg.png", "/deny/sharedfetch", "/deny/target",
		"/deny/workerfetch", "/deny/xhr", "/deny/xhr", "/panic.png", "/panic.png"}
	testutil.Eventually(t, 30*time.Second, testutil.Cond("all denials", func() bool { return len(pol.deniedPaths()) >= len(wantDenied) }))
	if d := pol.deniedPaths(); !slices.Equal(d, wantDenied) {
		t.Errorf("denied %q\nwant   %q", d, wantDenied)
	}
	if h := site.deniedHits(); len(h) > 0 {
		t.Errorf("the server saw denied requests %q", h)
	}
	// Every request the policy denied is counted, except the three refused
	// before they started (initial URL, Navigate, Input).
	if n, want := b.Blocked(), uint64(len(wantDenied)-3); n != want {
		t.Errorf("Blocked() = %d, want %d", n, want)
	}
	if n := statsBlocked(t, rt) - blocked0; n != b.Blocked() {
		t.Errorf("Stats().Blocked grew by %d, want %d", n, b.Blocked())
	}
	if b.Err() != nil {
		t.Fatal(b.Err())
	}

	// The filter goes with the last browser that has a policy.
	b.Close(ctx)
	if b.(*cbrowser).p.filters.Running() {
		t.Errorf("request filter still running without policy browsers")
	}
}

// A browser without a policy loads everything and enables nothing, also
// while a browser with a policy runs on the same Chromium.
func TestNoPolicyUnaffected(t *testing.T) {
	rt := shared(t)
	ctx := testCtx(t)
	site := newPolicySite(t)
	pol := &testPolicy{}
	withPolicy := newBrowser(t, rt, browser.Options{Allow: pol.allow})
	b := newBrowser(t, rt, browser.Options{URL: site.URL + "/page"})
	got := results(t, b, "script", "img", "xhr")
	if got["img"] != "load" || got["xhr"] != "ok" || got["script"] != "ok" {
		t.Fatalf("results %v", got)
	}
	if b.(*cbrowser).filter.Load() != nil || b.Blocked() != 0 {
		t.Fatal("a browser without a policy has a filter")
	}
	if err := b.Navigate(ctx, site.URL+"/deny/nav"); err != nil {
		t.Fatal(err)
	}
	if len(pol.deniedPaths()) != 0 || withPolicy.Blocked() != 0 {
		t.Fatalf("the other browser's policy saw %q", pol.deniedPaths())
	}
}

func statsBlocked(t *testing.T, rt *Runtime) uint64 {
	t.Helper()
	st, err := rt.Stats(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	return st.Blocked
}

// BenchmarkPolicyLoad loads a page with 50 images (no-store, so every load
// fetches all 51 resources) in a browser without and one with a navigation
// policy, alternately, in one Chromium, and reports the median load times
// and their ratio. Both browsers are replaced every 5 loads, as when the
// figures in docs/chromium.md were taken (load times then grew with the
// number of documents a browser had loaded; see BenchmarkLoadGrowth).
//
//	go test ./worker/browser/chromium -run '^$' -bench PolicyLoad -benchtime 60x
func BenchmarkPolicyLoad(b *testing.B) {
	ctx := context.Background()
	rt := shared(b)
	srv := svgPages(b)

	load := func(br browser.Browser, n int) time.Duration {
		d, err := loadSVGPage(ctx, br, srv, n)
		if err != nil {
			b.Fatal(err)
		}
		return d
	}
	allow := func(u string) bool { return !strings.Contains(u, "/deny/") }
	var plain, filtered browser.Browser
	closeBoth := func() {
		for _, br := range []browser.Browser{plain, filtered} {
			if br != nil {
				br.Close(ctx)
			}
		}
	}
	defer closeBoth()
	var none, policy []time.Duration
	n := 0
	for b.Loop() {
		if n%5 == 0 {
			closeBoth()
			var err error
			if plain, err = rt.NewBrowser(ctx, browser.Options{}); err != nil {
				b.Fatal(err)
			}
			if filtered, err = rt.NewBrowser(ctx, browser.Options{Allow: allow}); err != nil {
				b.Fatal(err)
			}
		}
		n++
		if n%2 == 0 {
			none = append(none, load(plain, n))
			policy = append(policy, load(filtered, n))
		} else {
			policy = append(policy, load(filtered, n))
			none = append(none, load(plain, n))
		}
	}
	median := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2]) / 1e6
	}
	mn, mp := median(none), median(policy)
	b.ReportMetric(mn, "ms/load-none")
	b.ReportMetric(mp, "ms/load-policy")
	b.ReportMetric(mp/mn, "policy/none")
}

// A Chromium crash ends a policy browser like any other; the restarted
// process gets a new request filter.
func TestPolicyAfterCrash(t *testing.T) {
	testutil.NeedChromium(t)
	ctx := testCtx(t)
	rt, err := New(ctx, Config{Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	allowAll := func(string) bool { return true }
	b, err := rt.NewBrowser(ctx, browser.Options{URL: testSrv.URL + "/title?x", Allow: allowAll})
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(b.(*cbrowser).p.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-b.Done()
	if !errors.Is(b.Err(), browser.ErrCrashed) {
		t.Fatalf("err %v", b.Err())
	}
	b2, err := rt.NewBrowser(ctx, browser.Options{URL: testSrv.URL + "/title?y", Allow: allowAll})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, testutil.Cond("title", func() bool { return b2.Page().Title == "y" }))
	rt.Close()
	if !errors.Is(b2.Err(), browser.ErrClosed) {
		t.Fatalf("after close: %v", b2.Err())
	}
}
