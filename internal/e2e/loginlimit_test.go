package e2e

import (
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestLoginLimit: repeated failed logins lock a user name cluster-wide (429
// with Retry-After, even for the right password, the same for unknown
// names), other names are unaffected, the lockout ends, and the lockouts are
// counted. Every client is on loopback, so the per-address limit is set out
// of the way here (the master's unit tests cover it).
func TestLoginLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	// Bad limits are refused naming the flag.
	out, err := exec.Command(binary, "master", "--data-dir", t.TempDir(), "--login-max-failures", "0").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--login-max-failures") {
		t.Fatalf("master --login-max-failures 0: %v %s", err, out)
	}

	apps, _ := filepath.Abs("testdata/apps")
	c := startCluster(t, clusterOpts{proxies: 2, workers: 2, extra: []string{"--apps", apps,
		"--login-max-failures", "3", "--login-max-failures-per-ip", "1000",
		// Long enough that a loaded machine (race-built processes in CI)
		// does not outlast a lockout between two attempts.
		"--login-lockout", "5s", "--login-max-lockout", "10s"}})
	base := "http://" + c.public
	for _, name := range []string{"alice", "bob"} {
		if out, err := c.cliStdin(t, "correct horse\n", "users", "add", name); err != nil {
			t.Fatalf("users add %s: %v %s", name, err, out)
		}
	}

	u := newUser(t, base)
	m := csrfField.FindStringSubmatch(u.get("/secure/login").body)
	if m == nil {
		t.Fatal("no CSRF token on the login page")
	}
	type answer struct {
		status     int
		retryAfter string
		body       string
	}
	try := func(user, pw string) answer {
		t.Helper()
		resp, err := u.c.PostForm(base+"/secure/login", url.Values{"csrf": {m[1]}, "user": {user}, "password": {pw}, "next": {"/secure"}})
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return answer{resp.StatusCode, resp.Header.Get("Retry-After"), string(b)}
	}
	isLocked := func(what string, a answer) {
		t.Helper()
		n, err := strconv.Atoi(a.retryAfter)
		if a.status != http.StatusTooManyRequests || err != nil || n < 1 ||
			!strings.Contains(a.body, "Too many failed attempts; try again in "+a.retryAfter+" second") {
			t.Fatalf("%s: want 429 with Retry-After and the message, got %d %q %s", what, a.status, a.retryAfter, a.body)
		}
	}

	// The proxies spread the attempts over both workers: the limit is the
	// master's, so it holds across them.
	for _, name := range []string{"alice", "nobody"} {
		for i := 0; i < 3; i++ {
			if a := try(name, "wrong password"); a.status != http.StatusUnauthorized || !strings.Contains(a.body, "Wrong user name or password") {
				t.Fatalf("%s, wrong password %d: %d %s", name, i+1, a.status, a.body)
			}
		}
		// Locked: the right password is refused too, and an unknown name
		// gets exactly the same answer as an existing one.
		isLocked(name+" locked, right password", try(name, "correct horse"))
		isLocked(name+" locked, wrong password", try(name, "wrong password"))
	}
	if a := try("bob", "correct horse"); a.status != http.StatusSeeOther {
		t.Fatalf("bob, while alice is locked: %d %s", a.status, a.body)
	}

	// After the lockout the right password works. Wait as told by
	// Retry-After; the deadline only guards against a hang.
	deadline := time.Now().Add(60 * time.Second)
	for {
		a := try("alice", "correct horse")
		if a.status == http.StatusSeeOther {
			break
		}
		isLocked("alice before the lockout ended", a)
		if time.Now().After(deadline) {
			t.Fatalf("alice still locked after %s", deadline)
		}
		n, _ := strconv.Atoi(a.retryAfter)
		time.Sleep(time.Duration(n) * time.Second)
	}

	fams := scrape(t, "http://"+c.admin+"/metrics", "")
	if v := value(fams, "cloudbrowser_master_login_lockouts_total", map[string]string{"by": "user"}); v < 2 {
		t.Errorf("user lockouts counted: %v, want at least 2", v)
	}
	if v := value(fams, "cloudbrowser_master_logins_total", map[string]string{"outcome": "locked"}); v < 4 {
		t.Errorf("logins refused while locked: %v, want at least 4", v)
	}
	if !logContains(c.master, "login locked after repeated failures") {
		t.Error("the master did not log the lockout")
	}
}
