package worker

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/assets"
	"github.com/cloudbrowser-go/cloudbrowser/internal/hop"
	"github.com/cloudbrowser-go/cloudbrowser/internal/httpsec"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/web"
	"github.com/cloudbrowser-go/cloudbrowser/worker/httpserve"
)

func TestMain(m *testing.M) { testutil.Main(m) }

const testSecret = "0123456789abcdef0123456789abcdef"

// newTestWorker is a worker that is not connected to any master: the
// handlers for existing instances and browsers work without one.
func newTestWorker(t *testing.T) (*Worker, *httptest.Server) {
	t.Helper()
	w, err := New(Config{ID: "w-test", Secret: testSecret, Master: "127.0.0.1:1", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	w.replica.Store = newLocalReplica()
	srv := httptest.NewServer(signedHandler(w))
	t.Cleanup(func() {
		srv.Close()
		w.Close()
	})
	app := wire.App{Name: "Hello", MountPoint: "hello", Entry: "index.html", Strategy: wire.SingleBrowserPerUser,
		Files: map[string][]byte{"index.html": []byte("<h1>hi</h1>"), "js/app.js": []byte("1"), "app.json": []byte(`{"pool":{"init":[{"type":"#p","text":"hunter2"}]}}`)}}
	if err := w.apps.AddApplication(context.Background(), app); err != nil {
		t.Fatal(err)
	}
	return w, srv
}

var testHopKey = []byte("hop-key-0123456789abcdef01234567")

// signedHandler is the worker's HTTP side as the cluster's proxies reach it: every
// request arrives with a valid hop signature.
func signedHandler(w *Worker) http.Handler {
	w.front.SetHopKey(testHopKey)
	h := w.front
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		r.Header.Set(hop.Header, hop.Sign(testHopKey, time.Now(), hop.FieldsOf(r)))
		h.ServeHTTP(rw, r)
	})
}

func noRedirect() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func TestNewValidates(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"short secret", Config{Secret: "x", Master: "m:1"}, "secret"},
		{"no master", Config{Secret: testSecret}, "Master (the master's RMI address) is required"},
		{"general pool over the limit", Config{Secret: testSecret, Master: "m:1", MaxBrowsers: 4, GeneralMin: 5}, "GeneralMin must be -1 (sized from memory) or between 0 and the browser limit (4), got 5"},
		{"job slots over the limit", Config{Secret: testSecret, Master: "m:1", JobSlots: 65}, "JobSlots must be between 0 and the browser limit (64), got 65"},
		{"bad id", Config{Secret: testSecret, Master: "m:1", ID: "Worker 1"}, `ID "Worker 1" is not a worker id`},
		{"negative rest", Config{Secret: testSecret, Master: "m:1", RestAfter: -time.Second}, "RestAfter must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

func TestCreateInstanceRules(t *testing.T) {
	w, _ := newTestWorker(t)
	ctx := context.Background()
	app, _ := w.catalog.app("hello")
	if err := w.apps.CreateInstance(ctx, wire.CreateInstance{App: app, InstanceID: "w-other.abcdefabcdef"}); err == nil {
		t.Fatal("accepted an instance id of another worker")
	}
	if err := w.apps.CreateInstance(ctx, wire.CreateInstance{App: app, InstanceID: "w-test.abcdefabcdef", Owner: "u", Epoch: 3}); err != nil {
		t.Fatal(err)
	}
	// A retried call is harmless, and takes the master's newer epoch (the
	// first answer was lost, the master placed it again here); an older
	// one changes nothing.
	for _, epoch := range []uint64{5, 4} {
		if err := w.apps.CreateInstance(ctx, wire.CreateInstance{App: app, InstanceID: "w-test.abcdefabcdef", Owner: "u", Epoch: epoch}); err != nil {
			t.Fatal(err)
		}
	}
	if got := w.instances.list(); len(got) != 1 || got[0].Owner != "u" || got[0].Worker != "w-test" || got[0].Epoch != 5 {
		t.Fatalf("instances: %+v", got)
	}
	if err := w.apps.CloseInstance(ctx, wire.ClosedInstance{ID: "w-test.nope"}); err == nil {
		t.Fatal("closed an unknown instance")
	}
	// The master closes a copy under the epoch it made it with: never a
	// copy it placed again since.
	if err := w.apps.CloseInstance(ctx, wire.ClosedInstance{ID: "w-test.abcdefabcdef", Epoch: 3}); !hasCode(err, wire.CodeInstanceLost) {
		t.Fatalf("close under an old epoch: %v, want %s", err, wire.CodeInstanceLost)
	}
	if got := w.instances.list(); len(got) != 1 {
		t.Fatalf("closed under an old epoch: %+v", got)
	}
	if err := w.apps.RemoveApplication(ctx, "hello"); err != nil {
		t.Fatal(err)
	}
	if got := w.instances.list(); len(got) != 0 {
		t.Fatalf("removing the app left instances: %+v", got)
	}
}

func TestInstanceToBrowserFlow(t *testing.T) {
	w, srv := newTestWorker(t)
	app, _ := w.catalog.app("hello")
	iid := "w-test.abcdefabcdef"
	if err := w.apps.CreateInstance(context.Background(), wire.CreateInstance{App: app, InstanceID: iid, Owner: "x"}); err != nil {
		t.Fatal(err)
	}
	shareWithAnyone(w, iid, httpserve.RoleReader)
	c := noRedirect()
	resp, err := c.Get(srv.URL + "/hello/a/" + iid)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if resp.StatusCode != 302 || !strings.HasPrefix(loc, "/hello/a/"+iid+"/b/") || resp.Header.Get("X-CB-Worker") != "w-test" {
		t.Fatalf("instance URL: %d %q", resp.StatusCode, loc)
	}
	cookie := resp.Cookies()[0]

	get := func(path string) (int, string) {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.AddCookie(cookie)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// The same user is sent to the same browser.
	req, _ := http.NewRequest("GET", srv.URL+"/hello/a/"+iid, nil)
	req.AddCookie(cookie)
	resp, _ = c.Do(req)
	resp.Body.Close()
	if resp.Header.Get("Location") != loc {
		t.Fatalf("second visit went to %q, first to %q", resp.Header.Get("Location"), loc)
	}
	tests := []struct {
		path   string
		status int
		want   string
	}{
		{loc, 200, `data-socket="` + loc + `/ws"`},
		{"/hello/a/" + iid + "/_cb/engine.js", 200, "CloudBrowser client engine"},
		{"/hello/a/" + iid + "/_cb/../../etc/passwd", 404, ""},
		{"/hello/a/" + iid + "/_cb/", 404, "nothing at this address"},            // no listing
		{"/hello/a/" + iid + "/_cb/engine.html", 404, "nothing at this address"}, // a template
		{"/hello/a/" + iid + "/b/bnope", 404, "does not exist"},
		// Not here: only the master knows whether it moved or is gone.
		{"/hello/a/w-test.zzzzzzzzzzzz", 421, "moving to another worker"},
		{"/other/a/" + iid, 404, "does not exist"},
		{"/healthz", 200, `"ok"`},
		{"/readyz", 503, "not registered"},
	}
	for _, tc := range tests {
		status, body := get(tc.path)
		if status != tc.status || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s: %d, want %d containing %q; body %.200q", tc.path, status, tc.status, tc.want, body)
		}
	}

	// The client engine socket: hello, ping/pong, read-only for others,
	// and a "closed" notice when the instance closes.
	wsURL := "ws" + strings.TrimPrefix(srv.URL, "http") + loc + "/ws"
	h := http.Header{"Origin": {srv.URL}}
	h.Add("Cookie", cookie.String())
	owner, _, err := websocket.DefaultDialer.Dial(wsURL, h)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	var m map[string]any
	if err := owner.ReadJSON(&m); err != nil || m["t"] != "hello" || m["readOnly"] == true || m["worker"] != "w-test" {
		t.Fatalf("owner hello: %v %v", m, err)
	}
	_ = owner.WriteJSON(map[string]any{"t": "ping", "seq": 7, "data": "abc"})
	if err := owner.ReadJSON(&m); err != nil || m["t"] != "pong" || m["seq"] != float64(7) || m["data"] != "abc" {
		t.Fatalf("pong: %v %v", m, err)
	}
	_ = owner.WriteMessage(websocket.TextMessage, []byte("{not json"))
	if err := owner.ReadJSON(&m); err != nil || m["t"] != "error" {
		t.Fatalf("malformed message: %v %v", m, err)
	}
	viewer, _, err := websocket.DefaultDialer.Dial(wsURL, http.Header{"Origin": {srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	defer viewer.Close()
	if err := viewer.ReadJSON(&m); err != nil || m["readOnly"] != true {
		t.Fatalf("viewer hello: %v %v", m, err)
	}
	// Cross-origin pages cannot open the socket.
	if _, resp, err := websocket.DefaultDialer.Dial(wsURL, http.Header{"Origin": {"http://evil.example"}}); err == nil || resp.StatusCode != 403 {
		t.Fatalf("cross-origin socket: %v", err)
	}
	if err := w.apps.CloseInstance(context.Background(), wire.ClosedInstance{ID: iid}); err != nil {
		t.Fatal(err)
	}
	for _, conn := range []*websocket.Conn{owner, viewer} {
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		m = nil
		if err := conn.ReadJSON(&m); err != nil || m["t"] != "closed" || m["reload"] != "/hello" {
			t.Fatalf("closed notice: %v %v", m, err)
		}
	}
	// The worker cannot tell a closed instance from a moved one: the proxy
	// asks the master again, which says 404.
	if status, _ := get(loc); status != http.StatusMisdirectedRequest {
		t.Fatalf("browser URL of a closed instance: %d", status)
	}
}

// TestEngineAssetsCached: the engine page names its assets by version; the
// worker serves those immutable, with an ETag that gets a 304, gzipped for
// clients that accept it, and with the security headers of every answer.
func TestEngineAssetsCached(t *testing.T) {
	w, srv := newTestWorker(t)
	app, _ := w.catalog.app("hello")
	iid := "w-test.abcdefabcdef"
	if err := w.apps.CreateInstance(context.Background(), wire.CreateInstance{App: app, InstanceID: iid, Owner: "x"}); err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	get := func(path string, hdr ...string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	js := "/hello/a/" + iid + "/_cb/" + must(web.Assets.URL("engine.js"))
	first := get(js, "Accept-Encoding", "gzip")
	h := first.Header
	if first.StatusCode != 200 || h.Get("Cache-Control") != assets.Immutable || h.Get("Content-Encoding") != "gzip" ||
		h.Get("Vary") != "Accept-Encoding" || !strings.HasPrefix(h.Get("Content-Type"), "text/javascript") ||
		h.Get("ETag") == "" || h.Get("X-CB-Worker") != "w-test" ||
		h.Get("Content-Security-Policy") != httpsec.PageCSP() || h.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("versioned engine.js: %d %v", first.StatusCode, h)
	}
	again := get(js, "Accept-Encoding", "gzip", "If-None-Match", h.Get("ETag"))
	if again.StatusCode != 304 || again.Header.Get("ETag") != h.Get("ETag") || again.Header.Get("Cache-Control") != assets.Immutable {
		t.Fatalf("revalidated engine.js: %d %v", again.StatusCode, again.Header)
	}
	plain := get("/hello/a/"+iid+"/_cb/engine.css", "Accept-Encoding", "identity")
	if plain.StatusCode != 200 || plain.Header.Get("Cache-Control") != assets.Revalidate || plain.Header.Get("Content-Encoding") != "" ||
		plain.Header.Get("ETag") != `"`+web.Assets.Version("engine.css")+`"` {
		t.Fatalf("unversioned engine.css: %d %v", plain.StatusCode, plain.Header)
	}
	// Assets are read-only.
	req, _ := http.NewRequest("POST", srv.URL+js, nil)
	if resp, err := c.Do(req); err != nil || resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("POST engine.js: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestBundleServer: an app's files are served only through its browsers'
// egress endpoints, on its internal origin; never its manifest, never
// another app's files.
func TestBundleServer(t *testing.T) {
	w, _ := newTestWorker(t)
	app, _ := w.catalog.app("hello")
	iid := "w-test.bundlebundle"
	if err := w.apps.CreateInstance(context.Background(), wire.CreateInstance{App: app, InstanceID: iid}); err != nil {
		t.Fatal(err)
	}
	in, _ := w.instances.get(iid)
	entry := w.entryURL(in)
	if entry != "http://hello.app.cloudbrowser.internal/.instance/"+iid+"/index.html" {
		t.Fatalf("entry %s", entry)
	}
	opts, err := w.browserOptions("hello")
	if err != nil {
		t.Fatal(err)
	}
	defer opts.Egress.Close()
	pu, _ := url.Parse(opts.Egress.ProxyURL())
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
	defer client.CloseIdleConnections()
	base := "http://hello.app.cloudbrowser.internal"
	for _, tc := range []struct {
		url    string
		status int
		body   string
	}{
		{entry, 200, "<h1>hi</h1>"},
		{base + "/.instance/" + iid + "/js/app.js", 200, "1"},
		{base + "/js/app.js", 200, "1"},
		{base + "/app.json", 404, ""},
		{base + "/.instance/" + iid + "/app.json", 404, ""},
		{base + "/.instance/" + iid + "/../../secret", 404, ""},
		{base + "/.instance/w-test.nope/index.html", 404, ""},
		{"http://other.app.cloudbrowser.internal/index.html", 403, ""},
	} {
		resp, err := client.Get(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || (tc.body != "" && string(b) != tc.body) {
			t.Errorf("GET %s: %d %q, want %d %q", tc.url, resp.StatusCode, b, tc.status, tc.body)
		}
	}
}

// shareWithAnyone grants a role on an instance to every visitor, as its
// owner would from the instance page.
func shareWithAnyone(w *Worker, iid string, r httpserve.Role) {
	in, _ := w.instances.get(iid)
	in.mu.Lock()
	in.perms[httpserve.Anyone] = r
	in.mu.Unlock()
}

func TestAutoGeneralMin(t *testing.T) {
	const gib = 1 << 30
	tests := []struct {
		avail uint64
		max   int
		want  int
	}{
		{0, 64, 0},         // unknown or nothing available
		{gib - 1, 64, 0},   // under a GiB: none
		{gib, 64, 1},       // one per GiB
		{3*gib + 5, 64, 2}, // at most 2
		{24 * gib, 1, 1},   // within the browser limit
		{24 * gib, 64, 2},
	}
	for _, tc := range tests {
		if got := AutoGeneralMin(tc.avail, tc.max); got != tc.want {
			t.Errorf("AutoGeneralMin(%d, %d) = %d, want %d", tc.avail, tc.max, got, tc.want)
		}
	}
}
