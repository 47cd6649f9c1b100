package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// signIn creates an account with the CLI and logs a new user in to app.
func signIn(t *testing.T, c *cluster, base, app, name, password string) *user {
	t.Helper()
	if out, err := c.cliStdin(t, password+"\n", "users", "add", name); err != nil {
		t.Fatalf("users add %s: %v %s", name, err, out)
	}
	u := newUser(t, base)
	if st := u.logIn(app, name, password); st != http.StatusSeeOther {
		t.Fatalf("login of %s: %d", name, st)
	}
	return u
}

// logIn posts app's login form and returns the answer's status.
func (u *user) logIn(app, name, password string) int {
	u.t.Helper()
	page := u.get("/" + app + "/login")
	m := csrfField.FindStringSubmatch(page.body)
	if m == nil {
		u.t.Fatalf("login page: %d %s", page.status, page.body)
	}
	resp, err := u.c.PostForm(u.base+"/"+app+"/login", url.Values{"csrf": {m[1]}, "user": {name}, "password": {password}, "next": {"/" + app}})
	if err != nil {
		u.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// socketHeader is what u's client engine sends opening the socket at
// wsURL: the page's origin and u's cookies for it.
func (u *user) socketHeader(wsURL string) http.Header {
	req, _ := http.NewRequest("GET", strings.Replace(wsURL, "ws://", "http://", 1), nil)
	h := http.Header{"Origin": {"http://" + req.URL.Host}}
	for _, ck := range u.c.Jar.Cookies(req.URL) {
		h.Add("Cookie", ck.String())
	}
	return h
}

// dialStatus opens a client engine socket as u, returning the connection
// or the HTTP status of the refused handshake.
func dialStatus(t *testing.T, u *user, wsURL string) (*websocket.Conn, int) {
	t.Helper()
	conn, resp, err := websocket.DefaultDialer.DialContext(ctxT(t, 10*time.Second), wsURL, u.socketHeader(wsURL))
	if err != nil {
		if resp == nil {
			t.Fatalf("dial %s: %v", wsURL, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil, resp.StatusCode
	}
	t.Cleanup(func() { conn.Close() })
	return conn, http.StatusSwitchingProtocols
}

// readText returns the next text message of a client engine socket.
func readText(t *testing.T, conn *websocket.Conn) (map[string]any, error) {
	t.Helper()
	for {
		_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
		var m map[string]any
		typ, data, err := conn.ReadMessage()
		if err != nil {
			return nil, err
		}
		if typ == websocket.TextMessage {
			return m, json.Unmarshal(data, &m)
		}
	}
}

// TestPermissionsLive: two logged-in users of a multiInstance app. Bob is
// refused on Alice's browser and socket until she shares the instance; it
// then appears on his landing page; changing his role reaches his open
// socket at once, and revoking it closes the socket and refuses the next
// request. An admin's grant with the CLI is listed too, and the listing
// survives a master restart (the workers report their grants).
func TestPermissionsLive(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	apps, _ := filepath.Abs("testdata/apps")
	c := startCluster(t, clusterOpts{proxies: 2, workers: 2, extra: []string{"--apps", apps}})
	base := "http://" + c.public
	alice := signIn(t, c, base, "team", "alice", "alice-password")
	bob := signIn(t, c, base, "team", "bob", "bob-password")

	land := alice.get("/team")
	created := alice.post("/team", land.body, "new-instance")
	if created.status != http.StatusSeeOther || !strings.HasPrefix(created.location, "/team/a/") {
		t.Fatalf("new instance: %+v", created)
	}
	instURL := created.location
	iid := strings.TrimPrefix(instURL, "/team/a/")
	nb := alice.post(instURL, alice.get(instURL).body, "new-browser")
	if browserURL.FindStringSubmatch(nb.location) == nil {
		t.Fatalf("new browser: %+v", nb)
	}
	bURL, wsURL := nb.location, "ws://"+c.public+nb.location+"/ws"

	// Not shared: refused everywhere, and not listed for bob.
	if h := bob.get(bURL); h.status != http.StatusForbidden || strings.Contains(h.body, iid+"/b/") {
		t.Fatalf("bob on alice's browser: %d %s", h.status, h.body)
	}
	if _, st := dialStatus(t, bob, wsURL); st != http.StatusForbidden {
		t.Fatalf("bob's socket on alice's browser: %d", st)
	}
	if h := bob.get("/team"); strings.Contains(h.body, iid) {
		t.Fatalf("unshared instance on bob's landing page: %s", h.body)
	}
	share := func(principal, role string) {
		t.Helper()
		if h := alice.post(instURL, alice.get(instURL).body, "grant-instance", "principal", principal, "role", role); h.status != http.StatusSeeOther {
			t.Fatalf("share with %s as %s: %+v", principal, role, h)
		}
	}
	listedFor := func(u *user, want string) {
		t.Helper()
		h := u.get("/team")
		got := strings.Contains(h.body, iid)
		if want == "" && got || want != "" && !strings.Contains(h.body, "alice <span class=\"muted\">(shared with you: "+want+")") {
			t.Fatalf("landing page, want shared as %q:\n%s", want, h.body)
		}
	}

	share("bob", "reader")
	listedFor(bob, "reader")
	if h := bob.get(bURL); h.status != http.StatusOK {
		t.Fatalf("bob as reader on the browser: %d", h.status)
	}
	conn, st := dialStatus(t, bob, wsURL)
	if st != http.StatusSwitchingProtocols {
		t.Fatalf("bob's socket as reader: %d", st)
	}
	if m, err := readText(t, conn); err != nil || m["t"] != "hello" || m["readOnly"] != true {
		t.Fatalf("bob's hello as reader: %v %v", m, err)
	}

	share("bob", "reader-writer")
	if m, err := readText(t, conn); err != nil || m["t"] != "role" || m["readOnly"] != nil {
		t.Fatalf("bob's open socket after the upgrade: %v %v", m, err)
	}
	listedFor(bob, "reader-writer")

	revoked := time.Now()
	share("bob", "none")
	if m, err := readText(t, conn); err != nil || m["t"] != "closed" || !strings.Contains(m["reason"].(string), "no longer shares") {
		t.Fatalf("bob's open socket after the revocation: %v %v", m, err)
	}
	// For the record (docs/users-and-permissions.md): from alice's form
	// post (page load included) to bob's socket being told.
	t.Logf("revocation reached bob's open socket %v after alice's share form was loaded and posted", time.Since(revoked))
	if _, err := readText(t, conn); err == nil {
		t.Fatal("bob's socket stayed open after the revocation")
	}
	if h := bob.get(bURL); h.status != http.StatusForbidden {
		t.Fatalf("bob after the revocation: %d", h.status)
	}
	listedFor(bob, "")

	// An admin shares with carol from the CLI: listed for her, also after a
	// master restart.
	carol := signIn(t, c, base, "team", "carol", "carol-password")
	if out, err := c.cli(t, "share", instURL, "carol", "reader"); err != nil {
		t.Fatalf("share: %v %s", err, out)
	}
	listedFor(carol, "reader")
	c.master.kill()
	c.startMaster(clusterOpts{proxies: 2})
	c.waitFor("workers re-registered", 30*time.Second, func(st *wire.ClusterStatus) bool {
		return connected(st) == 2 && instanceWorker(st, iid) != "" && len(st.Proxies) == 2
	})
	listedFor(carol, "reader")
	listedFor(bob, "")
}
