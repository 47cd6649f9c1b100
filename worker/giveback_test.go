package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/httpserve"
)

// fakeAfter is a clock.Clock that holds countdowns until the test fires
// them.
type fakeAfter struct {
	mu     sync.Mutex
	timers []*fakeStopper
}

type fakeStopper struct {
	a       *fakeAfter
	d       time.Duration
	f       func()
	stopped bool
	fired   bool
}

func (s *fakeStopper) Stop() bool {
	s.a.mu.Lock()
	defer s.a.mu.Unlock()
	was := !s.stopped && !s.fired
	s.stopped = true
	return was
}

func (a *fakeAfter) Now() time.Time { return time.Now() }

func (a *fakeAfter) AfterFunc(d time.Duration, f func()) clock.Timer {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := &fakeStopper{a: a, d: d, f: f}
	a.timers = append(a.timers, s)
	return s
}

// fire runs the pending countdowns (and, with stale, the stopped ones too:
// a timer that fired just as it was stopped); it returns how many ran.
func (a *fakeAfter) fire(stale bool) int { return a.fireOf(0, stale) }

// fireOf is fire for the countdowns of duration d only (0 = all).
func (a *fakeAfter) fireOf(d time.Duration, stale bool) int {
	a.mu.Lock()
	var run []func()
	for _, s := range a.timers {
		if !s.fired && (stale || !s.stopped) && (d == 0 || s.d == d) {
			s.fired = true
			run = append(run, s.f)
		}
	}
	a.mu.Unlock()
	for _, f := range run {
		f()
	}
	return len(run)
}

func (a *fakeAfter) pending() int { return a.pendingOf(0) }

// pendingOf is pending for the countdowns of duration d only (0 = all).
func (a *fakeAfter) pendingOf(d time.Duration) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, s := range a.timers {
		if !s.fired && !s.stopped && (d == 0 || s.d == d) {
			n++
		}
	}
	return n
}

func (f *hubFixture) get(t *testing.T, path string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", f.srv.URL+path, nil)
	req.AddCookie(f.cookie)
	resp, err := f.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

// Issue 12: a browser with no client for the idle timeout is released:
// its lease goes back to the pool, its quota places are freed, a client
// engine that comes back is told (no reconnect loop), and the owner's next
// visit gets a new browser with a note.
func TestIdleRelease(t *testing.T) {
	fa := &fakeAfter{}
	f := newHubFixture(t, httpserve.RoleReader, func(w *Worker) { w.clock = fa })
	in, _ := f.w.instances.get(f.iid)
	in.idle = time.Minute // what the manifest says (read at instance creation)
	old := strings.TrimPrefix(f.loc, "/app/a/"+f.iid+"/b/")
	vb, ok := in.browser(old)
	if !ok {
		t.Fatal("no browser")
	}
	// The fixture created the browser with the default idle; start over
	// with the instance's value.
	vb.hub.StartIdle(in.idle, fa, releasedReason(in.idle), reloadURL(in.app, f.iid), func() { f.w.browsers.browserIdle(in, vb) }, nil)

	// A connected client keeps the browser: its countdown is stopped, and
	// a countdown that fires anyway (stale) changes nothing.
	conn, _ := f.dial(t, true)
	if n := fa.pending(); n != 0 {
		t.Fatalf("%d countdowns while a client is connected", n)
	}
	fa.fire(true)
	if _, ok := in.browser(old); !ok {
		t.Fatal("released while a client was connected")
	}
	_ = conn.WriteJSON(map[string]any{"t": "ping", "seq": 1})
	if m, err := nextText(t, conn); err != nil || m["t"] != "pong" {
		t.Fatalf("client after a stale countdown: %v %v", m, err)
	}
	// The client leaves: the countdown starts again and releases it.
	conn.Close()
	testutil.Eventually(t, 10*time.Second, testutil.Cond("vb.hub.Count() == 0 && fa.pending() == 1", func() bool { return vb.hub.Count() == 0 && fa.pending() == 1 }))
	if n := fa.fire(false); n != 1 {
		t.Fatalf("%d countdowns fired", n)
	}
	if _, ok := in.browser(old); ok {
		t.Fatal("idle browser not released")
	}
	st := f.w.pools.Stats()
	if st.Returns != 1 || st.Locked != 0 || f.w.idleReleased.Load() != 1 {
		t.Fatalf("pool after release: %+v %+v, released %d", st.Gauges, st.Counters, f.w.idleReleased.Load())
	}
	if n := f.w.quota.browserUsers.Held(vb.owner); n != 0 {
		t.Fatalf("the released browser still holds %d quota places", n)
	}

	// A client engine reconnecting to it is told why, with a way back.
	h := http.Header{"Origin": {f.srv.URL}}
	h.Add("Cookie", f.cookie.String())
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(f.srv.URL, "http")+f.loc+"/ws", h)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	m, err := nextText(t, ws)
	if err != nil || m["t"] != "closed" || m["reload"] != "/app/a/"+f.iid || !strings.Contains(fmt.Sprint(m["reason"]), "released after 1m0s") {
		t.Fatalf("released browser's socket: %v %v", m, err)
	}
	if _, err := nextText(t, ws); err == nil {
		t.Fatal("socket of a released browser left open")
	}

	// The old Browser URL leads, through the strategy, to a new browser
	// whose page says the previous one was released (once).
	resp, _ := f.get(t, f.loc)
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/app/a/"+f.iid {
		t.Fatalf("old Browser URL: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, _ = f.get(t, "/app/a/"+f.iid)
	nl := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusFound || nl == f.loc || !browserPath(nl) {
		t.Fatalf("instance URL after release: %d %q", resp.StatusCode, nl)
	}
	const note = "Your previous browser was released after 1m0s without a connection"
	if resp, body := f.get(t, nl); resp.StatusCode != 200 || !strings.Contains(body, note) {
		t.Fatalf("new browser's page: %d, note missing:\n%s", resp.StatusCode, body)
	}
	if _, body := f.get(t, nl); strings.Contains(body, note) {
		t.Fatal("the note is shown again")
	}
}

func browserPath(p string) bool { return strings.Contains(p, "/b/") }

// TestIdleHeldByAutomation: a browser an automation session drives is not
// released for having no viewer: its countdown starts over while the
// session holds it, and releases it once the hold is gone.
func TestIdleHeldByAutomation(t *testing.T) {
	fa := &fakeAfter{}
	f := newHubFixture(t, httpserve.RoleReader, func(w *Worker) { w.clock = fa })
	in, _ := f.w.instances.get(f.iid)
	in.idle = time.Minute
	id := strings.TrimPrefix(f.loc, "/app/a/"+f.iid+"/b/")
	vb, ok := in.browser(id)
	if !ok {
		t.Fatal("no browser")
	}
	vb.hub.StartIdle(in.idle, fa, releasedReason(in.idle), reloadURL(in.app, f.iid), func() { f.w.browsers.browserIdle(in, vb) }, vb.automated)
	release := hostedBrowser{w: f.w, vb: vb}.HoldIdle()
	// The load report names it held (the dashboard's session state).
	automated := func() []string {
		var l wire.Load
		f.w.instances.counts(&l)
		return l.Automated
	}
	clients := func() []string {
		var l wire.Load
		f.w.instances.counts(&l)
		return l.AutomationClients
	}
	if got := automated(); !slices.Equal(got, []string{f.iid + "/" + id}) {
		t.Fatalf("held browsers in the load report: %v", got)
	}
	if got := clients(); len(got) != 0 {
		t.Fatalf("browsers with a client before any: %v", got)
	}
	left := hostedBrowser{w: f.w, vb: vb}.ClientConnected()
	if got := clients(); !slices.Equal(got, []string{f.iid + "/" + id}) {
		t.Fatalf("browsers with a client in the load report: %v", got)
	}
	left()
	left() // twice: counted once
	if got := clients(); len(got) != 0 {
		t.Fatalf("browsers with a client after it left: %v", got)
	}
	for range 3 {
		testutil.Eventually(t, 10*time.Second, testutil.Cond("a countdown", func() bool { return fa.pending() == 1 }))
		fa.fire(false)
		if _, ok := in.browser(id); !ok {
			t.Fatal("released while an automation session drives it")
		}
	}
	release()
	release() // twice: counted once
	if got := automated(); len(got) != 0 {
		t.Fatalf("held browsers after the hold ended: %v", got)
	}
	testutil.Eventually(t, 10*time.Second, testutil.Cond("a countdown", func() bool { return fa.pending() == 1 }))
	fa.fire(false)
	if _, ok := in.browser(id); ok {
		t.Fatal("not released once the session let go")
	}
}

// Issue 12: a client connecting while the countdown fires is either
// served (the browser stays) or told the browser was released (it is
// gone): never served by a released browser.
func TestIdleReleaseRaceWithConnect(t *testing.T) {
	fa := &fakeAfter{}
	f := newHubFixture(t, httpserve.RoleReader, func(w *Worker) { w.clock = fa })
	in, _ := f.w.instances.get(f.iid)
	served, told := 0, 0
	for i := range 30 {
		resp, _ := f.get(t, "/app/a/"+f.iid)
		loc := resp.Header.Get("Location")
		bid := loc[strings.LastIndex(loc, "/")+1:]
		vb, ok := in.browser(bid)
		if !ok {
			t.Fatalf("round %d: no browser at %q", i, loc)
		}
		testutil.Eventually(t, 10*time.Second, testutil.Cond("fa.pending() == 1", func() bool { return fa.pending() == 1 }))
		h := http.Header{"Origin": {f.srv.URL}}
		h.Add("Cookie", f.cookie.String())
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Spread the countdown over the handshake, so that both
			// outcomes happen; each is checked, whichever it is.
			time.Sleep(time.Duration(i%10) * 300 * time.Microsecond)
			fa.fire(false)
		}()
		ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(f.srv.URL, "http")+loc+"/ws", h)
		wg.Wait()
		if err != nil {
			t.Fatalf("round %d: dial: %v", i, err)
		}
		m, err := nextText(t, ws)
		_, stays := in.browser(bid)
		switch {
		case err != nil:
			t.Fatalf("round %d: %v", i, err)
		case m["t"] == "hello" && stays:
			served++
			ws.Close()
			testutil.Eventually(t, 10*time.Second, testutil.Cond("vb.hub.Count() == 0 && fa.pending() == 1", func() bool { return vb.hub.Count() == 0 && fa.pending() == 1 }))
			fa.fire(false) // release it for the next round
			testutil.Eventually(t, 10*time.Second, testutil.Cond("the browser closed", func() bool { _, ok := in.browser(bid); return !ok }))
		case m["t"] == "closed" && !stays:
			told++
			ws.Close()
		default:
			t.Fatalf("round %d: got %v, browser kept: %v", i, m, stays)
		}
	}
	t.Logf("served %d, told released %d", served, told)
	if st := f.w.pools.Stats(); st.Locked != 0 || st.Returns != 30 {
		t.Fatalf("pool: %+v %+v", st.Gauges, st.Counters)
	}
}

// Issue 12: createBrowser (the app API) and "new browser" obey the
// strategy: one browser per user in an instance except for multiInstance,
// unless the manifest's browserLimit.perUser allows more.
func TestStrategyBrowserLimits(t *testing.T) {
	for _, tc := range []struct {
		strategy string
		perUser  int
		extra    int // further browsers of the same user that may be made
	}{
		{wire.SingleAppInstance, 0, 0},
		{wire.SingleInstancePerUser, 0, 0},
		{wire.SingleBrowserPerUser, 0, 0},
		{wire.MultiInstance, 0, 5}, // no cap: 5 tried
		{wire.SingleBrowserPerUser, 3, 2},
		{wire.SingleAppInstance, 2, 1},
		{wire.MultiInstance, 2, 1},
	} {
		t.Run(fmt.Sprintf("%s perUser %d", tc.strategy, tc.perUser), func(t *testing.T) {
			w, _ := newTestWorker(t)
			ctx := context.Background()
			app := wire.App{Name: "S", MountPoint: "s", Entry: "https://example.test/", Strategy: tc.strategy, BrowsersPerUser: tc.perUser}
			if err := w.apps.AddApplication(ctx, app); err != nil {
				t.Fatal(err)
			}
			iid := "w-test.strategystrat"
			if err := w.apps.CreateInstance(ctx, wire.CreateInstance{App: app, InstanceID: iid, Owner: "alice"}); err != nil {
				t.Fatal(err)
			}
			in, _ := w.instances.get(iid)
			first, err := w.browsers.browserFor(ctx, in, "alice")
			if err != nil {
				t.Fatal(err)
			}
			if again, err := w.browsers.browserFor(ctx, in, "alice"); err != nil || again != first {
				t.Fatalf("the user's browser again: %v %v", again, err)
			}
			made := 0
			for range 5 {
				if _, err := w.browsers.newBrowser(ctx, in, "alice", false); err != nil {
					if !errors.Is(err, httpserve.ErrBrowserLimit) {
						t.Fatalf("refusal is not the browser limit: %v", err)
					}
					if tc.perUser == 0 && !strings.Contains(err.Error(), tc.strategy+" strategy gives each user one browser") {
						t.Errorf("refusal does not explain the strategy: %v", err)
					}
					break
				}
				made++
			}
			if made != tc.extra {
				t.Fatalf("%d further browsers made, want %d", made, tc.extra)
			}
			// Another user still gets one.
			if _, err := w.browsers.browserFor(ctx, in, "bob"); err != nil {
				t.Fatalf("bob: %v", err)
			}
		})
	}
}
