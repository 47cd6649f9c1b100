package e2e

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// TestSessionRevocation: changing a user's password or removing them ends
// their sessions on every worker at once (open sockets closed, the next
// request sent to the login page), and a worker that registers later
// refuses those sessions too.
func TestSessionRevocation(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	apps, _ := filepath.Abs("testdata/apps")
	c := startCluster(t, clusterOpts{proxies: 1, workers: 2, extra: []string{"--apps", apps}})
	base := "http://" + c.public
	toLogin := func(u *user, who string) {
		t.Helper()
		if h := u.get("/secure"); h.status != http.StatusFound || !strings.HasPrefix(h.location, "/secure/login") {
			t.Fatalf("%s's old session should be refused: %+v", who, h)
		}
	}

	alice := signIn(t, c, base, "secure", "alice", "first-password")
	hops := alice.open("/secure")
	bpath := hops[len(hops)-1].path
	if browserURL.FindStringSubmatch(bpath) == nil {
		t.Fatalf("alice's browser: %+v", hops)
	}
	conn, st := dialStatus(t, alice, "ws://"+c.public+bpath+"/ws")
	if st != http.StatusSwitchingProtocols {
		t.Fatalf("alice's socket: %d", st)
	}
	if m, err := readText(t, conn); err != nil || m["t"] != "hello" {
		t.Fatalf("hello: %v %v", m, err)
	}
	bob := signIn(t, c, base, "secure", "bob", "bob-password")
	if h := bob.open("/secure"); h[len(h)-1].status != 200 {
		t.Fatalf("bob: %+v", h)
	}

	// passwd: alice's socket is closed with a reason and a way back, her
	// next request goes to the login page, bob is untouched.
	passwd := time.Now()
	if out, err := c.cliStdin(t, "second-password\n", "users", "passwd", "alice"); err != nil {
		t.Fatalf("passwd: %v %s", err, out)
	}
	m, err := readText(t, conn)
	t.Logf("alice's socket closed %v after the passwd command started (CLI process and bcrypt included)", time.Since(passwd))
	if err != nil || m["t"] != "closed" || !strings.Contains(m["reason"].(string), "signed out") || m["reload"] != "/secure/login" {
		t.Fatalf("alice's socket after passwd: %v %v", m, err)
	}
	toLogin(alice, "alice")
	if h := bob.open("/secure"); h[len(h)-1].status != 200 {
		t.Fatalf("bob after alice's passwd: %+v", h)
	}
	// The new password logs her in again, to the same browser. Sessions
	// carry whole seconds, so one issued in the second of the revocation is
	// refused too: she may have to log in once more.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if st := alice.logIn("secure", "alice", "second-password"); st != http.StatusSeeOther {
			t.Fatalf("login with the new password: %d", st)
		}
		h := alice.open("/secure")
		if h[len(h)-1].path == bpath {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice back: %+v, want %s", h, bpath)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// remove: refused too.
	if out, err := c.cliStdin(t, "", "users", "remove", "alice"); err != nil {
		t.Fatalf("remove: %v %s", err, out)
	}
	toLogin(alice, "alice")

	// With every worker gone, bob's password changes; the worker that
	// registers next learns it from the master and refuses his session.
	for _, id := range []string{"w-e2e1", "w-e2e2"} {
		c.workers[id].stop()
	}
	c.waitFor("no workers", 30*time.Second, func(st *wire.ClusterStatus) bool { return connected(st) == 0 })
	if out, err := c.cliStdin(t, "bob-new-password\n", "users", "passwd", "bob"); err != nil {
		t.Fatalf("passwd with no workers: %v %s", err, out)
	}
	c.startWorker("w-e2e3")
	c.waitFor("new worker", 30*time.Second, func(st *wire.ClusterStatus) bool { return connected(st) == 1 })
	toLogin(bob, "bob")
}
