package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/remote"
	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// automationSite serves the pages the automation clients drive: /one has
// a message and a text field, /two and /three only a title; /intercepted
// is what a client's own interception replaces.
func automationSite(t *testing.T) string {
	t.Helper()
	return loopbackSite(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/one":
			fmt.Fprint(w, `<!doctype html><title>page one</title><p id=msg>hello automation</p><input id=field>`)
		case "/intercepted":
			fmt.Fprint(w, `<!doctype html><title>from the site</title>`)
		case "/download":
			fmt.Fprint(w, `<!doctype html><title>downloads</title><a id=dl href="/report.txt">report</a>`)
		case "/report.txt":
			w.Header().Set("Content-Disposition", `attachment; filename="report.txt"`)
			fmt.Fprint(w, "the quarterly report, by automation")
		default:
			fmt.Fprintf(w, `<!doctype html><title>page %s</title>`, strings.TrimPrefix(r.URL.Path, "/"))
		}
	})).URL
}

// apiSession is a session as POST /api/v1/sessions answers it.
type apiSession struct {
	ID, App, InstanceID, BrowserID, CDPURL, LiveURL string
}

func (s *apiSession) UnmarshalJSON(b []byte) error {
	var raw struct {
		ID         string `json:"id"`
		App        string `json:"app"`
		InstanceID string `json:"instanceId"`
		BrowserID  string `json:"browserId"`
		CDPURL     string `json:"cdpUrl"`
		LiveURL    string `json:"liveUrl"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*s = apiSession{raw.ID, raw.App, raw.InstanceID, raw.BrowserID, raw.CDPURL, raw.LiveURL}
	return nil
}

func (c *cluster) automationToken() string {
	c.t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, "data", "automation.token"))
	if err != nil {
		c.t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// openSession opens an automation session of app, with the request's
// other fields from more.
func (c *cluster) openSession(t *testing.T, app string, more ...map[string]any) apiSession {
	t.Helper()
	req := map[string]any{"app": app}
	for _, m := range more {
		for k, v := range m {
			req[k] = v
		}
	}
	st, _, body := c.api("POST", "/api/v1/sessions", c.automationToken(), req)
	if st != http.StatusCreated {
		t.Fatalf("POST /api/v1/sessions: %d %s", st, strings.Join(strings.Fields(string(body)), " "))
	}
	var s apiSession
	if err := json.Unmarshal(body, &s); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s.CDPURL, "ws://"+c.public+"/"+app+"/a/") {
		t.Fatalf("cdpUrl %q is not on the public address %s", s.CDPURL, c.public)
	}
	return s
}

// automationCluster starts one proxy and one Chromium worker with an app
// "auto" that may reach loopback sites, and a user's browser of another
// app open on the same worker (whose page the sessions must never see).
func automationCluster(t *testing.T, workers ...int) (c *cluster, site string, victim browser.Browser) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	needChromium(t)
	site = automationSite(t)
	apps, _ := filepath.Abs("testdata/apps")
	n := 1
	if len(workers) > 0 {
		n = workers[0]
	}
	c = startCluster(t, clusterOpts{proxies: 1, workers: n, runtime: "chromium", extra: []string{"--apps", apps}})
	deployAutoApp(t, c, "auto", `{"name":"Automation","mountPoint":"auto","entry":"index.html","strategy":"singleInstancePerUser","egress":{"allow":["127.0.0.1"]}}`)
	users := userBrowsers(t)
	victim = open(t, users, "http://"+c.public+"/desktop")
	eventually(t, victim, "another user's browser", "document.title", "ready · CloudBrowser")
	return c, site, victim
}

// deployAutoApp deploys app name (its manifest; a one-line start page
// titled "<name> start") and, as its owner, lets the automation token open
// sessions on it.
func deployAutoApp(t *testing.T, c *cluster, name, manifest string) {
	t.Helper()
	dir := filepath.Join(c.dir, name)
	writeBundle(t, dir, manifest, `<!doctype html><title>`+name+` start</title>`)
	if out, err := c.cli(t, "deploy", dir); err != nil {
		t.Fatalf("deploy %s: %v %s", name, err, out)
	}
	if st, _, body := c.api("PUT", "/api/v1/apps/"+name+"/job-users/automation", c.token, nil); st/100 != 2 {
		t.Fatalf("grant automation on %s: %d %s", name, st, body)
	}
}

// chromedpSession connects chromedp to a session's cdpUrl and returns
// its context (cancel: disconnect).
func chromedpSession(t *testing.T, cdpURL string) (context.Context, context.CancelFunc) {
	t.Helper()
	alloc, cancelAlloc := remote.NewAllocator(context.Background(), cdpURL, remote.NoModifyURL)
	ctx, cancel := chromedp.NewContext(alloc)
	return ctx, func() { cancel(); cancelAlloc() }
}

// sessionGone waits until the session is no longer listed (404).
func (c *cluster) sessionGone(t *testing.T, id, why string) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, func() error {
		if st, _, body := c.api("GET", "/api/v1/sessions/"+id, c.automationToken(), nil); st != http.StatusNotFound {
			return fmt.Errorf("%s: GET %d %s", why, st, body)
		}
		return nil
	})
}

// TestAutomationChromedp: the chromedp library drives a session's browser
// through the public address: a new tab lands in the session's context,
// navigates (through the app's egress), and sees only its own targets, not
// the other user's browser on the same Chromium. A session kept alive
// outlives its client until deleted; one without keep-alive ends when its
// client leaves; an idle one ends with its client told why.
func TestAutomationChromedp(t *testing.T) {
	c, site, victim := automationCluster(t)
	s := c.openSession(t, "auto", map[string]any{"keepAlive": "5m"})
	ctx, disconnect := chromedpSession(t, s.CDPURL)
	tctx, tcancel := context.WithTimeout(ctx, 60*time.Second)
	defer tcancel()
	if err := chromedp.Do(tctx, chromedp.Navigate(site+"/one")); err != nil {
		t.Fatal(err)
	}
	text, err := chromedp.Run(tctx, chromedp.Text(chromedp.ID("msg")))
	if err != nil || text != "hello automation" {
		t.Fatalf("text %q, %v", text, err)
	}
	targets, err := chromedp.Targets(tctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range targets {
		if strings.Contains(ti.URL, "desktop") || strings.Contains(ti.Title, "ready") {
			t.Errorf("the session sees another user's target %+v", ti)
		}
	}
	disconnect()
	// Kept alive: still there, and deleted on request.
	if st, _, body := c.api("GET", "/api/v1/sessions/"+s.ID, c.automationToken(), nil); st != http.StatusOK {
		t.Fatalf("a kept-alive session after its client left: %d %s", st, body)
	}
	if st, _, body := c.api("DELETE", "/api/v1/sessions/"+s.ID, c.automationToken(), nil); st != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", st, body)
	}
	// Its URL opens nothing any more.
	dctx, ddisconnect := chromedpSession(t, s.CDPURL)
	defer ddisconnect()
	dctx, dcancel := context.WithTimeout(dctx, 20*time.Second)
	defer dcancel()
	if err := chromedp.Do(dctx); err == nil {
		t.Fatal("a deleted session's CDP URL still connects")
	}

	// No keep-alive: the session ends with its client.
	s2 := c.openSession(t, "auto")
	ctx2, disconnect2 := chromedpSession(t, s2.CDPURL)
	t2, cancel2 := context.WithTimeout(ctx2, 60*time.Second)
	defer cancel2()
	if err := chromedp.Do(t2, chromedp.Navigate(site+"/two")); err != nil {
		t.Fatal(err)
	}
	disconnect2()
	c.sessionGone(t, s2.ID, "a session whose client left")

	// Idle: no command for 2 s and nobody watching ends it.
	s3 := c.openSession(t, "auto", map[string]any{"idleTimeout": "2s", "keepAlive": "5m"})
	ctx3, disconnect3 := chromedpSession(t, s3.CDPURL)
	defer disconnect3()
	t3, cancel3 := context.WithTimeout(ctx3, 60*time.Second)
	defer cancel3()
	if err := chromedp.Do(t3, chromedp.Navigate(site+"/three")); err != nil {
		t.Fatal(err)
	}
	c.sessionGone(t, s3.ID, "an idle session")

	// Its time is up: the client is told why, and the session ends.
	s4 := c.openSession(t, "auto", map[string]any{"timeout": "3s", "keepAlive": "5m"})
	ws, _, err := websocket.DefaultDialer.Dial(s4.CDPURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	_ = ws.SetReadDeadline(time.Now().Add(60 * time.Second))
	for {
		if _, _, err = ws.ReadMessage(); err != nil {
			break
		}
	}
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.CloseGoingAway || !strings.Contains(ce.Text, "time limit") {
		t.Fatalf("a session at its time: %v", err)
	}
	c.sessionGone(t, s4.ID, "a session at its time")
	eventually(t, victim, "the other user's browser", "document.body.dataset.status", "live")
}

// nodeClient runs one of the pinned npm clients (internal/e2e/clients)
// against endpoint and returns what it printed.
func nodeClient(t *testing.T, script, endpoint, site string) map[string]any {
	t.Helper()
	return startNode(t, script, endpoint, site).result(t)
}

// nodeRun is a pinned npm client running: it prints JSON lines, the last
// one its result.
type nodeRun struct {
	script string
	lines  chan string // closed at the end of its output
	done   chan error
	stderr bytes.Buffer
	last   string
}

func startNode(t *testing.T, script, endpoint, site string) *nodeRun {
	t.Helper()
	dir, _ := filepath.Abs("clients")
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil {
		if os.Getenv("CB_REQUIRE_CLIENTS") != "" {
			t.Fatalf("the npm clients are not installed (scripts/install-clients.sh): %v", err)
		}
		t.Skipf("the npm clients are not installed: cd %s && npm ci", dir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, "node", script, endpoint, site)
	cmd.Dir = dir
	n := &nodeRun{script: script, lines: make(chan string, 16), done: make(chan error, 1)}
	cmd.Stderr = &n.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("node %s: %v", script, err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			n.lines <- sc.Text()
		}
		close(n.lines)
		n.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cancel()
		for range n.lines {
		}
	})
	return n
}

// waitLine waits for an output line containing want.
func (n *nodeRun) waitLine(t *testing.T, want string) {
	t.Helper()
	for line := range n.lines {
		n.last = line
		if strings.Contains(line, want) {
			return
		}
	}
	t.Fatalf("node %s ended without %s: %v\nlast: %s\nstderr: %s", n.script, want, <-n.done, n.last, n.stderr.String())
}

// result waits for the end and decodes the last line.
func (n *nodeRun) result(t *testing.T) map[string]any {
	t.Helper()
	for line := range n.lines {
		n.last = line
	}
	err := <-n.done
	var got map[string]any
	if jerr := json.Unmarshal([]byte(strings.TrimSpace(n.last)), &got); jerr != nil || err != nil {
		t.Fatalf("node %s: %v\nstdout: %s\nstderr: %s", n.script, err, n.last, n.stderr.String())
	}
	return got
}

// TestAutomationPlaywright: Playwright's connectOverCDP, given the
// cluster's http:// address (it asks /json/version, which opens the
// session), drives a session: the default context's page, typing, a
// screenshot, its own request interception (page.route), a second page, a
// context of its own, and Browser.close ending only the session.
func TestAutomationPlaywright(t *testing.T) {
	c, site, victim := automationCluster(t)
	endpoint := "http://" + c.admin + "/?app=auto&token=" + c.automationToken()
	got := nodeClient(t, "playwright.cjs", endpoint, site)
	for k, want := range map[string]any{
		"contexts": 1.0, "title": "page one", "text": "hello automation", "field": "typed by playwright",
		"routed": "fulfilled by the client", "secondTitle": "page two", "ownContextTitle": "page three", "contextsWithOwn": 2.0,
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], want, got)
		}
	}
	if n, _ := got["screenshotBytes"].(float64); n < 1000 {
		t.Errorf("screenshot of %v bytes", got["screenshotBytes"])
	}
	// The other user's browser lives on.
	eventually(t, victim, "the other user's browser", "document.body.dataset.status", "live")
}

// TestAutomationPuppeteer: Puppeteer's connect drives a session the same
// way, in the viewport the session asked for.
func TestAutomationPuppeteer(t *testing.T) {
	c, site, victim := automationCluster(t)
	s := c.openSession(t, "auto", map[string]any{"viewport": map[string]any{"width": 600, "height": 400}})
	got := nodeClient(t, "puppeteer.cjs", s.CDPURL, site)
	for k, want := range map[string]any{
		"viewport": "600x400", "title": "page one", "text": "hello automation", "field": "typed by puppeteer",
		"secondTitle": "page two", "ownContextTitle": "page three",
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], want, got)
		}
	}
	eventually(t, victim, "the other user's browser", "document.body.dataset.status", "live")
}

// TestAutomationSurvivesWorker: the worker hosting a session dies
// (kill -9); the session's instance is placed on the other worker with its
// browser's state, and the client reconnects to the same cdpUrl and finds
// its page where it left it.
func TestAutomationSurvivesWorker(t *testing.T) {
	c, site, _ := automationCluster(t, 2)
	s := c.openSession(t, "auto", map[string]any{"keepAlive": "5m"})
	ctx, disconnect := chromedpSession(t, s.CDPURL)
	tctx, tcancel := context.WithTimeout(ctx, 60*time.Second)
	if err := chromedp.Do(tctx); err != nil {
		t.Fatal(err)
	}
	// The session's own page (chromedp opened a tab of its own besides).
	targets, err := chromedp.Targets(tctx)
	if err != nil {
		t.Fatal(err)
	}
	var page target.ID
	for _, ti := range targets {
		if ti.Type == "page" && strings.Contains(ti.URL, "auto.app.cloudbrowser.internal") {
			page = ti.TargetID
		}
	}
	if page == "" {
		t.Fatalf("no session page among %+v", targets)
	}
	pctx, pcancel := chromedp.NewContext(ctx, chromedp.WithTargetID(page))
	if err := chromedp.Do(pctx, chromedp.Navigate(site+"/one")); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(pctx, chromedp.Evaluate[string](`document.cookie = "signed=in-before-the-crash; max-age=3600"`)); err != nil {
		t.Fatal(err)
	}
	// chromedp closes its target when its context ends: refused for the
	// session's own page, which stays.
	if _, err := chromedp.CallBrowser(pctx, target.CloseTarget, target.CloseTargetParams{TargetID: page}); err == nil || !strings.Contains(err.Error(), "own page stays open") {
		t.Fatalf("closing the session's own page: %v", err)
	}
	pcancel()
	tcancel()
	from := instanceWorker(c.mustStatus(), s.InstanceID)
	// The worker's snapshot of the browser (its page) reaches the master.
	testutil.Eventually(t, 30*time.Second, func() error {
		st, _, body := c.api("GET", "/api/v1/instances/"+s.InstanceID+"/state", c.token, nil)
		if st != http.StatusOK || !strings.Contains(string(body), "/one") || strings.Contains(string(body), `"cookies": 0`) {
			return fmt.Errorf("instance state %d %s", st, body)
		}
		return nil
	})
	c.workers[from].kill()
	disconnect()
	to := c.movedOff(s.InstanceID, from)
	t.Logf("session's instance moved %s -> %s", from, to)
	testutil.Eventually(t, 60*time.Second, func() error {
		ctx, disconnect := chromedpSession(t, s.CDPURL)
		defer disconnect()
		tctx, tcancel := context.WithTimeout(ctx, 20*time.Second)
		defer tcancel()
		if err := chromedp.Do(tctx); err != nil { // connects (and opens a tab of chromedp's own)
			return err
		}
		targets, err := chromedp.Targets(tctx)
		if err != nil {
			return err
		}
		for _, ti := range targets {
			if ti.Type != "page" || ti.URL != site+"/one" {
				continue
			}
			// Its page, with the cookie it had.
			pctx, pcancel := chromedp.NewContext(ctx, chromedp.WithTargetID(ti.TargetID), chromedp.WithDetachOnCancel())
			defer pcancel()
			cookie, err := chromedp.Run(pctx, chromedp.Evaluate[string](`document.cookie`))
			if err != nil {
				return err
			}
			if !strings.Contains(cookie, "signed=in-before-the-crash") {
				t.Fatalf("the page's cookies after the move: %q", cookie)
			}
			return nil
		}
		return fmt.Errorf("the session's pages after the move: %+v", targets)
	})
	if st, _, body := c.api("GET", "/api/v1/sessions/"+s.ID, c.automationToken(), nil); st != http.StatusOK {
		t.Fatalf("the session after its worker died: %d %s", st, body)
	}
}

// TestAutomationPolicyHolds: an app's navigation policy holds for an
// automation client, with and without its own request interception
// (page.route continuing every request alongside the worker's), for
// navigations and the page's own fetches; such an app's sessions get no
// contexts of the client's own (the policy covers the session's).
func TestAutomationPolicyHolds(t *testing.T) {
	c, site, _ := automationCluster(t)
	deployAutoApp(t, c, "guarded", `{"name":"Guarded","mountPoint":"guarded","entry":"index.html","strategy":"singleInstancePerUser",
		"egress":{"allow":["127.0.0.1"]},"navigation":{"deny":["http://127.0.0.1:*/denied*"]}}`)
	s := c.openSession(t, "guarded")
	got := nodeClient(t, "policy.cjs", s.CDPURL, site)
	for k, want := range map[string]any{"allowed": "page one", "allowedRouted": "page one", "fetchDenied": "failed", "newContext": "refused"} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], want, got)
		}
	}
	for _, k := range []string{"denied", "deniedRouted"} {
		if v, _ := got[k].(string); !strings.HasPrefix(v, "failed") {
			t.Errorf("%s = %v: a denied address loaded (all: %v)", k, got[k], got)
		}
	}
}

// TestAutomationPooledSignedIn: Playwright through a proxy on a session of
// the pooldemo sample, whose pool signs its browsers in before anyone
// comes: the client finds its page signed in (cookie and all), goes on,
// takes a screenshot and intercepts a request of its own, while the egress
// guard still refuses a loopback address.
func TestAutomationPooledSignedIn(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	needChromium(t)
	site := automationSite(t)
	apps, _ := filepath.Abs("../../apps")
	c := startCluster(t, clusterOpts{proxies: 1, workers: 1, runtime: "chromium", extra: []string{"--apps", apps}})
	s := c.openSession(t, "pooldemo")
	got := nodeClient(t, "pooled.cjs", s.CDPURL, site+"/one")
	for k, want := range map[string]any{
		"title": "Search · signed in as demo", "cookie": true, "who": "Signed in as demo (by the pool, before you arrived).",
		"routed": "fulfilled",
	} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], want, got)
		}
	}
	if n, _ := got["screenshotBytes"].(float64); n < 1000 {
		t.Errorf("screenshot of %v bytes", got["screenshotBytes"])
	}
	if v, _ := got["loopback"].(string); !strings.HasPrefix(v, "refused") {
		t.Errorf("a loopback address through the egress guard: %v", got["loopback"])
	}
	// browser.close() ended the session: its browser went back to its
	// pool (through the pool's back sequence), and the session is gone.
	c.sessionGone(t, s.ID, "a session its client closed")
	testutil.Eventually(t, 30*time.Second, func() error {
		fams := scrape(t, "http://"+c.mustStatus().Workers[0].HTTPAddr+"/metrics", c.metricsToken())
		if n := value(fams, "cloudbrowser_pool_returns_total", map[string]string{"pool": "pooldemo"}); n < 1 {
			return fmt.Errorf("pooldemo's pool got %v browsers back", n)
		}
		if n := value(fams, "cloudbrowser_pool_leased_browsers", map[string]string{"pool": "pooldemo"}); n != 0 {
			return fmt.Errorf("%v pooldemo browsers still leased", n)
		}
		return nil
	})
}

// TestAutomationTakeover: a person given a writer's grant opens the
// session's liveUrl in the client engine and clicks in it: the automation
// client hears CloudBrowser.takeover with the person's user, and
// CloudBrowser.handback once the person has been quiet for a while.
func TestAutomationTakeover(t *testing.T) {
	c, _, _ := automationCluster(t)
	s := c.openSession(t, "auto", map[string]any{"keepAlive": "5m"})
	client := startNode(t, "takeover.cjs", s.CDPURL, "")
	client.waitLine(t, `"ready":true`)

	if out, err := c.cli(t, "share", strings.TrimPrefix(s.LiveURL, "http://"+c.public), "*", "reader-writer"); err != nil {
		t.Fatalf("share: %v %s", err, out)
	}
	ann := open(t, userBrowsers(t), s.LiveURL)
	eventually(t, ann, "the person's engine", "document.body.dataset.status", "live")
	x0, y0 := canvasOrigin(t, ann)
	click(t, ann, x0+50, y0+50)
	// The person sees that they drive, and hands back with the button.
	eventually(t, ann, "the takeover bar", "!document.getElementById('takeover').hidden && document.body.dataset.takeover !== ''", "true")
	eventually(t, ann, "the Hand back button", "!document.getElementById('hand-back').hidden", "true")
	var at struct{ X, Y float64 }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := ann.Evaluate(ctx, `(() => { const r = document.getElementById('hand-back').getBoundingClientRect(); return {X: r.x + r.width/2, Y: r.y + r.height/2}; })()`, &at)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	click(t, ann, at.X, at.Y)
	eventually(t, ann, "the takeover bar after the hand back", "document.getElementById('takeover').hidden", "true")
	got := client.result(t)
	took, _ := got["takeover"].(map[string]any)
	back, _ := got["handback"].(map[string]any)
	if took["user"] == nil || took["user"] == "" || back["user"] != took["user"] {
		t.Fatalf("Playwright saw takeover %v and handback %v", took, back)
	}
	if got["titleAfter"] != got["titleBefore"] {
		t.Errorf("the page after the handback: %v, before: %v", got["titleAfter"], got["titleBefore"])
	}
}

// TestAutomationDownloads: a file the automated page downloads is saved
// on the worker in the session's browser's files, listed and fetched with
// the session's ticket by the client (Playwright), and no other session's
// ticket reads it.
func TestAutomationDownloads(t *testing.T) {
	c, site, _ := automationCluster(t)
	s := c.openSession(t, "auto", map[string]any{"keepAlive": "5m"})
	got := startNode(t, "downloads.cjs", s.CDPURL, site).result(t)
	const want = "the quarterly report, by automation"
	if got["suggested"] != "report.txt" || got["body"] != want || got["fileStatus"] != float64(200) ||
		got["size"] != float64(len(want)) || !strings.Contains(fmt.Sprint(got["disposition"]), "report.txt") {
		t.Fatalf("Playwright's download: %v", got)
	}
	ownTicket := s.CDPURL[strings.Index(s.CDPURL, "?"):]
	dir := strings.TrimSuffix(fmt.Sprint(got["path"]), "/"+path.Base(fmt.Sprint(got["path"])))
	for _, tt := range []struct {
		method, path string
		want         int
	}{
		{"POST", dir, http.StatusMethodNotAllowed},
		{"GET", dir + "/no-such-download", http.StatusNotFound},
		{"GET", dir + "/a/b", http.StatusNotFound},
	} {
		req, _ := http.NewRequest(tt.method, "http://"+c.public+tt.path+ownTicket, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("%s %s: %d, want %d", tt.method, tt.path, resp.StatusCode, tt.want)
		}
	}
	other := c.openSession(t, "auto", nil)
	otherTicket := other.CDPURL[strings.Index(other.CDPURL, "?"):]
	for _, p := range []string{fmt.Sprint(got["path"]), dir} {
		resp, err := http.Get("http://" + c.public + p + otherTicket)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || strings.Contains(string(body), want) {
			t.Errorf("another session's ticket on %s: %d %s", p, resp.StatusCode, body)
		}
	}
}
