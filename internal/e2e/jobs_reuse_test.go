package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
)

// reuseScript writes (mode "write") and reads what a site can keep in a
// browser: a cookie, local and session storage, an IndexedDB database, a
// Cache Storage cache and a service worker.
const reuseScript = `
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

// reuseSite serves /page (a top document with a cacheable, counted
// /res.js and a third-party frame from frame), /frame and /sw.js. The page
// shows what it found as JSON in #done once done.
type reuseSite struct {
	addr  string
	frame string // origin of the page's frame
	res   atomic.Int64
}

func (s *reuseSite) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	mode := r.FormValue("mode")
	switch r.URL.Path {
	case "/page":
		w.Header().Set("Content-Type", "text/html")
		// The frame goes once it answered: the reset must not need it.
		fmt.Fprintf(w, `<!doctype html><title>page</title><script src="/res.js"></script><body><script>%s
(async () => {
  const self = await run(%q);
  const frame = await new Promise(res => {
    const f = document.createElement("iframe");
    addEventListener("message", e => { f.remove(); res(e.data); });
    f.src = %q + "/frame?mode=" + %q;
    document.body.appendChild(f);
  });
  await fetch("/res.js"); // from the HTTP cache: one request per browser
  const d = document.createElement("pre");
  d.id = "done";
  d.textContent = "RESULT" + JSON.stringify({self, frame}) + "END";
  document.body.appendChild(d);
})();</script>`, reuseScript, mode, s.frame, mode)
	case "/frame":
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><script>%s
run(%q).then(r => parent.postMessage(r, "*"));</script>`, reuseScript, mode)
	case "/res.js":
		s.res.Add(1)
		w.Header().Set("Content-Type", "text/javascript")
		w.Header().Set("Cache-Control", "max-age=3600")
		fmt.Fprint(w, "window.res = 1;")
	case "/sw.js":
		w.Header().Set("Content-Type", "text/javascript")
		fmt.Fprint(w, "self.addEventListener('fetch', () => {});")
	default:
		http.NotFound(w, r)
	}
}

func serveReuseSite(t *testing.T, s *reuseSite) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: s}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

type reuseStored struct {
	Cookie  string   `json:"cookie"`
	Local   string   `json:"local"`
	Session string   `json:"session"`
	DBs     []string `json:"dbs"`
	Caches  []string `json:"caches"`
	Workers int      `json:"workers"`
	Errs    []string `json:"errs"`
}

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
	frame := &reuseSite{}
	frameAddr := serveReuseSite(t, frame)
	_, framePort, _ := net.SplitHostPort(frameAddr)
	// localhost, not 127.0.0.1: another site, so the frame is third-party.
	top := &reuseSite{frame: "http://localhost:" + framePort}
	topAddr := serveReuseSite(t, top)
	// One job slot and no ready browsers: every job leases from the
	// general pool, and a second browser would have to be made.
	c := startCluster(t, clusterOpts{workers: 1, runtime: "chromium",
		extra:  []string{"--apps", "", "--jobs-allow", "127.0.0.1/8"},
		worker: []string{"--job-slots", "1", "--general-pool-min", "0"}})
	tok := c.jobsToken()
	render := func(mode string) (self, fr reuseStored) {
		t.Helper()
		page := "http://" + topAddr + "/page?mode=" + mode
		st, _, b := c.api("GET", "/api/v1/render?format=text&waitSelector=%23done&url="+url.QueryEscape(page), tok, nil)
		text := string(b)
		i, j := strings.Index(text, "RESULT"), strings.LastIndex(text, "END")
		if st != 200 || i < 0 || j < i {
			t.Fatalf("render %s: %d %q", mode, st, text)
		}
		var out struct{ Self, Frame reuseStored }
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
	want := reuseStored{Cookie: "c=v", Local: "v", Session: "v", DBs: []string{"db"}, Caches: []string{"cache"}, Workers: 1, Errs: []string{}}
	if !reflect.DeepEqual(self, want) {
		t.Fatalf("the first job's page wrote %+v, want %+v", self, want)
	}
	if fr.Local != "v" || fr.Session != "v" || len(fr.DBs) != 1 || len(fr.Caches) != 1 {
		t.Fatalf("the first job's third-party frame wrote %+v", fr)
	}
	if n := top.res.Load(); n != 1 {
		t.Fatalf("the first job fetched the cacheable script %d times, want 1 (the second from its cache)", n)
	}
	testutil.Eventually(t, 30*time.Second, testutil.Cond("the first job's browser reset for reuse", func() bool {
		reused, _ := metrics()
		return reused >= 1
	}))

	self, fr = render("read")
	blank := reuseStored{DBs: []string{}, Caches: []string{}, Errs: []string{}}
	if !reflect.DeepEqual(self, blank) {
		t.Errorf("the second job's page found %+v", self)
	}
	if !reflect.DeepEqual(fr, blank) {
		t.Errorf("the second job's third-party frame found %+v", fr)
	}
	if n := top.res.Load(); n != 2 {
		t.Errorf("the cacheable script was fetched %d times in all, want 2 (the second job's cache was empty)", n)
	}
	// The second job ran in the first one's browser: the pool made one.
	if _, created := metrics(); created != 1 {
		t.Errorf("the general pool created %v browsers for two jobs, want 1 (reused)", created)
	}
}
