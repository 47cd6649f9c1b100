// Package storagesite is a test site that writes and reads back what a
// site can keep in a browser (cookies, local and session storage,
// IndexedDB, Cache Storage, a service worker, the HTTP cache), in its page
// and in a third-party frame: the probe of the job-browser reset tests
// (worker/browser/chromium, internal/e2e).
package storagesite

import (
	"fmt"
	"net/http"
	"sync/atomic"
)

// script's run(mode) writes (mode "write") and reads what a site can keep
// in a browser.
const script = `
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

// Site serves /page?mode=write|read (a top document with a cacheable,
// counted /res.js and a frame from Frame()), /frame and /sw.js. The page's
// window.done resolves to a Page, also shown as "RESULT<json>END" in
// #done (for a text render).
type Site struct {
	// Frame is the origin of the page's frame ("" = the page's own).
	Frame func() string
	res   atomic.Int64
}

// Res is how many times /res.js was fetched.
func (s *Site) Res() int64 { return s.res.Load() }

func (s *Site) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	mode := r.FormValue("mode")
	switch r.URL.Path {
	case "/page":
		frame := ""
		if s.Frame != nil {
			frame = s.Frame()
		}
		w.Header().Set("Content-Type", "text/html")
		// The frame goes once it answered: a reset must not need it.
		fmt.Fprintf(w, `<!doctype html><title>page</title><script src="/res.js"></script><body><script>%s
window.done = (async () => {
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
  return {self, frame};
})();</script>`, script, mode, frame, mode)
	case "/frame":
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><script>%s
run(%q).then(r => parent.postMessage(r, "*"));</script>`, script, mode)
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

// Stored is what one document found.
type Stored struct {
	Cookie  string   `json:"cookie"`
	Local   string   `json:"local"`
	Session string   `json:"session"`
	DBs     []string `json:"dbs"`
	Caches  []string `json:"caches"`
	Workers int      `json:"workers"`
	Errs    []string `json:"errs"`
}

// Page is what the page and its frame found.
type Page struct{ Self, Frame Stored }

// Written is what a document finds after writing: everything.
func Written() Stored {
	return Stored{Cookie: "c=v", Local: "v", Session: "v", DBs: []string{"db"}, Caches: []string{"cache"}, Workers: 1, Errs: []string{}}
}
