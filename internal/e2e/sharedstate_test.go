package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// adminGet GETs an admin API path with token ("" = none).
func (c *cluster) adminGet(path, token string) (int, string) {
	c.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, "http://"+c.admin+path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// storedMessages is the chat's "messages" as the master stored them.
func storedMessages(t *testing.T, c *cluster, iid string) []string {
	t.Helper()
	status, body := c.adminGet("/api/v1/instances/"+iid+"/state", c.token)
	if status != 200 {
		t.Fatalf("stored state: %d %s", status, body)
	}
	var st struct {
		Values map[string]struct {
			Value []struct{ Text string } `json:"value"`
		} `json:"values"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("stored state: %v: %s", err, body)
	}
	var out []string
	for _, m := range st.Values["messages"].Value {
		out = append(out, m.Text)
	}
	return out
}

// TestSharedStateStoredAtMaster: every chat message a user sees
// acknowledged is in the master's store (admin API), also after a kill -9
// and restart of the master; a message sent while the master is down is
// not acknowledged (the page keeps it in the input) and lands when sent
// again after the restart.
func TestSharedStateStoredAtMaster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	needChromium(t)
	c := startCluster(t, clusterOpts{proxies: 0, workers: 1, runtime: "chromium"})
	// A proxy of its own, so the users' sockets outlive the master.
	standalone := c.start("proxy-standalone", "proxy", "--master", c.rmi, "--listen", anyPort,
		"--secret-file", filepath.Join(c.dir, "data", "proxy.key"), "--name", "standalone").addrs(t)["public"]
	c.waitFor("standalone proxy subscribed", 20*time.Second, func(st *wire.ClusterStatus) bool { return len(st.Proxies) == 2 })
	base := "http://" + standalone
	users := userBrowsers(t)
	alice := open(t, users, base+"/chat")
	eventually(t, alice, "engine live", "document.body.dataset.status", "live")
	eventually(t, alice, "chat loaded", "document.title", "Chat (0) · CloudBrowser")
	m := browserURL.FindStringSubmatch(strings.TrimPrefix(alice.Page().URL, base))
	if m == nil {
		t.Fatalf("not a browser URL: %s", alice.Page().URL)
	}
	iid := m[2]
	enter := func(b browser.Browser) {
		input(t, b, browser.InputEvent{Type: browser.InputKeyDown, Key: "Enter"}, browser.InputEvent{Type: browser.InputKeyUp, Key: "Enter"})
	}
	const n = 8
	var want []string
	for i := 1; i <= n; i++ {
		msg := fmt.Sprintf("m%d", i)
		typeText(t, alice, msg)
		enter(alice)
		eventually(t, alice, "message acknowledged", "document.title", fmt.Sprintf("Chat (%d): %s · CloudBrowser", i, msg))
		want = append(want, msg)
	}
	if got := storedMessages(t, c, iid); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("stored messages %v, want %v", got, want)
	}
	for _, tc := range []struct {
		path, token string
		status      int
		body        string
	}{
		{"/api/v1/instances/" + iid + "/state", "", 401, ""},
		{"/api/v1/instances/" + iid + "/state", "wrong", 401, ""},
		{"/api/v1/instances/w-e2e1.nosuchinstance/state", c.token, 404, "no stored state for instance w-e2e1.nosuchinstance"},
		{"/api/v1/instances/garbage/state", c.token, 400, "not an instance id"},
	} {
		if status, body := c.adminGet(tc.path, tc.token); status != tc.status || !strings.Contains(body, tc.body) {
			t.Errorf("GET %s (token %q): %d %s, want %d %q", tc.path, tc.token, status, body, tc.status, tc.body)
		}
	}

	// The master dies: a message is not acknowledged, and the page says
	// so by keeping it in the input.
	c.master.kill()
	typeText(t, alice, "again")
	enter(alice)
	w := c.workers["w-e2e1"]
	testutil.Eventually(t, 40*time.Second, testutil.Cond("the worker reporting the unacknowledged write", func() bool {
		return logContains(w, "shared-state write not acknowledged by the master")
	}))
	eventually(t, alice, "nothing acknowledged while the master is down", "document.title", "Chat (8): m8 · CloudBrowser")

	c.startMaster(clusterOpts{proxies: 0})
	c.waitFor("worker re-registered with its instance", 30*time.Second, func(st *wire.ClusterStatus) bool {
		return connected(st) == 1 && instanceWorker(st, iid) == "w-e2e1"
	})
	if got := storedMessages(t, c, iid); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("after the master restart: stored %v, want %v", got, want)
	}
	// The text is still in the input: sending it again works now.
	enter(alice)
	eventually(t, alice, "message acknowledged after the restart", "document.title", "Chat (9): again · CloudBrowser")
	want = append(want, "again")
	if got := storedMessages(t, c, iid); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("stored %v, want %v", got, want)
	}
	// A new user of the same instance sees every acknowledged message.
	bob := open(t, users, base+"/chat")
	eventually(t, bob, "bob's engine live", "document.body.dataset.status", "live")
	eventually(t, bob, "bob sees the whole chat", "document.title", "Chat (9): again · CloudBrowser")
}
