package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// do runs a statement in a user's page (a click that navigates may end
// the evaluation early: what follows checks the result).
func do(t *testing.T, b browser.Browser, js string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = b.Evaluate(ctx, "(() => { "+js+" ; return true; })()", nil)
}

// logIn fills in and submits an app's login form in a user's Chromium.
func logIn(t *testing.T, b browser.Browser, name, password string) {
	t.Helper()
	eventually(t, b, "login page of "+name, `location.pathname.endsWith("/login") && !!document.getElementById("login")`, "true")
	do(t, b, fmt.Sprintf(`document.getElementById("user").value = %q; document.getElementById("password").value = %q;
		document.getElementById("login").click()`, name, password))
}

// TestAppPagesInChromium: real users' Chromium drives the landing pages
// (log in, create an instance, share it with the form, open a browser),
// an app page shares through the app API (window.cloudbrowser), and an
// app's navigation policy blocks a request in the virtual browser while an
// allowed one goes through.
func TestAppPagesInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	needChromium(t)
	apps, _ := filepath.Abs("testdata/apps")
	c := startCluster(t, clusterOpts{proxies: 1, workers: 1, runtime: "chromium", extra: []string{"--apps", apps}})
	base := "http://" + c.public
	users := userBrowsers(t)
	for _, name := range []string{"alice", "bob", "carol", "dave"} {
		if out, err := c.cliStdin(t, name+"-password\n", "users", "add", name); err != nil {
			t.Fatalf("users add %s: %v %s", name, err, out)
		}
	}

	t.Run("landing pages and app API grants", func(t *testing.T) {
		alice := open(t, users, base+"/grants")
		logIn(t, alice, "alice", "alice-password")
		eventually(t, alice, "alice's landing page", `document.body.innerText.includes("You have no instances")`, "true")
		do(t, alice, `document.getElementById("new-instance").click()`)
		eventually(t, alice, "instance page", `!!document.getElementById("share-instance")`, "true")
		instPath := alice.Page().URL[len(base):]
		do(t, alice, `const f = document.getElementById("share-instance"); f.principal.value = "bob"; f.role.value = "reader";
			f.querySelector("button").click()`)
		eventually(t, alice, "shared with bob", `document.body.innerText.includes("Shared with: bob (reader)")`, "true")
		do(t, alice, `document.getElementById("new-browser").click()`)
		eventually(t, alice, "alice's engine", "document.body.dataset.status", "live")
		// Her page shared through the app API.
		eventually(t, alice, "app API grants", "document.title", "granted true,true,refused · CloudBrowser")
		alicePath := alice.Page().URL[len(base):]
		if m := browserURL.FindStringSubmatch(alicePath); m == nil || "/grants/a/"+m[2] != instPath {
			t.Fatalf("alice's browser %s is not in her instance %s", alicePath, instPath)
		}

		// Bob finds the instance on his landing page, opens it and alice's
		// browser from its page, read-only.
		bob := open(t, users, base+"/grants")
		logIn(t, bob, "bob", "bob-password")
		eventually(t, bob, "shared instance listed", `document.querySelector("tr.shared") ? document.querySelector("tr.shared").innerText.includes("shared with you: reader") : false`, "true")
		do(t, bob, `document.querySelector("tr.shared a").click()`)
		eventually(t, bob, "instance page", "location.pathname", instPath)
		do(t, bob, `document.querySelector("#browsers a").click()`)
		eventually(t, bob, "bob's engine", "document.body.dataset.status", "live (read-only)")
		eventually(t, bob, "bob sees alice's page", "document.title", "granted true,true,refused · CloudBrowser")

		// Carol got alice's browser from the app API (reader-writer): she
		// drives it, yet the instance is not listed for her.
		carol := open(t, users, base+"/grants/login")
		logIn(t, carol, "carol", "carol-password")
		eventually(t, carol, "carol's landing page", `document.body.innerText.includes("You have no instances")`, "true")
		do(t, carol, fmt.Sprintf("location.href = %q", alicePath))
		eventually(t, carol, "carol's engine", "document.body.dataset.status", "live")
		// Dave got the instance from the app API: listed for him.
		dave := open(t, users, base+"/grants/login")
		logIn(t, dave, "dave", "dave-password")
		eventually(t, dave, "dave's landing page", `document.querySelector("tr.shared") ? document.querySelector("tr.shared").innerText.includes("alice") : false`, "true")
	})

	t.Run("navigation policy", func(t *testing.T) {
		var okHits, deniedHits atomic.Int64
		site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Access-Control-Allow-Origin", "*")
			if strings.HasPrefix(r.URL.Path, "/ok/") {
				okHits.Add(1)
			} else {
				deniedHits.Add(1)
			}
			_, _ = w.Write([]byte("fine"))
		}))
		defer site.Close()
		dir := filepath.Join(c.dir, "fenced")
		writeBundle(t, dir, fmt.Sprintf(`{"name":"Fenced","mountPoint":"fenced","entry":"index.html","strategy":"singleInstancePerUser",
			"navigation":{"allow":["%s/ok/*"]},"egress":{"allow":["%s"]}}`, site.URL, site.Listener.Addr()), fmt.Sprintf(`<!doctype html><title>loading</title><script>
function get(p) { return fetch(%q + p).then(function (r) { return r.text(); }, function () { return "blocked"; }); }
Promise.all([get("/ok/a"), get("/denied/b")]).then(function (r) { document.title = "ok:" + r[0] + " denied:" + r[1]; });
</script>`, site.URL))
		if out, err := c.cli(t, "deploy", dir); err != nil {
			t.Fatalf("deploy: %v %s", err, out)
		}
		u := open(t, users, base+"/fenced")
		eventually(t, u, "engine", "document.body.dataset.status", "live")
		eventually(t, u, "the page's requests", "document.title", "ok:fine denied:blocked · CloudBrowser")
		if okHits.Load() != 1 || deniedHits.Load() != 0 {
			t.Fatalf("site hits: allowed %d, denied %d (want 1 and 0: the denied request must not leave Chromium)", okHits.Load(), deniedHits.Load())
		}
		st := c.mustStatus()
		req, _ := http.NewRequest("GET", "http://"+st.Workers[0].HTTPAddr+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer "+c.metricsToken())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		blocked := ""
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "cloudbrowser_navigation_blocked_total "); ok {
				blocked = v
			}
		}
		if blocked == "" || blocked == "0" {
			t.Fatalf("cloudbrowser_navigation_blocked_total = %q, want the blocked request counted", blocked)
		}
	})
}
