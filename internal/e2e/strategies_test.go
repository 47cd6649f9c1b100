package e2e

import (
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

var csrfField = regexp.MustCompile(`name="csrf" value="([a-z0-9]+)"`)

// post submits a landing page form (with the page's CSRF token).
func (u *user) post(path, page, action string, fields ...string) hop {
	u.t.Helper()
	m := csrfField.FindStringSubmatch(page)
	if m == nil {
		u.t.Fatalf("no CSRF token in page:\n%s", page)
	}
	form := url.Values{"csrf": {m[1]}, "action": {action}}
	for i := 0; i+1 < len(fields); i += 2 {
		form.Set(fields[i], fields[i+1])
	}
	resp, err := u.c.PostForm(u.base+path, form)
	if err != nil {
		u.t.Fatal(err)
	}
	resp.Body.Close()
	return hop{path: path, status: resp.StatusCode, location: resp.Header.Get("Location"), worker: resp.Header.Get("X-CB-Worker")}
}

// TestStrategies drives the four instantiation strategies through all
// three URL kinds, as the paper describes them.
func TestStrategies(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	apps, _ := filepath.Abs("testdata/apps")
	c := startCluster(t, clusterOpts{proxies: 2, workers: 2, extra: []string{"--apps", apps}})
	base := "http://" + c.public

	t.Run("multiInstance", func(t *testing.T) {
		alice := newUser(t, base)
		land := alice.get("/multi")
		if land.status != 200 || !strings.Contains(land.body, "You have no instances") || !strings.Contains(land.body, `id="new-instance"`) {
			t.Fatalf("landing page: %d %s", land.status, land.body)
		}
		// A form post without the token is refused.
		resp, _ := alice.c.PostForm(base+"/multi", url.Values{"action": {"new-instance"}})
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("post without CSRF token: %s", resp.Status)
		}
		resp.Body.Close()
		created := alice.post("/multi", land.body, "new-instance")
		if created.status != http.StatusSeeOther || !strings.HasPrefix(created.location, "/multi/a/") || strings.Contains(created.location, "/b/") {
			t.Fatalf("new instance: %+v", created)
		}
		inst := alice.get(created.location)
		if inst.status != 200 || !strings.Contains(inst.body, "No browsers yet") {
			t.Fatalf("instance page: %d %s", inst.status, inst.body)
		}
		b := alice.post(created.location, inst.body, "new-browser")
		if b.status != http.StatusSeeOther || browserURL.FindStringSubmatch(b.location) == nil {
			t.Fatalf("new browser: %+v", b)
		}
		if h := alice.get(b.location); h.status != 200 {
			t.Fatalf("browser: %+v", h)
		}
		again := alice.get(created.location)
		if !strings.Contains(again.body, "<td>you</td>") {
			t.Fatalf("instance page does not list alice's browser: %s", again.body)
		}
		if l := alice.get("/multi"); !strings.Contains(l.body, strings.TrimPrefix(created.location, "/multi/a/")) {
			t.Fatalf("landing page does not list the instance: %s", l.body)
		}
		// Bob has his own landing page: alice's instance is not his, and he
		// cannot open it until she shares it from the instance page.
		bob := newUser(t, base)
		if l := bob.get("/multi"); !strings.Contains(l.body, "You have no instances") {
			t.Fatalf("bob sees alice's instances: %s", l.body)
		}
		if h := bob.get(created.location); h.status != http.StatusForbidden {
			t.Fatalf("bob on alice's instance page: %d", h.status)
		}
		share := func(principal, role string) {
			page := alice.get(created.location)
			m := csrfField.FindStringSubmatch(page.body)
			resp, err := alice.c.PostForm(base+created.location, url.Values{"csrf": {m[1]}, "action": {"grant-instance"},
				"principal": {principal}, "role": {role}})
			if err != nil || resp.StatusCode != http.StatusSeeOther {
				t.Fatalf("share %s %s: %v %v", principal, role, resp.Status, err)
			}
			resp.Body.Close()
		}
		share("*", "reader")
		page := bob.get(created.location)
		if page.status != 200 || !strings.Contains(page.body, "<td>reader</td>") {
			t.Fatalf("bob with reader on the instance: %d %s", page.status, page.body)
		}
		if h := bob.post(created.location, page.body, "new-browser"); h.status != http.StatusForbidden {
			t.Fatalf("a reader created a browser: %+v", h)
		}
		share("*", "reader-writer")
		if h := bob.post(created.location, bob.get(created.location).body, "new-browser"); h.status != http.StatusSeeOther {
			t.Fatalf("a reader-writer could not create a browser: %+v", h)
		}
		// bob cannot change alice's sharing nor close her instance.
		page = bob.get(created.location)
		if h := bob.post(created.location, page.body, "grant-instance"); h.status != http.StatusBadRequest && h.status != http.StatusForbidden {
			t.Fatalf("bob changing alice's grants: %+v", h)
		}
		if h := bob.post(created.location, page.body, "close-instance"); h.status != http.StatusForbidden {
			t.Fatalf("bob closing alice's instance: %+v", h)
		}
		// alice names the instance and her browser; bob cannot.
		page = alice.get(created.location)
		if h := alice.post(created.location, page.body, "rename-instance", "name", "Team room"); h.status != http.StatusSeeOther {
			t.Fatalf("rename instance: %+v", h)
		}
		if h := bob.post(created.location, bob.get(created.location).body, "rename-instance", "name", "mine now"); h.status != http.StatusForbidden {
			t.Fatalf("bob renaming alice's instance: %+v", h)
		}
		abid := browserURL.FindStringSubmatch(b.location)[3]
		if h := alice.post(created.location, page.body, "rename-browser", "browser", abid, "name", "my tab"); h.status != http.StatusSeeOther {
			t.Fatalf("rename browser: %+v", h)
		}
		if p := alice.get(created.location); !strings.Contains(p.body, "Team room") || !strings.Contains(p.body, "my tab") {
			t.Fatalf("names not shown on the instance page: %s", p.body)
		}
		if l := alice.get("/multi"); !strings.Contains(l.body, "Team room") {
			t.Fatalf("instance name not on the landing page: %s", l.body)
		}
		// alice closes it: gone from her landing page and from routing.
		if h := alice.post(created.location, alice.get(created.location).body, "close-instance"); h.status != http.StatusSeeOther || h.location != "/multi" {
			t.Fatalf("closing the instance: %+v", h)
		}
		if h := alice.get(created.location); h.status != http.StatusNotFound {
			t.Fatalf("closed instance: %d", h.status)
		}
		if l := alice.get("/multi"); !strings.Contains(l.body, "You have no instances") {
			t.Fatalf("closed instance still listed: %s", l.body)
		}
	})

	t.Run("singleBrowserPerUser", func(t *testing.T) {
		alice := newUser(t, base)
		land := alice.get("/perbrowser")
		created := alice.post("/perbrowser", land.body, "new-instance")
		m := browserURL.FindStringSubmatch(created.location)
		if created.status != http.StatusSeeOther || m == nil {
			t.Fatalf("new instance should lead to alice's browser: %+v", created)
		}
		// The instance URL leads each user to their own browser in it, once
		// the owner shared the instance.
		instURL := "/perbrowser/a/" + m[2]
		if h := alice.get(instURL); h.location != created.location {
			t.Fatalf("alice's instance URL: %+v, want %s", h, created.location)
		}
		bob := newUser(t, base)
		if h := bob.get(instURL); h.status != http.StatusForbidden {
			t.Fatalf("bob joining an unshared instance: %+v", h)
		}
		if out, err := c.cli(t, "share", instURL, "*", "reader-writer"); err != nil {
			t.Fatalf("share: %v %s", err, out)
		}
		hb := bob.get(instURL)
		bm := browserURL.FindStringSubmatch(hb.location)
		if hb.status != http.StatusFound || bm == nil || bm[2] != m[2] || bm[3] == m[3] {
			t.Fatalf("bob joining the shared instance: %+v", hb)
		}
		if h := bob.get(instURL); h.location != hb.location {
			t.Fatalf("bob's second visit: %+v", h)
		}
	})

	t.Run("singleInstancePerUser: 20 concurrent first requests, one instance", func(t *testing.T) {
		carol := newUser(t, base)
		carol.get("/") // no cookie yet: the first answer from /typing would set it
		h := carol.get("/typing")
		first := browserURL.FindStringSubmatch(h.location)
		if first == nil {
			t.Fatalf("first request: %+v", h)
		}
		dave := newUser(t, base)
		// Give dave an identity first so his 20 requests are one user.
		dave.get("/perbrowser")
		var wg sync.WaitGroup
		got := make([]string, 20)
		why := make([]string, 20) // what came back instead of a redirect
		for i := range got {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := dave.c.Get(base + "/typing")
				if err != nil {
					why[i] = err.Error()
					return
				}
				got[i] = resp.Header.Get("Location")
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
				why[i] = resp.Status + " " + string(b)
				resp.Body.Close()
			}()
		}
		wg.Wait()
		for i := range got {
			if got[i] == "" || got[i] != got[0] {
				t.Fatalf("request %d went to %q (%s), request 0 to %q (%s)", i, got[i], why[i], got[0], why[0])
			}
		}
		st := c.mustStatus()
		n := 0
		for _, in := range st.Instances {
			if in.App == "typing" && in.Owner != "" && strings.Contains(got[0], in.ID) {
				n++
			}
		}
		typing := 0
		for _, in := range st.Instances {
			if in.App == "typing" {
				typing++
			}
		}
		if n != 1 || typing != 2 {
			t.Fatalf("want carol's and dave's instances only, got %d typing instances", typing)
		}
		// The instance URL is not meaningful for this strategy.
		dm := browserURL.FindStringSubmatch(got[0])
		if h := dave.get("/typing/a/" + dm[2]); h.status != 404 || !strings.Contains(h.body, `href="/typing"`) {
			t.Fatalf("instance URL of singleInstancePerUser: %d %s", h.status, h.body)
		}
	})
}
