package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// countingSite is a local service that answers CORS requests and counts
// what reaches it.
func countingSite(t *testing.T, addr string) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	srv := siteAt(t, addr, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Access-Control-Allow-Origin", "*")
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<title>reached</title>Y"))
	}))
	return srv, &hits
}

// loopbackSite serves h on 127.0.0.1 (never [::1], which httptest may
// pick: the apps' egress allows 127.0.0.1) until the test ends.
func loopbackSite(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	return siteAt(t, "127.0.0.1:0", h)
}

// siteAt serves h on addr until the test ends.
func siteAt(t *testing.T, addr string, h http.Handler) *httptest.Server {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// probePage fetches each URL (CORS mode, so a refusal is an error the page
// sees) and puts one letter per URL in the title, Y reached, N refused,
// then after a semicolon what each fetch got: a status, or the error of a
// fetch that failed without one (tried once more after a second, so a
// transient failure is told apart from a refusal).
func probePage(urls ...string) string {
	q := make([]string, len(urls))
	for i, u := range urls {
		q[i] = fmt.Sprintf("%q", u)
	}
	return `<!doctype html><title>probing</title><script>
function probe(u, again) {
  return fetch(u).then(function (r) {
    return r.text().then(function (t) { return [r.ok && t.slice(-1) === "Y" ? "Y" : "N", String(r.status)]; });
  }, function (e) {
    var why = String(e).slice(0, 40);
    if (!again) return [ "N", why ];
    return new Promise(function (ok) { setTimeout(ok, 1000); }).then(function () { return probe(u, false); })
      .then(function (r) { return [r[0], why + " then " + r[1]]; });
  });
}
Promise.all([` + strings.Join(q, ",") + `].map(function (u) { return probe(u, true); })).then(function (r) {
  document.title = "r:" + r.map(function (x) { return x[0]; }).join("") + ";" + r.map(function (x) { return x[1]; }).join("|");
});
</script>`
}

// probeResults waits until the page u shows (its title, through the
// client engine) the probe letters want, logs and returns what each fetch
// got.
func probeResults(t *testing.T, u browser.Browser, want string) []string {
	t.Helper()
	var title string
	testutil.Eventually(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := u.Evaluate(ctx, "document.title", &title); err != nil {
			return fmt.Errorf("probe results: %w", err)
		}
		letters, _, _ := strings.Cut(strings.TrimSuffix(title, " · CloudBrowser"), ";")
		if letters != "r:"+want {
			return fmt.Errorf("probe results: title %q, want letters %q", title, want)
		}
		return nil
	})
	t.Logf("probe results: %s", title)
	_, got, _ := strings.Cut(strings.TrimSuffix(title, " · CloudBrowser"), ";")
	return strings.Split(got, "|")
}

// egressBlocked is the worker's count of refusals for app and reason.
func egressBlocked(t *testing.T, c *cluster, app, reason string) float64 {
	t.Helper()
	fams := scrape(t, "http://"+c.mustStatus().Workers[0].HTTPAddr+"/metrics", c.metricsToken())
	return value(fams, "cloudbrowser_egress_blocked_total", map[string]string{"app": app, "reason": reason})
}

// TestEgressGuard: a visitor's virtual browser cannot reach loopback
// services, the worker's own ports or other apps' bundles, whatever the URL
// looks like; typed addresses are refused unless the app allows them; an
// app's and the cluster's opt-ins work; refusals are counted per app.
func TestEgressGuard(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	needChromium(t)
	svc, svcHits := countingSite(t, "127.0.0.1:0")     // refused by default
	optIn, optInHits := countingSite(t, "127.0.0.2:0") // allowed by the cluster (--egress-allow)
	_, port, _ := net.SplitHostPort(svc.Listener.Addr().String())
	apps, _ := filepath.Abs("../../apps")
	c := startCluster(t, clusterOpts{proxies: 1, workers: 1, runtime: "chromium", extra: []string{"--apps", apps},
		worker: []string{"--egress-allow", "127.0.0.2"}})
	base := "http://" + c.public
	workerAddr := c.mustStatus().Workers[0].HTTPAddr
	_, workerPort, _ := net.SplitHostPort(workerAddr)
	users := userBrowsers(t)

	t.Run("refused by default", func(t *testing.T) {
		tricks := []string{
			"http://127.0.0.1:" + port + "/",
			"http://x@127.0.0.1:" + port + "/",
			"http://localhost.:" + port + "/",
			"http://foo.localhost:" + port + "/",
			"http://0.0.0.0:" + port + "/",
			"http://[::ffff:127.0.0.1]:" + port + "/",
			"http://0x7f.1:" + port + "/",
			"http://[::1]:" + port + "/",
			"http://" + workerAddr + "/metrics",
			"http://pooldemo.app.cloudbrowser.internal/app.json",
			"http://pooldemo.app.cloudbrowser.internal/login.html",
			"http://probe.app.cloudbrowser.internal/app.json",
			"http://" + optIn.Listener.Addr().String() + "/",
		}
		dir := filepath.Join(c.dir, "probe")
		writeBundle(t, dir, `{"name":"Probe","mountPoint":"probe","entry":"index.html","strategy":"singleInstancePerUser"}`, probePage(tricks...))
		if out, err := c.cli(t, "deploy", dir); err != nil {
			t.Fatalf("deploy: %v %s", err, out)
		}
		u := open(t, users, base+"/probe")
		eventually(t, u, "engine", "document.body.dataset.status", "live")
		// Everything refused except the cluster's opt-in (the last URL).
		got := probeResults(t, u, strings.Repeat("N", len(tricks)-1)+"Y")
		// The page's own fetch reads each refusal (a 403 it may read), not
		// an opaque network error; fetch itself refuses a URL with
		// credentials, and the app's own app.json is not served.
		for i, trick := range tricks[:len(tricks)-1] {
			want := "403"
			switch {
			case strings.Contains(trick, "x@"):
				continue
			case strings.HasPrefix(trick, "http://probe.app."):
				want = "404"
			}
			if i >= len(got) || got[i] != want {
				t.Errorf("fetch of %s: got %q, want %s", trick, got, want)
			}
		}
		if n := svcHits.Load(); n != 0 {
			t.Fatalf("the loopback service got %d requests from a virtual browser", n)
		}
		if optInHits.Load() == 0 {
			t.Fatal("the cluster's opt-in was not reached")
		}
		for _, reason := range []string{"loopback", "unspecified", "cluster", "other-app"} {
			if v := egressBlocked(t, c, "probe", reason); v < 1 {
				t.Errorf("egress refusals for probe, %s: %v, want counted", reason, v)
			}
		}
		// Admins see them per app (load reports → status, dashboard, CLI).
		c.waitFor("probe's refusals in the status", 10*time.Second, func(st *wire.ClusterStatus) bool {
			return len(st.Workers) == 1 && st.Workers[0].Load.EgressBlocked["probe"] > 0
		})
		out, err := c.cli(t, "status")
		if err != nil || !strings.Contains(out, "EGRESS BLOCKED") {
			t.Fatalf("status: %v %s", err, out)
		}
	})

	t.Run("typed addresses", func(t *testing.T) {
		// probe does not allow client navigation: a crafted navigate
		// input is refused before it reaches Chromium.
		v := newUser(t, base)
		hs := v.open("/probe")
		last := hs[len(hs)-1]
		if last.status != 200 {
			t.Fatalf("open /probe: %+v", hs)
		}
		conn := dialSocket(t, v, "ws://"+c.public+last.path+"/ws")
		for _, target := range []string{"http://127.0.0.1:" + port + "/", "https://example.com/"} {
			if err := conn.WriteJSON(map[string]string{"t": "input", "type": "navigate", "url": target}); err != nil {
				t.Fatal(err)
			}
			waitMessage(t, conn, "error", "open addresses")
		}
		// An app that allows typed addresses still goes through the guard.
		dir := filepath.Join(c.dir, "surf")
		writeBundle(t, dir, `{"name":"Surf","mountPoint":"surf","entry":"index.html","strategy":"singleInstancePerUser",
			"navigation":{"clientNavigate":true}}`, `<!doctype html><title>surf</title>`)
		if out, err := c.cli(t, "deploy", dir); err != nil {
			t.Fatalf("deploy: %v %s", err, out)
		}
		hs = v.open("/surf")
		last = hs[len(hs)-1]
		conn = dialSocket(t, v, "ws://"+c.public+last.path+"/ws")
		for _, target := range []string{"file:///etc/passwd", "data:text/html,<script>fetch('http://127.0.0.1:" + port + "/')</script>", "javascript:alert(1)"} {
			if err := conn.WriteJSON(map[string]string{"t": "input", "type": "navigate", "url": target}); err != nil {
				t.Fatal(err)
			}
			waitMessage(t, conn, "error", "")
		}
		if err := conn.WriteJSON(map[string]string{"t": "input", "type": "navigate", "url": "http://x@127.0.0.1:" + port + "/"}); err != nil {
			t.Fatal(err)
		}
		waitMessage(t, conn, "page", "Blocked")
		if n := svcHits.Load(); n != 0 {
			t.Fatalf("the loopback service got %d requests", n)
		}
	})

	t.Run("app opt-in, cluster ports still refused", func(t *testing.T) {
		dir := filepath.Join(c.dir, "intranet")
		writeBundle(t, dir, `{"name":"Intranet","mountPoint":"intranet","entry":"index.html","strategy":"singleInstancePerUser",
			"egress":{"allow":["127.0.0.1"]}}`, probePage("http://127.0.0.1:"+port+"/", "http://127.0.0.1:"+workerPort+"/metrics"))
		if out, err := c.cli(t, "deploy", dir); err != nil {
			t.Fatalf("deploy: %v %s", err, out)
		}
		u := open(t, users, base+"/intranet")
		_ = probeResults(t, u, "YN")
		if svcHits.Load() == 0 {
			t.Fatal("the app's opt-in was not reached")
		}
		if v := egressBlocked(t, c, "intranet", "cluster"); v < 1 {
			t.Fatalf("cluster refusal not counted: %v", v)
		}
	})

	t.Run("bad rules are refused at deploy", func(t *testing.T) {
		dir := filepath.Join(c.dir, "badrule")
		writeBundle(t, dir, `{"name":"Bad","mountPoint":"badrule","entry":"index.html","egress":{"allow":["http://x/"]}}`, "<p>x")
		out, err := c.cli(t, "deploy", dir)
		if err == nil || !strings.Contains(out, "egress.allow[0]") {
			t.Fatalf("deploy of a bad rule: %v %s", err, out)
		}
	})
}

// waitMessage reads a client engine socket until a text message of type
// typ whose JSON contains want arrives, within one overall deadline (screen
// frames in between do not extend it).
func waitMessage(t *testing.T, conn *websocket.Conn, typ, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	_ = conn.SetReadDeadline(deadline)
	defer conn.SetReadDeadline(time.Time{})
	for {
		mt, data, err := conn.ReadMessage()
		if err != nil {
			t.Fatalf("waiting for %s %q: %v", typ, want, err)
		}
		if mt != websocket.TextMessage {
			continue
		}
		var m map[string]any
		if json.Unmarshal(data, &m) == nil && m["t"] == typ && strings.Contains(string(data), want) {
			return
		}
	}
}
