package e2e

import (
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func (c *cluster) cliStdin(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	full := append(append([]string{}, args[:2]...), "--master", "http://"+c.admin, "--data-dir", filepath.Join(c.dir, "data"))
	full = append(full, args[2:]...)
	cmd := exec.Command(binary, full...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestLogin: accounts made with the CLI, an app that requires login,
// sessions accepted by every worker, CSRF, logout.
func TestLogin(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	apps, _ := filepath.Abs("testdata/apps")
	c := startCluster(t, clusterOpts{proxies: 2, workers: 2, extra: []string{"--apps", apps}})
	base := "http://" + c.public

	for _, tc := range []struct{ stdin, user, want string }{
		{"short\n", "alice", "password"},
		{"long enough\n", "Bad Name", "user name"},
	} {
		if out, err := c.cliStdin(t, tc.stdin, "users", "add", tc.user); err == nil || !strings.Contains(out, tc.want) {
			t.Fatalf("users add %q: %v %s", tc.user, err, out)
		}
	}
	if out, err := c.cliStdin(t, "correct horse\n", "users", "add", "alice"); err != nil {
		t.Fatalf("users add: %v %s", err, out)
	}

	alice := newUser(t, base)
	h := alice.get("/secure")
	if h.status != http.StatusFound || !strings.HasPrefix(h.location, "/secure/login?next=") {
		t.Fatalf("anonymous visit: %+v", h)
	}
	login := alice.get("/secure/login")
	m := csrfField.FindStringSubmatch(login.body)
	if login.status != 200 || m == nil {
		t.Fatalf("login page: %d %s", login.status, login.body)
	}
	try := func(csrf, user, pw string) hop {
		resp, err := alice.c.PostForm(base+"/secure/login", url.Values{"csrf": {csrf}, "user": {user}, "password": {pw}, "next": {"/secure"}})
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return hop{status: resp.StatusCode, location: resp.Header.Get("Location"), body: string(b)}
	}
	if h := try("forged", "alice", "correct horse"); h.status != http.StatusForbidden {
		t.Fatalf("login without the CSRF token: %+v", h)
	}
	if h := try(m[1], "alice", "wrong password"); h.status != http.StatusUnauthorized || !strings.Contains(h.body, "Wrong user name or password") {
		t.Fatalf("wrong password: %d %s", h.status, h.body)
	}
	if h := try(m[1], "nobody", "correct horse"); h.status != http.StatusUnauthorized {
		t.Fatalf("unknown user: %+v", h)
	}
	if h := try(m[1], "alice", "correct horse"); h.status != http.StatusSeeOther || h.location != "/secure" {
		t.Fatalf("login: %+v", h)
	}
	// The session works on every worker: open the app repeatedly.
	hops := alice.open("/secure")
	last := hops[len(hops)-1]
	bm := browserURL.FindStringSubmatch(last.path)
	if last.status != 200 || bm == nil {
		t.Fatalf("after login: %+v", hops)
	}
	st := c.mustStatus()
	for _, in := range st.Instances {
		if in.ID == bm[2] && in.Owner != "alice" {
			t.Fatalf("instance owner %q, want alice", in.Owner)
		}
	}
	for i := 0; i < 6; i++ {
		if h := alice.get(last.path); h.status != 200 {
			t.Fatalf("browser URL with the session: %+v", h)
		}
		if h := alice.get("/secure"); h.location != last.path {
			t.Fatalf("app URL with the session: %+v", h)
		}
	}
	// Someone else, not logged in, is sent to the login page.
	if h := newUser(t, base).get(last.path); h.status != http.StatusFound || !strings.Contains(h.location, "/secure/login") {
		t.Fatalf("anonymous on alice's browser: %+v", h)
	}
	// Logout ends the session.
	page := alice.get("/secure/login")
	if !strings.Contains(page.body, "logged in as <b>alice</b>") {
		t.Fatalf("login page when logged in: %s", page.body)
	}
	if h := alice.post("/secure/logout", page.body, ""); h.status != http.StatusSeeOther {
		t.Fatalf("logout: %+v", h)
	}
	if h := alice.get("/secure"); !strings.HasPrefix(h.location, "/secure/login") {
		t.Fatalf("after logout: %+v", h)
	}
	// Password change and removal.
	if out, err := c.cliStdin(t, "battery staple\n", "users", "passwd", "alice"); err != nil {
		t.Fatalf("passwd: %v %s", err, out)
	}
	if h := try(m[1], "alice", "correct horse"); h.status != http.StatusUnauthorized {
		t.Fatalf("old password still works: %+v", h)
	}
	if out, err := c.cliStdin(t, "", "users", "remove", "alice"); err != nil {
		t.Fatalf("remove: %v %s", err, out)
	}
	if h := try(m[1], "alice", "battery staple"); h.status != http.StatusUnauthorized {
		t.Fatalf("removed user logs in: %+v", h)
	}
}
