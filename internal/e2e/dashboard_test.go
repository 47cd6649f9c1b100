package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium"
)

// TestDashboard: the admin dashboard in headless Chromium against a running
// 3-worker cluster: sign in with the token, see the workers and their
// loads update, drain two workers with clicks, and new instances go to the
// third.
func TestDashboard(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	needChromium(t)
	c := startCluster(t, clusterOpts{proxies: 0, workers: 3})
	admin := dashboard(t, c, userBrowsers(t))
	var r struct{ X, Y float64 }
	eventually(t, admin, "three workers shown", "document.body.dataset.workers", "3")
	for _, id := range []string{"w-e2e1", "w-e2e2", "w-e2e3"} {
		eventually(t, admin, "row of "+id, fmt.Sprintf(`document.getElementById("worker-%s") !== null`, id), "true")
	}
	// Each worker's frames: full size (nothing graded them down here).
	eventually(t, admin, "frame size of w-e2e1", `document.getElementById("worker-w-e2e1").dataset.frameSize`, "100%")
	// Every worker's general pool is listed.
	eventually(t, admin, "pools listed", `document.querySelectorAll("#pools tbody tr[data-pool=general]").length`, "3")
	// The jobs panel: every worker's job slots and the queue's figures.
	eventually(t, admin, "jobs panel shown", "document.body.dataset.jobs", "1")
	eventually(t, admin, "job slots of every worker", `document.querySelectorAll("#jobs-panel tr[data-worker]").length`, "3")
	eventually(t, admin, "render cache figures", `document.querySelectorAll("#jobs-panel tr[data-figure]").length > 0`, "true")
	eventually(t, admin, "job wait histogram row", `document.querySelector('#jobs-panel tr[data-figure="Job wait"]') !== null`, "true")
	// The page updates without reloads.
	var first string
	_ = admin.Evaluate(context.Background(), "document.body.dataset.updated", &first)
	eventually(t, admin, "status updates", "document.body.dataset.updated !== "+fmt.Sprintf("%q", first), "true")

	// Drain w-e2e1 and w-e2e2 by clicking their buttons.
	for _, id := range []string{"w-e2e1", "w-e2e2"} {
		sel := fmt.Sprintf(`#worker-%s button.drain`, id)
		eventually(t, admin, "drain button of "+id, fmt.Sprintf(`document.querySelector(%q) !== null`, sel), "true")
		_ = admin.Evaluate(context.Background(), fmt.Sprintf(`(() => { const b = document.querySelector(%q); b.scrollIntoView(); const r = b.getBoundingClientRect(); return {X: r.left + r.width/2, Y: r.top + r.height/2}; })()`, sel), &r)
		click(t, admin, r.X, r.Y)
		eventually(t, admin, id+" shown draining", fmt.Sprintf(`document.getElementById("worker-%s").dataset.draining`, id), "true")
	}
	for i := 0; i < 4; i++ {
		hs := newUser(t, "http://"+c.public).open("/notes")
		if got := hs[len(hs)-1].worker; got != "w-e2e3" {
			t.Fatalf("with w-e2e1 and w-e2e2 drained, an instance went to %s", got)
		}
	}
	// The instances appear; the admin lists a user's browsers and watches
	// one, read-only, with the dashboard's session.
	eventually(t, admin, "instances listed", `document.querySelectorAll("#instances tbody tr").length`, "4")
	_ = admin.Evaluate(context.Background(), `(() => { const b = document.querySelector("#instances button.browsers"); b.scrollIntoView(); const r = b.getBoundingClientRect(); return {X: r.left + r.width/2, Y: r.top + r.height/2}; })()`, &r)
	click(t, admin, r.X, r.Y)
	eventually(t, admin, "browser links", `document.querySelectorAll("#instances a.view").length > 0`, "true")
	var viewURL string
	_ = admin.Evaluate(context.Background(), `document.querySelector("#instances a.view").href`, &viewURL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := admin.Navigate(ctx, viewURL); err != nil {
		t.Fatal(err)
	}
	eventually(t, admin, "admin watches read-only", "document.body.dataset.status", "live (read-only)")
	if err := admin.Navigate(ctx, "http://"+c.public+"/admin"); err != nil {
		t.Fatal(err)
	}
	eventually(t, admin, "dashboard live again", `document.getElementById("live") && document.getElementById("live").textContent`, "live")
	eventually(t, admin, "instances listed again", `document.querySelectorAll("#instances tbody tr").length`, "4")
	_ = admin.Evaluate(context.Background(), `(() => { const b = document.querySelector("#instances button.close"); b.scrollIntoView(); const r = b.getBoundingClientRect(); return {X: r.left + r.width/2, Y: r.top + r.height/2}; })()`, &r)
	click(t, admin, r.X, r.Y)
	c.waitFor("instance closed", 10*time.Second, func(st *wire.ClusterStatus) bool {
		n := 0
		for _, in := range st.Instances {
			if in.App == "notes" {
				n++
			}
		}
		return n == 3
	})
	eventually(t, admin, "closed instance gone from the page", `document.querySelectorAll("#instances tbody tr").length`, "3")
	if !strings.Contains(admin.Page().URL, "/admin") {
		t.Fatalf("dashboard URL: %s", admin.Page().URL)
	}
}

// dashboard opens the admin dashboard in one of users' browsers and signs
// in, typing the admin token and pressing the button as a person would.
func dashboard(t *testing.T, c *cluster, users *chromium.Runtime) browser.Browser {
	t.Helper()
	admin := open(t, users, "http://"+c.public+"/admin")
	eventually(t, admin, "sign-in page", `document.getElementById("sign-in") !== null`, "true")
	var r struct{ X, Y float64 }
	_ = admin.Evaluate(context.Background(), `(() => { const r = document.getElementById("token").getBoundingClientRect(); return {X: r.left + 10, Y: r.top + r.height/2}; })()`, &r)
	click(t, admin, r.X, r.Y)
	typeText(t, admin, c.token)
	clickElement(t, admin, "sign-in")
	eventually(t, admin, "dashboard live", `document.getElementById("live") && document.getElementById("live").textContent`, "live")
	return admin
}

// clickQuery clicks the middle of the first element matching the CSS
// selector sel, scrolled into view, with the mouse.
func clickQuery(t *testing.T, b browser.Browser, sel string) {
	t.Helper()
	var r struct{ X, Y float64 }
	expr := `(() => { const e = document.querySelector(` + jsString(sel) + `); e.scrollIntoView(); const r = e.getBoundingClientRect(); return {X: r.left + r.width/2, Y: r.top + r.height/2}; })()`
	if err := b.Evaluate(context.Background(), expr, &r); err != nil {
		t.Fatalf("where is %s: %v", sel, err)
	}
	click(t, b, r.X, r.Y)
}

// TestDashboardSessions: the dashboard's automation sessions panel against
// a running cluster with a Chromium worker. Signed in as the admin, it
// shows no session, and the queue's limits as the master was started
// with; a session the automation token opens appears with its app, its
// owner and its state: no client, then connected once chromedp connects.
// Its live link is the session's Browser URL, where the admin watches it
// read-only. Its End button ends it: the row goes, and the sessions API no
// longer knows it.
func TestDashboardSessions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	needChromium(t)
	c := startCluster(t, clusterOpts{proxies: 0, workers: 1, runtime: "chromium",
		extra: []string{"--automation-max-sessions", "4", "--automation-queue-max", "5", "--automation-queue-wait", "9s"}})
	admin := dashboard(t, c, userBrowsers(t))
	eventually(t, admin, "no sessions", `document.querySelector("#sessions td.empty").textContent`, "No automation sessions are open.")
	figure := func(name string) string {
		return fmt.Sprintf(`document.querySelector('#session-limits tr[data-figure=%q] td:last-child').textContent`, name)
	}
	for name, want := range map[string]string{"open": "0", "waiting": "0", "queue-max": "5", "queue-wait": "at most 9s", "max-per-principal": "4"} {
		eventually(t, admin, "figure "+name, figure(name), want)
	}

	s := c.openSession(t, "notes")
	row := fmt.Sprintf(`document.querySelector('#sessions tr[data-session=%q]')`, s.ID)
	eventually(t, admin, "the session's row", row+` !== null`, "true")
	eventually(t, admin, "its app", row+`.cells[1].textContent`, "/notes")
	eventually(t, admin, "its owner", row+`.cells[2].textContent`, "automation")
	eventually(t, admin, "its worker", row+`.cells[3].textContent`, "w-e2e1")
	eventually(t, admin, "no client yet", row+`.dataset.state`, "no-client")
	eventually(t, admin, "one open", figure("open"), "1")

	// chromedp connects: the worker reports the session's browser held.
	ctx, disconnect := chromedpSession(t, s.CDPURL)
	defer disconnect()
	tctx, tcancel := context.WithTimeout(ctx, 60*time.Second)
	defer tcancel()
	if err := chromedp.Do(tctx); err != nil {
		t.Fatalf("chromedp connects: %v", err)
	}
	eventually(t, admin, "its client connected", row+`.dataset.state`, "connected")

	// The live link: the session's Browser URL, which the admin watches.
	eventually(t, admin, "its live link", row+`.querySelector("a.live-view").href`, s.LiveURL)
	nctx, ncancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ncancel()
	if err := admin.Navigate(nctx, s.LiveURL); err != nil {
		t.Fatal(err)
	}
	eventually(t, admin, "admin watches the session read-only", "document.body.dataset.status", "live (read-only)")
	if err := admin.Navigate(nctx, "http://"+c.public+"/admin"); err != nil {
		t.Fatal(err)
	}
	eventually(t, admin, "dashboard live again", `document.getElementById("live").textContent`, "live")
	eventually(t, admin, "the session's row again", row+` !== null`, "true")

	// End it from the dashboard.
	clickQuery(t, admin, fmt.Sprintf(`#sessions tr[data-session=%q] button.end`, s.ID))
	eventually(t, admin, "the ended session's row gone", row+` === null`, "true")
	c.sessionGone(t, s.ID, "a session ended from the dashboard")
	if st, _, body := c.api("GET", "/api/v1/sessions", c.token, nil); st != http.StatusOK || strings.Contains(string(body), s.ID) {
		t.Fatalf("the admin's list after the end: %d %s", st, body)
	}
	eventually(t, admin, "no sessions again", `document.querySelector("#sessions td.empty").textContent`, "No automation sessions are open.")
}
