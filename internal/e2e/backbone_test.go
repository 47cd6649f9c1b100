package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

var browserURL = regexp.MustCompile(`^/([a-z0-9_-]+)/a/([a-z0-9.-]+)/b/([a-z0-9]+)$`)

// TestBackbone is the backbone issue's end-to-end test: a master with two
// proxy processes and three workers, driven over HTTP and WebSocket.
func TestBackbone(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	c := startCluster(t, clusterOpts{proxies: 2, workers: 3})
	base := "http://" + c.public

	// Home page lists the public apps.
	alice := newUser(t, base)
	home := alice.get("/")
	if home.status != 200 || !strings.Contains(home.body, `href="/hello"`) || !strings.Contains(home.body, `href="/notes"`) {
		t.Fatalf("home page: %d %q", home.status, home.body)
	}

	// Application URL -> Browser URL (the master places the instance and
	// opens alice's browser in it, on whichever worker hosts it).
	hops := alice.open("/hello")
	if len(hops) != 2 {
		t.Fatalf("want 2 hops (app, browser), got %+v", hops)
	}
	last := hops[1]
	m := browserURL.FindStringSubmatch(last.path)
	if last.status != 200 || m == nil || m[1] != "hello" {
		t.Fatalf("chain did not end at a Browser URL: %+v", hops)
	}
	iid, bid := m[2], m[3]
	if !strings.Contains(last.body, "/hello/a/"+iid+"/b/"+bid+"/ws") {
		t.Fatalf("client engine page does not point at its socket: %s", last.body)
	}
	st := c.mustStatus()
	owner := instanceWorker(st, iid)
	if owner == "" {
		t.Fatalf("instance %s not in the master's table", iid)
	}
	if !strings.HasPrefix(iid, owner+".") {
		t.Fatalf("instance id %s does not encode its worker %s", iid, owner)
	}
	// App-instance and Browser URLs reach the worker the table names, every
	// time, whichever proxy process accepts the connection.
	for i := 0; i < 20; i++ {
		for p, status := range map[string]int{
			"/hello/a/" + iid:                    404, // not meaningful for singleAppInstance: a page pointing to /hello
			last.path:                            200,
			"/hello/a/" + iid + "/_cb/engine.js": 200,
		} {
			h := alice.get(p)
			if h.worker != owner || h.status != status {
				t.Fatalf("GET %s: status %d from worker %q, want %d from the table's %s", p, h.status, h.worker, status, owner)
			}
		}
	}
	// The same user gets the same browser; another user gets their own
	// browser in the same (single) instance.
	if again := alice.open("/hello"); again[len(again)-1].path != last.path {
		t.Fatalf("alice got a second browser: %s vs %s", again[len(again)-1].path, last.path)
	}
	bob := newUser(t, base)
	bobHops := bob.open("/hello")
	bm := browserURL.FindStringSubmatch(bobHops[len(bobHops)-1].path)
	if bm == nil || bm[2] != iid || bm[3] == bid {
		t.Fatalf("bob should get his own browser in instance %s: %+v", iid, bobHops)
	}

	// singleInstancePerUser: six users -> six instances, spread over the
	// workers by the balancer.
	perWorker := map[string]int{}
	for i := 0; i < 6; i++ {
		u := newUser(t, base)
		hs := u.open("/notes")
		mm := browserURL.FindStringSubmatch(hs[len(hs)-1].path)
		if mm == nil {
			t.Fatalf("notes chain: %+v", hs)
		}
		perWorker[hs[len(hs)-1].worker]++
	}
	if len(perWorker) < 2 {
		t.Fatalf("six placements all went to one worker: %v", perWorker)
	}
	t.Logf("notes instances per worker: %v", perWorker)

	// Bad input: unknown app, unknown instance, malformed id.
	for _, tc := range []struct {
		path   string
		status int
		text   string
	}{
		{"/nope", 404, "There is no application at this address."},
		{"/hello/a/" + owner + ".zzzzzzzzzzzz", 404, "This app instance does not exist"},
		{"/hello/a/BAD!", 400, "not a valid CloudBrowser URL"},
		{"/hello/a/" + iid + "/b/bnotabrowser", 404, "This virtual browser does not exist"},
	} {
		h := alice.get(tc.path)
		if h.status != tc.status || !strings.Contains(h.body, tc.text) {
			t.Errorf("GET %s: %d, want %d with %q; body %q", tc.path, h.status, tc.status, tc.text, h.body)
		}
	}

	// WebSocket through a proxy: 1000 echoes, no further master lookups.
	ws := dialSocket(t, alice, "ws://"+c.public+"/hello/a/"+iid+"/b/"+bid+"/ws")
	var hello map[string]any
	if err := ws.ReadJSON(&hello); err != nil || hello["t"] != "hello" || hello["worker"] != owner || hello["readOnly"] == true {
		t.Fatalf("hello: %v %v", hello, err)
	}
	before := c.mustStatus().RouteLookups
	for i := 1; i <= 1000; i++ {
		payload := fmt.Sprintf("echo-%d-%s", i, strings.Repeat("x", i%200))
		if err := ws.WriteJSON(map[string]any{"t": "ping", "seq": i, "data": payload}); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		var pong struct {
			T    string `json:"t"`
			Seq  int    `json:"seq"`
			Data string `json:"data"`
		}
		if err := ws.ReadJSON(&pong); err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if pong.T != "pong" || pong.Seq != i || pong.Data != payload {
			t.Fatalf("echo %d: got %+v", i, pong)
		}
	}
	if after := c.mustStatus().RouteLookups; after != before {
		t.Fatalf("the WebSocket relay asked the master %d more times", after-before)
	}
	// Default policy: bob cannot open alice's browser...
	if h := bob.get(last.path); h.status != http.StatusForbidden {
		t.Fatalf("bob opening alice's browser: %d, want 403", h.status)
	}
	// ...until she shares it (here an admin does, with the CLI).
	if out, err := c.cli(t, "share", base+last.path, "*", "reader"); err != nil {
		t.Fatalf("share: %v %s", err, out)
	}
	bobWS := dialSocket(t, bob, "ws://"+c.public+"/hello/a/"+iid+"/b/"+bid+"/ws")
	var bobHello map[string]any
	if err := bobWS.ReadJSON(&bobHello); err != nil || bobHello["readOnly"] != true {
		t.Fatalf("bob's hello: %v %v", bobHello, err)
	}
	bobWS.Close()

	// A proxy process that dies is restarted; the port keeps serving.
	kids := childPids(c.master.pid())
	if len(kids) != 2 {
		t.Fatalf("master should have 2 proxy children, has %v", kids)
	}
	if err := syscall.Kill(kids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c.waitFor("proxy restarted", 20*time.Second, func(st *wire.ClusterStatus) bool {
		now := childPids(c.master.pid())
		return len(now) == 2 && !slices.Contains(now, kids[0]) && len(st.Proxies) == 2
	})
	for i := 0; i < 10; i++ {
		if h := alice.get("/hello/a/" + iid); h.worker != owner {
			t.Fatalf("after proxy restart: %+v", h)
		}
	}

	// kill -9 the worker hosting /hello: nothing is routed to it any more,
	// and its instance comes back on a live worker under the same URL
	// (503 "moving" meanwhile).
	victim := c.workers[owner]
	killed := time.Now()
	victim.kill()
	ws.Close()
	var backAfter time.Duration
	for {
		h := alice.get("/hello/a/" + iid)
		if h.worker != "" && h.worker != owner { // answered by the new host (a 404 page for this strategy)
			backAfter = time.Since(killed)
			break
		}
		if h.status != http.StatusBadGateway && h.status != http.StatusServiceUnavailable {
			t.Fatalf("while the worker is being declared dead: status %d, body %s", h.status, h.body)
		}
		if h.status == http.StatusServiceUnavailable && !strings.Contains(h.body, "moving") && !strings.Contains(h.body, "stopped") {
			t.Fatalf("503 page while the instance moves: %s", h.body)
		}
		if time.Since(killed) > 30*time.Second {
			t.Fatalf("the killed worker's instance never came back")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("killed worker's instance served again after %v", backAfter)
	st = c.mustStatus()
	for _, w := range st.Workers {
		if w.ID == owner {
			t.Fatalf("dead worker still in the table: %+v", w)
		}
	}
	for i := 0; i < 10; i++ {
		hs := newUser(t, base).open("/notes")
		for _, h := range hs {
			if h.worker == owner || h.status >= 500 {
				t.Fatalf("request after the kill went to the dead worker or failed: %+v", hs)
			}
		}
	}
	// The app is usable again: a new instance on a live worker.
	hs := alice.open("/hello")
	if hs[len(hs)-1].status != 200 || hs[len(hs)-1].worker == owner {
		t.Fatalf("reopening /hello after the kill: %+v", hs)
	}

	// The restarted worker registers again and gets placements: drain the
	// others so the next instance must go there.
	c.startWorker(owner)
	c.waitFor("restarted worker registered", 20*time.Second, func(st *wire.ClusterStatus) bool { return connected(st) == 3 })
	for id := range c.workers {
		if id != owner {
			c.adminPost("/api/v1/workers/" + id + "/drain")
		}
	}
	hs = newUser(t, base).open("/notes")
	if got := hs[len(hs)-1]; got.status != 200 || got.worker != owner {
		t.Fatalf("with the others drained, the new instance should be on the restarted %s: %+v", owner, hs)
	}
}

func dialSocket(t *testing.T, u *user, url string) *websocket.Conn {
	t.Helper()
	conn, status := dialStatus(t, u, url)
	if conn == nil {
		t.Fatalf("dial %s: status %d", url, status)
	}
	return conn
}

// TestAdminAPIAuth: the admin API refuses missing and wrong tokens.
func TestAdminAPIAuth(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	c := startCluster(t, clusterOpts{proxies: 0, workers: 1})
	for _, tc := range []struct {
		name, auth string
		status     int
	}{
		{"no token", "", 401},
		{"wrong token", "Bearer nope", 401},
		{"right token", "Bearer " + c.token, 200},
	} {
		for _, host := range []string{c.admin, c.public} { // embedded proxy: also on the public port
			req, _ := http.NewRequest("GET", "http://"+host+"/api/v1/cluster", nil)
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var body map[string]any
			_ = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Errorf("%s on %s: %d, want %d (%v)", tc.name, host, resp.StatusCode, tc.status, body)
			}
		}
	}
}
