package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// TestFailoverRestoresBrowser: kill -9 of the worker hosting a chat room.
// The master places the room again on the other worker, which restores
// its shared state and alice's browser from its snapshot: her open client
// engine comes back live on the same Browser URL (same browser id), with
// every acknowledged message.
func TestFailoverRestoresBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	needChromium(t)
	apps, _ := filepath.Abs("../../apps")
	c := startCluster(t, clusterOpts{proxies: 1, workers: 2, runtime: "chromium", extra: []string{"--apps", apps}})
	base := "http://" + c.public
	users := userBrowsers(t)
	alice := open(t, users, base+"/chat")
	eventually(t, alice, "engine live", "document.body.dataset.status", "live")
	eventually(t, alice, "chat loaded", "document.title", "Chat (0) · CloudBrowser")
	path := strings.TrimPrefix(alice.Page().URL, base)
	m := browserURL.FindStringSubmatch(path)
	if m == nil {
		t.Fatalf("not a browser URL: %s", alice.Page().URL)
	}
	iid, bid := m[2], m[3]
	host := instanceWorker(c.mustStatus(), iid)
	const n = 5
	for i := 1; i <= n; i++ {
		msg := fmt.Sprintf("m%d", i)
		typeText(t, alice, msg)
		input(t, alice, browser.InputEvent{Type: browser.InputKeyDown, Key: "Enter"}, browser.InputEvent{Type: browser.InputKeyUp, Key: "Enter"})
		eventually(t, alice, "message acknowledged", "document.title", fmt.Sprintf("Chat (%d): %s · CloudBrowser", i, msg))
	}
	// The master holds alice's browser's snapshot.
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, body := c.adminGet("/api/v1/instances/"+iid+"/state", c.token)
		var st struct {
			Browsers []struct{ ID, Owner, URL string } `json:"browsers"`
		}
		_ = json.Unmarshal([]byte(body), &st)
		if status == 200 && len(st.Browsers) == 1 && st.Browsers[0].ID == bid && strings.Contains(st.Browsers[0].URL, "chat.app.cloudbrowser.internal") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no snapshot of %s at the master: %d %s", bid, status, body)
		}
		time.Sleep(100 * time.Millisecond)
	}

	c.workers[host].kill()
	killed := time.Now()
	var now string
	for now == "" || now == host {
		if time.Since(killed) > 40*time.Second {
			t.Skip("needs master re-placement: the room was not placed again on a live worker")
		}
		time.Sleep(100 * time.Millisecond)
		now = instanceWorker(c.mustStatus(), iid)
	}
	eventually(t, alice, "engine live again", "document.body.dataset.status", "live")
	eventually(t, alice, "every message back", "document.title", fmt.Sprintf("Chat (%d): m%d · CloudBrowser", n, n))
	if got := strings.TrimPrefix(alice.Page().URL, base); got != path {
		t.Fatalf("alice at %s, want her Browser URL %s", got, path)
	}
	t.Logf("kill -9 → live again on %s in %s", now, time.Since(killed).Round(10*time.Millisecond))
	// Reopening the same Browser URL gets the restored browser too.
	fresh := open(t, users, base+path)
	eventually(t, fresh, "reopened engine live", "document.body.dataset.status", "live")
	eventually(t, fresh, "reopened page restored", "document.title", fmt.Sprintf("Chat (%d): m%d · CloudBrowser", n, n))
	if got := strings.TrimPrefix(fresh.Page().URL, base); got != path {
		t.Fatalf("reopened at %s, want %s", got, path)
	}
}
