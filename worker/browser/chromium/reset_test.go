package chromium

import (
	"context"
	"errors"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/target"

	"fmt"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium/sitedata"
)

// storageScript writes (mode "write") and reads what a site can keep in
// a browser: a cookie, local and session storage, an IndexedDB database,
// a Cache Storage cache and a service worker.
const storageScript = `
async function run(mode) {
  const errs = [];
  const step = async (name, fn) => { try { await fn(); } catch (e) { errs.push(name + ": " + e); } };
  if (mode === "write") {
    await step("cookie", () => { document.cookie = "c=v; max-age=3600"; });
    await step("local", () => localStorage.setItem("k", "v"));
    await step("session", () => sessionStorage.setItem("k", "v"));
    await step("idb", () => new Promise((res, rej) => { const r = indexedDB.open("db", 1);
      r.onupgradeneeded = () => r.result.createObjectStore("s");
      r.onsuccess = () => { r.result.close(); res(); }; r.onerror = () => rej(r.error); }));
    await step("caches", async () => { await (await caches.open("cache")).put("/x", new Response("x")); });
    await step("sw", () => navigator.serviceWorker.register("/sw.js"));
  }
  const out = {cookie: document.cookie, local: localStorage.getItem("k") || "", session: sessionStorage.getItem("k") || "",
    dbs: [], caches: [], workers: 0, errs};
  await step("read idb", async () => { out.dbs = (await indexedDB.databases()).map(d => d.name); });
  await step("read caches", async () => { out.caches = await caches.keys(); });
  await step("read sw", async () => { out.workers = (await navigator.serviceWorker.getRegistrations()).length; });
  return out;
}`

// storageSite serves /page (the top document, with a cacheable script
// and a frame from frameOrigin), /frame, /res.js (counted) and /sw.js.
func storageSite(res *atomic.Int64, frameOrigin func() string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/page", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><title>page</title><script src="/res.js"></script><body><script>%s
window.done = (async () => {
  const mode = %q;
  const self = await run(mode);
  const frame = await new Promise(res => {
    // The frame goes once it answered: a reset must not need it present.
    addEventListener("message", e => { f.remove(); res(e.data); });
    const f = document.createElement("iframe");
    f.src = %q + "/frame?mode=" + mode;
    document.body.appendChild(f);
  });
  return {self, frame};
})();</script>`, storageScript, r.FormValue("mode"), frameOrigin())
	})
	mux.HandleFunc("/frame", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><script>%s
run(%q).then(r => parent.postMessage(r, "*"));</script>`, storageScript, r.FormValue("mode"))
	})
	mux.HandleFunc("/res.js", func(w http.ResponseWriter, r *http.Request) {
		res.Add(1)
		w.Header().Set("Content-Type", "text/javascript")
		w.Header().Set("Cache-Control", "max-age=3600")
		fmt.Fprint(w, "window.res = 1;")
	})
	mux.HandleFunc("/sw.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		fmt.Fprint(w, "self.addEventListener('fetch', () => {});")
	})
	return mux
}

type stored struct {
	Cookie  string   `json:"cookie"`
	Local   string   `json:"local"`
	Session string   `json:"session"`
	DBs     []string `json:"dbs"`
	Caches  []string `json:"caches"`
	Workers int      `json:"workers"`
	Errs    []string `json:"errs"`
}

type storedPage struct{ Self, Frame stored }

// TestReset: what a job's pages kept in a browser (cookies, storage of
// the top document and of a third-party frame, service workers, the HTTP
// cache) is visible to the next page without a reset, and gone after one.
func TestReset(t *testing.T) {
	rt := shared(t)
	ctx := testCtx(t)
	var resA, resB atomic.Int64
	var frameSite *httptest.Server
	siteB := httptest.NewServer(storageSite(&resB, func() string { return "" }))
	defer siteB.Close()
	frameSite = siteB
	siteA := httptest.NewServer(storageSite(&resA, func() string {
		// localhost vs 127.0.0.1: another site, so the frame is third-party.
		return strings.Replace(frameSite.URL, "127.0.0.1", "localhost", 1)
	}))
	defer siteA.Close()
	b := newBrowser(t, rt, browser.Options{})
	load := func(mode string) storedPage {
		t.Helper()
		if _, err := b.Load(ctx, siteA.URL+"/page?mode="+mode, browser.LoadOptions{}); err != nil {
			t.Fatal(err)
		}
		return eval[storedPage](t, b, "window.done")
	}
	written := load("write")
	for _, s := range []stored{written.Self, written.Frame} {
		if len(s.Errs) > 0 {
			t.Logf("write errors: %v", s.Errs)
		}
	}
	want := stored{Cookie: "c=v", Local: "v", Session: "v", DBs: []string{"db"}, Caches: []string{"cache"}, Workers: 1, Errs: []string{}}
	if got := written.Self; !reflect.DeepEqual(got, want) {
		t.Fatalf("written by the top document: %+v, want %+v", got, want)
	}
	if f := written.Frame; f.Local != "v" || f.Session != "v" || len(f.DBs) != 1 || len(f.Caches) != 1 {
		t.Fatalf("written by the third-party frame: %+v", f)
	}
	// Without a reset the next page sees it all (so the test can fail),
	// and its script comes from the HTTP cache.
	if got := load("read"); !reflect.DeepEqual(got, written) {
		t.Fatalf("read without a reset: %+v, want %+v", got, written)
	}
	if n := resA.Load(); n != 1 {
		t.Fatalf("the cacheable script was fetched %d times, want 1 (cached)", n)
	}
	if err := b.(interface{ Reset(context.Context) error }).Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if p := b.Page(); p.URL != "about:blank" {
		t.Fatalf("after a reset the page is %q", p.URL)
	}
	blank := stored{DBs: []string{}, Caches: []string{}}
	got := load("read")
	for name, s := range map[string]stored{"top document": got.Self, "third-party frame": got.Frame} {
		if s.Errs = nil; !reflect.DeepEqual(s, blank) {
			t.Errorf("%s after a reset: %+v", name, s)
		}
	}
	if n := resA.Load(); n != 2 {
		t.Errorf("the cacheable script was fetched %d times in all, want 2 (the cache was cleared)", n)
	}
}

// TestResetSession: what a tab keeps across documents is reset too:
// window.name, the history, popups, the viewport and the navigation
// policy. A browser whose page used URL credentials (which Chromium keeps
// in an auth cache no command clears) is refused.
func TestResetSession(t *testing.T) {
	rt := shared(t)
	ctx := testCtx(t)
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		if r.URL.Path == "/auth" {
			if u, p, ok := r.BasicAuth(); !ok || u != "u" || p != "p" {
				w.Header().Set("WWW-Authenticate", `Basic realm="r"`)
				http.Error(w, "who?", http.StatusUnauthorized)
				return
			}
		}
		fmt.Fprint(w, "<title>ok</title>ok")
	}))
	defer site.Close()
	b := newBrowser(t, rt, browser.Options{})
	cb := b.(*cbrowser)
	if err := b.SetPolicy(ctx, func(string) bool { return true }); err != nil {
		t.Fatal(err)
	}
	if err := b.Input(ctx, browser.InputEvent{Type: browser.InputResize, Width: 400, Height: 300}); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{site.URL + "/a", site.URL + "/b"} {
		if res, err := b.Load(ctx, u, browser.LoadOptions{}); err != nil || res.Status != 200 {
			t.Fatalf("load %s: %d %v", u, res.Status, err)
		}
	}
	eval[any](t, b, `window.name = "secret"; window.open("/popup", "_blank"); 1`)
	pages := func() int {
		res, err := cdp.Call(ctx, cb.bc, target.GetTargets, target.GetTargetsParams{})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, ti := range res.TargetInfos {
			if ti.BrowserContextID == cb.contextID && ti.Type == "page" {
				n++
			}
		}
		return n
	}
	testutil.Eventually(t, 10*time.Second, testutil.Cond("the popup opened", func() bool { return pages() == 2 }))
	if err := cb.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if n := pages(); n != 1 {
		t.Errorf("%d pages after the reset, want 1", n)
	}
	if err := b.SetPolicy(ctx, func(string) bool { return true }); err != nil {
		t.Errorf("a policy after the reset: %v", err)
	}
	if _, err := b.Load(ctx, site.URL+"/c", browser.LoadOptions{}); err != nil {
		t.Fatal(err)
	}
	type state struct {
		Name    string `json:"name"`
		History int    `json:"history"`
		Width   int    `json:"width"`
	}
	got := eval[state](t, b, `({name: window.name, history: history.length, width: innerWidth})`)
	if want := (state{"", 2, browser.DefaultWidth}); got != want {
		t.Errorf("after the reset: %+v, want %+v", got, want)
	}

	// URL credentials: the auth cache keeps them (so the refusal is
	// needed), and the reset refuses.
	host := strings.TrimPrefix(site.URL, "http://")
	if res, err := b.Load(ctx, "http://u:p@"+host+"/auth", browser.LoadOptions{}); err != nil || res.Status != 200 {
		t.Fatalf("auth with credentials: %d %v", res.Status, err)
	}
	if res, err := b.Load(ctx, site.URL+"/auth", browser.LoadOptions{}); err != nil || res.Status != 200 {
		t.Fatalf("auth without credentials after a load with them: %d %v, want 200 (cached)", res.Status, err)
	}
	if err := cb.Reset(ctx); !errors.Is(err, sitedata.ErrNotResettable) {
		t.Errorf("reset after URL credentials: %v, want ErrNotResettable", err)
	}
}
