package e2e

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium"
)

// chatUser opens /chat in a user's own Chromium and waits for the room.
func chatUser(t *testing.T, users *chromium.Runtime, base string) (browser.Browser, string) {
	t.Helper()
	b := open(t, users, base+"/chat")
	eventually(t, b, "engine live", "document.body.dataset.status", "live")
	m := browserURL.FindStringSubmatch(strings.TrimPrefix(b.Page().URL, base))
	if m == nil {
		t.Fatalf("not a Browser URL: %s", b.Page().URL)
	}
	return b, strings.TrimPrefix(b.Page().URL, base)
}

// chatRoom is a cluster of two Chromium workers serving the sample apps,
// with alice's client engine in the chat room.
type chatRoom struct {
	c     *cluster
	opts  clusterOpts // to start its master again
	base  string
	users *chromium.Runtime
	alice browser.Browser
	path  string // alice's Browser URL
	iid   string // the room
}

func newChatRoom(t *testing.T) *chatRoom {
	t.Helper()
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	needChromium(t)
	apps, _ := filepath.Abs("../../apps")
	r := &chatRoom{opts: clusterOpts{proxies: 1, workers: 2, runtime: "chromium", extra: []string{"--apps", apps}}}
	r.c = startCluster(t, r.opts)
	r.base = "http://" + r.c.public
	r.users = userBrowsers(t)
	r.alice, r.path = chatUser(t, r.users, r.base)
	r.iid = instanceOf(t, r.path)
	watchStatus(t, r.alice)
	return r
}

// watchStatus records each status the engine in b shows, with the frames it
// had received then; liveOn checks the record.
func watchStatus(t *testing.T, b browser.Browser) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	const js = `(function () {
	  if (window.__cbStatusLog) { return true; }
	  var log = window.__cbStatusLog = [], b = document.body;
	  // Every setting, a repeated one too: a reconnect sets "moving" again.
	  new MutationObserver(function (records) {
	    records.forEach(function () { log.push((b.dataset.status || "") + "|" + (b.dataset.framesReceived || "0")); });
	  }).observe(b, {attributes: true, attributeFilter: ["data-status"]});
	  return true;
	})()`
	var ok bool
	if err := b.Evaluate(ctx, js, &ok); err != nil || !ok {
		t.Fatalf("status watcher: %v", err)
	}
}

// neverLiveWithoutFrames fails if the engine in b (watched by
// watchStatus) showed "live" after a (re)connection before a frame of it.
func neverLiveWithoutFrames(t *testing.T, b browser.Browser) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var log []string
	if err := b.Evaluate(ctx, "window.__cbStatusLog || null", &log); err != nil || log == nil {
		return // not watched
	}
	base := -1 // frames when the last connection began
	for _, e := range log {
		st, n, _ := strings.Cut(e, "|")
		frames, _ := strconv.Atoi(n)
		switch {
		case st == "connecting" || st == "moving" || st == "reconnecting":
			base = frames
		case strings.HasPrefix(st, "live") && base >= 0 && frames <= base:
			t.Fatalf("the engine showed %q before a frame of its new connection (statuses %v)", st, log)
		}
	}
}

// sendChat sends messages m1..mn from b's chat room, each acknowledged,
// and returns the title that shows them all.
func sendChat(t *testing.T, b browser.Browser, n int) string {
	t.Helper()
	for i := 1; i <= n; i++ {
		typeText(t, b, fmt.Sprintf("m%d", i))
		input(t, b, browser.InputEvent{Type: browser.InputKeyDown, Key: "Enter"}, browser.InputEvent{Type: browser.InputKeyUp, Key: "Enter"})
		eventually(t, b, "message acknowledged", "document.title", fmt.Sprintf("Chat (%d): m%d · CloudBrowser", i, i))
	}
	return fmt.Sprintf("Chat (%d): m%d · CloudBrowser", n, n)
}

// liveOn waits until the client engine b is served by worker, shows
// title and is live, at its Browser URL path still.
func liveOn(t *testing.T, b browser.Browser, base, path, worker, title string) {
	t.Helper()
	eventually(t, b, "the engine served by "+worker, "document.body.dataset.worker", worker)
	eventually(t, b, "the room restored", "document.title", title)
	eventually(t, b, "engine live again", "document.body.dataset.status", "live")
	neverLiveWithoutFrames(t, b)
	if got := strings.TrimPrefix(b.Page().URL, base); got != path {
		t.Fatalf("the engine left its Browser URL: %s, want %s", got, path)
	}
}

// movedOff waits until instance iid is on a worker other than from, and
// returns it.
func (c *cluster) movedOff(iid, from string) string {
	c.t.Helper()
	var moved string
	c.waitFor("the instance placed on another worker", 60*time.Second, func(st *wire.ClusterStatus) bool {
		moved = instanceWorker(st, iid)
		return moved != "" && moved != from
	})
	return moved
}

// TestFailover: two users in the chat sample, 50 messages; kill -9 of the
// worker hosting the room. Both users' client engines are live again on
// the other worker, at the same Browser URLs, with all 50 messages.
func TestFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	needChromium(t)
	apps, _ := filepath.Abs("../../apps")
	c := startCluster(t, clusterOpts{proxies: 1, workers: 2, runtime: "chromium", extra: []string{"--apps", apps}})
	base := "http://" + c.public
	users := userBrowsers(t)
	alice, alicePath := chatUser(t, users, base)
	bob, bobPath := chatUser(t, users, base)
	iid := instanceOf(t, alicePath)
	if instanceOf(t, bobPath) != iid {
		t.Fatalf("two rooms: %s %s", alicePath, bobPath)
	}
	const n = 50
	want := sendChat(t, alice, n)
	eventually(t, bob, "bob sees every message", "document.title", want)

	victim := instanceWorker(c.mustStatus(), iid)
	killed := time.Now()
	c.workers[victim].kill()
	// Right after the kill the engines still show the room as it was
	// (title, "live"): wait for the room to be placed elsewhere, then for
	// each engine to be served by that worker.
	moved := c.movedOff(iid, victim)
	liveOn(t, alice, base, alicePath, moved, want)
	liveOn(t, bob, base, bobPath, moved, want)
	back := time.Since(killed)
	t.Logf("kill -9 → both client engines live again with %d messages: %v", n, back)
	t.Logf("fault-to-live kill-9: %v", back)
	if got := storedMessages(t, c, iid); len(got) != n {
		t.Fatalf("stored %d messages, want %d", len(got), n)
	}
}

// TestMigration: a pooldemo browser signed into the bundled site is moved
// by a drain with migration, and survives a kill -9 afterwards, signed in
// each time; its user's client engine follows without a reload.
func TestMigration(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	needChromium(t)
	apps, _ := filepath.Abs("../../apps")
	c := startCluster(t, clusterOpts{proxies: 1, workers: 2, runtime: "chromium", extra: []string{"--apps", apps}})
	base := "http://" + c.public
	users := userBrowsers(t)
	u := open(t, users, base+"/pooldemo")
	eventually(t, u, "engine live", "document.body.dataset.status", "live")
	eventually(t, u, "signed in", `document.body.dataset.pageUrl.endsWith("/search.html")`, "true")
	path := strings.TrimPrefix(u.Page().URL, base)
	iid := instanceOf(t, path)
	from := instanceWorker(c.mustStatus(), iid)

	req, _ := http.NewRequest(http.MethodPost, "http://"+c.admin+"/api/v1/workers/"+from+"/drain?migrate=true", nil)
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("drain with migration: %d", resp.StatusCode)
	}
	to := instanceWorker(c.mustStatus(), iid)
	if to == from || to == "" {
		t.Fatalf("instance on %q after migrating off %s", to, from)
	}
	eventually(t, u, "engine live after the move", "document.body.dataset.status", "live")
	eventually(t, u, "still signed in after the move", `document.body.dataset.pageUrl.endsWith("/search.html")`, "true")
	if got := strings.TrimPrefix(u.Page().URL, base); got != path {
		t.Fatalf("the engine reloaded: %s, want %s", got, path)
	}

	c.adminPost("/api/v1/workers/" + from + "/undrain")
	c.workers[to].kill()
	var back string
	c.waitFor("instance back after the kill", 30*time.Second, func(st *wire.ClusterStatus) bool {
		back = instanceWorker(st, iid)
		return back != "" && back != to
	})
	eventually(t, u, "the engine served by the worker it is back on", "document.body.dataset.worker", back)
	eventually(t, u, "engine live after the kill", "document.body.dataset.status", "live")
	eventually(t, u, "still signed in after the kill", `document.body.dataset.pageUrl.endsWith("/search.html")`, "true")
}
