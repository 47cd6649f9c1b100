package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
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
	users := userBrowsers(t)
	admin := open(t, users, "http://"+c.public+"/admin")
	eventually(t, admin, "sign-in page", `document.getElementById("sign-in") !== null`, "true")
	// Type the token and press the button, as a person would.
	var r struct{ X, Y float64 }
	_ = admin.Evaluate(context.Background(), `(() => { const r = document.getElementById("token").getBoundingClientRect(); return {X: r.left + 10, Y: r.top + r.height/2}; })()`, &r)
	click(t, admin, r.X, r.Y)
	typeText(t, admin, c.token)
	_ = admin.Evaluate(context.Background(), `(() => { const r = document.getElementById("sign-in").getBoundingClientRect(); return {X: r.left + r.width/2, Y: r.top + r.height/2}; })()`, &r)
	click(t, admin, r.X, r.Y)
	eventually(t, admin, "dashboard live", `document.getElementById("live") && document.getElementById("live").textContent`, "live")
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
