package e2e

import (
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// replay is a client that sends one fixed cookie (a stolen or kept copy)
// and follows no redirects.
func replay(t *testing.T, base string, cookies ...*http.Cookie) *user {
	u := newUser(t, base)
	bu, _ := url.Parse(base)
	u.c.Jar.SetCookies(bu, cookies)
	return u
}

func cookieOf(t *testing.T, u *user, name string) *http.Cookie {
	t.Helper()
	bu, _ := url.Parse(u.base)
	for _, c := range u.c.Jar.Cookies(bu) {
		if c.Name == name {
			return &http.Cookie{Name: c.Name, Value: c.Value}
		}
	}
	t.Fatalf("no %s cookie", name)
	return nil
}

// TestLogoutEndsSession: after a logout, a copy of the session cookie is
// refused on every URL kind, on every worker, and after a master restart;
// the session's open socket is closed with the "signed out" message and a
// new socket is refused. Another session of the same user is untouched. A
// login with next=/secure/../admin stays in the app.
func TestLogoutEndsSession(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	apps, _ := filepath.Abs("testdata/apps")
	o := clusterOpts{proxies: 1, workers: 2, extra: []string{"--apps", apps}}
	c := startCluster(t, o)
	base := "http://" + c.public

	alice := signIn(t, c, base, "secure", "alice", "alice-password")
	hops := alice.open("/secure")
	bpath := hops[len(hops)-1].path
	m := browserURL.FindStringSubmatch(bpath)
	if m == nil {
		t.Fatalf("alice's browser: %+v", hops)
	}
	ipath := "/secure/a/" + m[2]
	conn, st := dialStatus(t, alice, "ws://"+c.public+bpath+"/ws")
	if st != http.StatusSwitchingProtocols {
		t.Fatalf("alice's socket: %d", st)
	}
	if msg, err := readText(t, conn); err != nil || msg["t"] != "hello" {
		t.Fatalf("hello: %v %v", msg, err)
	}
	stolen := replay(t, base, cookieOf(t, alice, "cb_session"))
	if h := stolen.open("/secure"); h[len(h)-1].path != bpath || h[len(h)-1].status != 200 {
		t.Fatalf("the copy works before logout: %+v", h)
	}
	// Alice also has a session in another browser.
	phone := newUser(t, base)
	if st := phone.logIn("secure", "alice", "alice-password"); st != http.StatusSeeOther {
		t.Fatalf("second login: %d", st)
	}

	// Log out with the button of the login page.
	page := alice.get("/secure/login")
	if !strings.Contains(page.body, `id="logout"`) {
		t.Fatalf("login page of a logged-in user: %s", page.body)
	}
	csrf := csrfField.FindStringSubmatch(page.body)[1]
	resp, err := alice.c.PostForm(base+"/secure/logout", url.Values{"csrf": {csrf}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/secure/login" {
		t.Fatalf("logout: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	msg, err := readText(t, conn)
	if err != nil || msg["t"] != "closed" || !strings.Contains(msg["reason"].(string), "signed out") || msg["reload"] != "/secure/login" {
		t.Fatalf("alice's socket after logout: %v %v", msg, err)
	}

	refused := func(when string) {
		t.Helper()
		for _, p := range []string{"/secure", ipath, bpath} {
			if h := stolen.get(p); h.status != http.StatusFound || !strings.HasPrefix(h.location, "/secure/login") {
				t.Fatalf("%s: replayed cookie on %s: %d %s", when, p, h.status, h.location)
			}
		}
		// A form post gets the 401 page.
		resp, err := stolen.c.PostForm(base+"/secure", url.Values{"action": {"new-instance"}})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(b), "Login required") {
			t.Fatalf("%s: replayed cookie on a POST: %d %s", when, resp.StatusCode, b)
		}
		if _, st := dialStatus(t, stolen, "ws://"+c.public+bpath+"/ws"); st != http.StatusUnauthorized {
			t.Fatalf("%s: replayed cookie's socket: %d, want 401", when, st)
		}
		// Every worker refuses it, not only the one that saw the logout.
		for _, w := range c.mustStatus().Workers {
			direct := c.signAsProxy(replay(t, "http://"+w.HTTPAddr, cookieOf(t, stolen, "cb_session")))
			if h := direct.get("/secure"); h.status != http.StatusFound || !strings.HasPrefix(h.location, "/secure/login") {
				t.Fatalf("%s: worker %s accepts the replayed cookie: %+v", when, w.ID, h)
			}
		}
		if h := phone.open("/secure"); h[len(h)-1].status != 200 {
			t.Fatalf("%s: alice's other session: %+v", when, h)
		}
	}
	refused("after logout")

	// The master keeps the logout in its state store and hands it to the
	// workers when they register again.
	c.master.kill()
	c.startMaster(o)
	c.waitFor("workers re-registered", 30*time.Second, func(st *wire.ClusterStatus) bool {
		return connected(st) == 2 && len(st.Proxies) == 1
	})
	refused("after a master restart")

	// A post-login redirect cannot be turned out of the app.
	for _, next := range []string{"/secure/../admin", "/secure/%2e%2e/admin", "//evil.example/secure/"} {
		page := alice.get("/secure/login")
		csrf := csrfField.FindStringSubmatch(page.body)[1]
		resp, err := alice.c.PostForm(base+"/secure/login", url.Values{"csrf": {csrf}, "user": {"alice"}, "password": {"alice-password"}, "next": {next}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/secure" {
			t.Fatalf("login with next=%s: %d to %q, want /secure", next, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
}

// adminSignIn signs in to the dashboard with the token over HTTP and
// returns the dashboard cookie.
func adminSignIn(t *testing.T, base, token string) *http.Cookie {
	t.Helper()
	u := newUser(t, base)
	page := u.get("/admin")
	m := csrfField.FindStringSubmatch(page.body)
	if m == nil {
		t.Fatalf("dashboard sign-in page: %d %s", page.status, page.body)
	}
	resp, err := u.c.PostForm(base+"/admin/login", url.Values{"csrf": {m[1]}, "token": {token}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("dashboard sign-in: %d", resp.StatusCode)
	}
	return cookieOf(t, u, "cb_admin")
}

// TestDashboardSessionEnds: a dashboard cookie replayed after the sign-out,
// or after the master restarted with a new admin token, gets the sign-in
// page, 401 from the API and 403 on a user's browser it could watch before.
func TestDashboardSessionEnds(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	apps, _ := filepath.Abs("testdata/apps")
	o := clusterOpts{proxies: 0, workers: 1, extra: []string{"--apps", apps}}
	c := startCluster(t, o)
	base := "http://" + c.public
	hops := newUser(t, base).open("/typing") // someone else's browser
	bpath := hops[len(hops)-1].path
	if browserURL.FindStringSubmatch(bpath) == nil {
		t.Fatalf("browser: %+v", hops)
	}
	signedIn := func(ck *http.Cookie) (dashboard bool, api, browser int) {
		u := replay(t, base, ck)
		page := u.get("/admin")
		return page.status == 200 && strings.Contains(page.body, `id="live"`), u.get("/api/v1/cluster").status, u.get(bpath).status
	}
	first, second := adminSignIn(t, base, c.token), adminSignIn(t, base, c.token)
	for _, ck := range []*http.Cookie{first, second} {
		if d, api, b := signedIn(ck); !d || api != 200 || b != 200 {
			t.Fatalf("fresh dashboard session: dashboard %v, api %d, browser %d", d, api, b)
		}
	}
	// Sign out with the first.
	resp, err := replay(t, base, first).c.Post(base+"/admin/logout", "application/x-www-form-urlencoded", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-out: %d", resp.StatusCode)
	}
	if d, api, b := signedIn(first); d || api != http.StatusUnauthorized || b != http.StatusForbidden {
		t.Fatalf("signed-out cookie replayed: dashboard %v, api %d, browser %d", d, api, b)
	}
	if d, api, b := signedIn(second); !d || api != 200 || b != 200 {
		t.Fatalf("the other dashboard session: dashboard %v, api %d, browser %d", d, api, b)
	}

	// A new admin token: every dashboard session ends.
	c.master.kill()
	if err := os.WriteFile(filepath.Join(c.dir, "data", "admin.token"), []byte("a-brand-new-admin-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.token = "a-brand-new-admin-token-0123456789"
	c.startMaster(o)
	c.waitFor("worker re-registered", 30*time.Second, func(st *wire.ClusterStatus) bool { return connected(st) == 1 })
	if d, api, b := signedIn(second); d || api != http.StatusUnauthorized || b != http.StatusForbidden {
		t.Fatalf("cookie of the old token: dashboard %v, api %d, browser %d", d, api, b)
	}
	if d, api, _ := signedIn(adminSignIn(t, base, "a-brand-new-admin-token-0123456789")); !d || api != 200 {
		t.Fatal("the new token's session is refused")
	}
}

// TestSecurityHeaders: our pages forbid framing, sniffing and foreign
// scripts; the client engine page may only be framed by the cluster
// itself; behind --public-url https:// every page sends HSTS and every
// cookie is Secure.
func TestSecurityHeaders(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	apps, _ := filepath.Abs("testdata/apps")
	c := startCluster(t, clusterOpts{proxies: 0, workers: 1, extra: []string{"--apps", apps, "--public-url", "https://cb.example.test"}})
	base := "http://" + c.public
	// A cookie jar would not send Secure cookies back to an http:// origin;
	// keep them by hand.
	cl := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	kept := map[string]string{}
	get := func(p string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", base+p, nil)
		for k, v := range kept {
			req.AddCookie(&http.Cookie{Name: k, Value: v})
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		for _, ck := range resp.Cookies() {
			kept[ck.Name] = ck.Value
		}
		return resp
	}
	bpath := "/typing"
	for i := 0; i < 5 && browserURL.FindStringSubmatch(bpath) == nil; i++ {
		resp := get(bpath)
		if resp.StatusCode != http.StatusFound {
			t.Fatalf("GET %s: %d", bpath, resp.StatusCode)
		}
		bpath = resp.Header.Get("Location")
	}
	pages := []struct {
		name, path   string
		status       int
		frameAncests string
	}{
		{"home", "/", 200, "frame-ancestors 'none'"},
		{"login", "/secure/login", 200, "frame-ancestors 'none'"},
		{"landing", "/multi", 200, "frame-ancestors 'none'"},
		{"error (proxy)", "/nosuchapp/a/w-x.y", 404, "frame-ancestors 'none'"},
		{"error (worker)", bpath + "x", 404, "frame-ancestors 'none'"},
		{"dashboard sign-in", "/admin", 200, "frame-ancestors 'none'"},
		{"client engine", bpath, 200, "frame-ancestors 'self'"},
	}
	for _, p := range pages {
		resp := get(p.path)
		h := resp.Header
		csp := h.Get("Content-Security-Policy")
		if resp.StatusCode != p.status || !strings.Contains(csp, p.frameAncests) || strings.Count(strings.Join(h.Values("Content-Security-Policy"), ","), "frame-ancestors") != 1 ||
			h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Referrer-Policy") == "" || !strings.HasPrefix(h.Get("Strict-Transport-Security"), "max-age=") {
			t.Errorf("%s (%s): %d, headers %v", p.name, p.path, resp.StatusCode, h)
		}
		if p.frameAncests == "frame-ancestors 'none'" && (!strings.Contains(csp, "default-src 'self'") || strings.Contains(csp, "unsafe-inline")) {
			t.Errorf("%s: policy %q", p.name, csp)
		}
		for _, ck := range resp.Cookies() {
			if !ck.Secure {
				t.Errorf("%s: cookie %s not Secure behind an https public URL", p.name, ck.Name)
			}
		}
	}
}
