package engine

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock/clocktest"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/browsertest"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// newFakeBrowser is a browser that streams the frames a test feeds it.
func newFakeBrowser(t *testing.T) *browsertest.Fake { return browsertest.New(t) }

// fakeHost is the worker's side of a test hub: its input gate is held at
// the test's word, and it counts what the hub tells it.
type fakeHost struct {
	mu   sync.RWMutex // the input gate
	held bool

	sizeMu sync.Mutex // not mu: Resized comes under the gate
	resize string     // the last size the page took
}

func (f *fakeHost) Input(take func(held bool)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	take(f.held)
}

func (f *fakeHost) InputHeld() bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.held
}

func (f *fakeHost) Touched() {}

func (f *fakeHost) Resized(w, h int) {
	f.sizeMu.Lock()
	defer f.sizeMu.Unlock()
	f.resize = fmt.Sprintf("%dx%d", w, h)
}

func (f *fakeHost) MayNavigate(string) bool { return false }

func (f *fakeHost) hold(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held = on
}

// bareHub is a hub without a browser, for the tests of its bookkeeping.
func bareHub() *Hub {
	h := &Hub{clients: map[*client]struct{}{}, frames: &Counters{}, host: noHost{}, log: zerolog.Nop()}
	h.link.frames, h.link.log = h.frames, h.log
	h.input = &hubInput{host: h.host, frames: h.frames, log: h.log, closed: h.Closed}
	return h
}

// hubFixture is the hub of a fake browser behind a test server, where
// dial connects a client engine with the access it asks for.
type hubFixture struct {
	h    *Hub
	fb   *browsertest.Fake
	host *fakeHost
	srv  *httptest.Server
}

func newHubFixture(t *testing.T, opts ...func(*Config)) *hubFixture {
	t.Helper()
	fb := newFakeBrowser(t)
	host := &fakeHost{}
	cfg := Config{Browser: fb, ID: "b1", Instance: "w-1.fixturefixture", App: "app", Worker: "w-1",
		Released: make(chan struct{}), Host: host, Log: zerolog.Nop()}
	for _, o := range opts {
		o(&cfg)
	}
	h := NewHub(cfg)
	h.Watch(func(error) { h.Shutdown("The virtual browser crashed.", "/app") })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, _ := strconv.Atoi(r.URL.Query().Get("access"))
		h.Serve(w, r, Upgrader(false), Client{User: r.URL.Query().Get("user"), Addr: "127.0.0.1",
			Access: func() Access { return Access(a) }})
	}))
	t.Cleanup(func() {
		h.Shutdown("The test is over.", "")
		fb.Crash()
		srv.Close()
	})
	return &hubFixture{h: h, fb: fb, host: host, srv: srv}
}

// dialRaw opens a client engine's socket with access a.
func (f *hubFixture) dialRaw(t *testing.T, a Access) *websocket.Conn {
	t.Helper()
	u := "ws" + strings.TrimPrefix(f.srv.URL, "http") + "/?user=u&access=" + strconv.Itoa(int(a))
	conn, _, err := websocket.DefaultDialer.Dial(u, http.Header{"Origin": {f.srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// dial opens a socket with access a and reads its hello.
func (f *hubFixture) dial(t *testing.T, a Access) (*websocket.Conn, map[string]any) {
	t.Helper()
	conn := f.dialRaw(t, a)
	var hello map[string]any
	if err := conn.ReadJSON(&hello); err != nil || hello["t"] != "hello" {
		t.Fatalf("hello: %v %v", hello, err)
	}
	return conn, hello
}

// frameOf splits a frame message (a binary WebSocket message) into its
// header and its JPEG.
func frameOf(t *testing.T, data []byte) (frameHeader, []byte) {
	t.Helper()
	n := binary.BigEndian.Uint32(data)
	var hdr frameHeader
	if err := json.Unmarshal(data[4:4+n], &hdr); err != nil {
		t.Fatal(err)
	}
	return hdr, data[4+n:]
}

// nextText returns the next text message of conn, skipping frames.
func nextText(t *testing.T, conn *websocket.Conn) (map[string]any, error) {
	t.Helper()
	for {
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		typ, data, err := conn.ReadMessage()
		if err != nil {
			return nil, err
		}
		if typ == websocket.TextMessage {
			var m map[string]any
			return m, json.Unmarshal(data, &m)
		}
	}
}

// nextFrame is the sequence number of conn's next frame, which it
// acknowledges.
func nextFrame(t *testing.T, conn *websocket.Conn) uint64 {
	t.Helper()
	return nextHeader(t, conn).Seq
}

func smallFrame(seq uint64) browser.Frame {
	return browser.Frame{Data: []byte{0xff, 0xd8}, Width: 8, Height: 6, DeviceWidth: 8, DeviceHeight: 6, Seq: seq, Timestamp: time.Now()}
}

// The hello names the browser, its instance, app and worker and says
// whether the client only watches; a client whose access is gone by the
// time it joins is told so and let go.
func TestHubHello(t *testing.T) {
	f := newHubFixture(t)
	_, hello := f.dial(t, AccessRead)
	want := map[string]any{"t": "hello", "browser": "b1", "instance": "w-1.fixturefixture", "app": "app", "worker": "w-1",
		"page": map[string]any{"url": "about:blank", "title": ""}, "readOnly": true}
	if fmt.Sprint(hello) != fmt.Sprint(want) {
		t.Fatalf("hello %v, want %v", hello, want)
	}
	if _, hello := f.dial(t, AccessWrite); hello["readOnly"] != nil {
		t.Fatalf("a writer's hello: %v", hello)
	}
	conn := f.dialRaw(t, AccessNone)
	if m, err := nextText(t, conn); err != nil || m["t"] != "closed" || m["reason"] != revokedReason {
		t.Fatalf("a client without access: %v %v", m, err)
	}
	testutil.Eventually(t, 10*time.Second, func() error {
		if n := f.h.Count(); n != 2 {
			return fmt.Errorf("%d clients, want 2", n)
		}
		return nil
	})
}

// Recheck applies a changed access to a connected client: a reader made
// writer starts driving, and one whose access is gone is told and let go.
func TestHubRecheck(t *testing.T) {
	f := newHubFixture(t)
	var mu sync.Mutex
	access := AccessRead
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.h.Serve(w, r, Upgrader(false), Client{User: "v", Access: func() Access { mu.Lock(); defer mu.Unlock(); return access }})
	}))
	defer srv.Close()
	conn, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), http.Header{"Origin": {srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if m, err := nextText(t, conn); err != nil || m["readOnly"] != true {
		t.Fatalf("hello %v %v", m, err)
	}
	for _, s := range []struct {
		to   Access
		want string
	}{
		{AccessWrite, "map[t:role]"},
		{AccessRead, "map[readOnly:true t:role]"},
		{AccessNone, "map[reason:" + revokedReason + " t:closed]"},
	} {
		mu.Lock()
		access = s.to
		mu.Unlock()
		f.h.Recheck()
		if m, err := nextText(t, conn); err != nil || fmt.Sprint(m) != s.want {
			t.Fatalf("to %d: %v %v, want %s", s.to, m, err, s.want)
		}
	}
	if _, err := nextText(t, conn); err == nil {
		t.Fatal("the socket stayed open without access")
	}
}

// TestHubHoldsInput: while the host holds the browser's input, a client's
// input goes back to it as it came ({"t":"held"}), a client joining is told
// of the hold after its hello, and after the hold input reaches the page.
func TestHubHoldsInput(t *testing.T) {
	f := newHubFixture(t)
	owner, _ := f.dial(t, AccessOwner)
	key := func(k string) {
		_ = owner.WriteJSON(map[string]any{"t": "input", "type": "keydown", "key": k, "text": k})
	}
	key("a")
	testutil.Eventually(t, 10*time.Second, testutil.Cond("the key a taken", func() bool { return f.fb.Keys() == "a" }))
	f.host.hold(true)
	f.h.AnnounceHold()
	if m, err := nextText(t, owner); err != nil || m["t"] != "hold" {
		t.Fatalf("hold: %v %v", m, err)
	}
	key("b")
	held, err := nextText(t, owner)
	if in, _ := held["input"].(map[string]any); err != nil || held["t"] != "held" || in["t"] != "input" || in["key"] != "b" {
		t.Fatalf("held: %v %v", held, err)
	}
	viewer, _ := f.dial(t, AccessRead)
	if m, err := nextText(t, viewer); err != nil || m["t"] != "hold" {
		t.Fatalf("a client joining during the hold: %v %v", m, err)
	}
	f.host.hold(false)
	f.h.AnnounceResume()
	if m, err := nextText(t, owner); err != nil || m["t"] != "resume" {
		t.Fatalf("resume: %v %v", m, err)
	}
	key("c")
	testutil.Eventually(t, 10*time.Second, testutil.Cond("the key c taken after the hold", func() bool { return f.fb.Keys() == "ac" }))
	if f.h.Closed() {
		t.Fatal("the hub closed")
	}
}

// TestPrecast: serving a Browser URL's page starts its screencast, so the
// first frame is there when the engine's socket opens; with nobody
// connecting within the window the screencast stops, and a client that
// came keeps it.
func TestPrecast(t *testing.T) {
	newHub := func(t *testing.T) (*Hub, *browsertest.Fake, *clocktest.Clock) {
		fb := newFakeBrowser(t)
		h := NewHub(Config{Browser: fb, ID: "b", Log: zerolog.Nop()})
		clk := clocktest.New(time.Unix(1000, 0))
		h.SetPrecast(time.Second, clk)
		t.Cleanup(func() {
			h.mu.Lock()
			h.stopCastLocked()
			done := h.castDone
			h.mu.Unlock()
			if done != nil {
				<-done
			}
		})
		return h, fb, clk
	}
	casting := func(fb *browsertest.Fake) bool {
		select {
		case fb.Frames <- browser.Frame{Seq: 7, Data: []byte{1}}:
			return true
		case <-time.After(2 * time.Second):
			return false
		}
	}
	stopped := func(t *testing.T, h *Hub) {
		t.Helper()
		h.mu.Lock()
		done := h.castDone
		h.mu.Unlock()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the screencast did not stop")
		}
	}

	t.Run("nobody comes", func(t *testing.T) {
		h, fb, clk := newHub(t)
		h.Precast(context.Background())
		if !casting(fb) {
			t.Fatal("no screencast after the page was served")
		}
		// The frame is handed over; the sink keeps it for the first client.
		testutil.Eventually(t, 10*time.Second, func() error {
			h.mu.Lock()
			defer h.mu.Unlock()
			if h.last == nil || h.last.seq != 7 {
				return fmt.Errorf("the frame painted before anyone connected is not kept: %+v", h.last)
			}
			return nil
		})
		clk.Advance(time.Second)
		stopped(t, h)
	})
	t.Run("a client comes", func(t *testing.T) {
		h, fb, clk := newHub(t)
		h.Precast(context.Background())
		h.mu.Lock()
		h.clients[&client{}] = struct{}{}
		h.disarmCountdownsLocked()
		h.mu.Unlock()
		clk.Advance(time.Second)
		if !casting(fb) {
			t.Fatal("the screencast stopped under a client")
		}
	})
	t.Run("off", func(t *testing.T) {
		h, _, _ := newHub(t)
		h.SetPrecast(0, nil)
		h.Precast(context.Background())
		h.mu.Lock()
		started := h.castStop != nil
		h.mu.Unlock()
		if started {
			t.Fatal("a screencast started with precasting off")
		}
	})
}

func TestCastBackoff(t *testing.T) {
	for _, tc := range []struct {
		fails int
		want  time.Duration
	}{
		{1, 500 * time.Millisecond}, {2, time.Second}, {3, 2 * time.Second}, {4, 4 * time.Second},
		{5, 8 * time.Second}, {6, 8 * time.Second}, {1000, 8 * time.Second},
	} {
		if got := castBackoff(tc.fails); got != tc.want {
			t.Errorf("castBackoff(%d) = %v, want %v", tc.fails, got, tc.want)
		}
	}
}

// TestHubRestartsAFailedScreencast: a screencast that fails on a live page
// (a command error, not a crash) is started again, and the viewer gets
// frames again; it is not left without a screen until everyone leaves.
func TestHubRestartsAFailedScreencast(t *testing.T) {
	f := newHubFixture(t)
	fb := f.fb
	owner, _ := f.dial(t, AccessOwner)
	fb.Frames <- smallFrame(1)
	if seq := nextFrame(t, owner); seq != 1 {
		t.Fatalf("first frame %d", seq)
	}
	fb.CastErr <- fmt.Errorf("Page.screencastFrameAck: %w", context.DeadlineExceeded)
	// The next frame is taken by a new screencast (the channel is
	// unbuffered: this send waits for one).
	select {
	case fb.Frames <- smallFrame(2):
	case <-time.After(10 * time.Second):
		t.Fatal("no screencast took a frame after the failed one")
	}
	if seq := nextFrame(t, owner); seq != 2 {
		t.Fatalf("frame after the restart %d", seq)
	}
	// The failure was counted for the backoff, and the frame after it
	// cleared the count.
	if n := f.h.castFails.Load(); n != 0 {
		t.Fatalf("%d failures counted after a frame, want 0", n)
	}
	fb.CastErr <- errors.New("Page.startScreencast: target busy")
	testutil.Eventually(t, 10*time.Second, func() error {
		if n := f.h.castFails.Load(); n != 1 {
			return fmt.Errorf("%d failures counted", n)
		}
		return nil
	})
}

// TestHubRetriesAFailedResize: an engine sends its size once, when its
// window changes; a resize the page did not take (busy past the input
// timeout) is tried again until it takes, and a newer size wins over the
// retry of an older one.
func TestHubRetriesAFailedResize(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fails int
		sizes []string // sent by the owner, in order
		want  string   // the page's size in the end
	}{
		{"taken at once", 0, []string{"800x600"}, "800x600"},
		{"taken on the second try", 1, []string{"800x600"}, "800x600"},
		{"taken on the third try", 2, []string{"800x600"}, "800x600"},
		{"a newer size wins", 1, []string{"800x600", "640x480"}, "640x480"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newHubFixture(t)
			fb := f.fb
			fb.FailResizes(tc.fails)
			owner, _ := f.dial(t, AccessOwner)
			for _, sz := range tc.sizes {
				var w, h int
				fmt.Sscanf(sz, "%dx%d", &w, &h)
				_ = owner.WriteJSON(map[string]any{"t": "input", "type": "resize", "width": w, "height": h})
			}
			testutil.Eventually(t, 10*time.Second, func() error {
				got := fb.Resizes()
				if len(got) == 0 || got[len(got)-1] != tc.want {
					return fmt.Errorf("resizes taken %v, want the last %s", got, tc.want)
				}
				return nil
			})
			// No retry of an older size comes after the newest.
			time.Sleep(2 * resizeRetry)
			if got := fb.Resizes(); got[len(got)-1] != tc.want {
				t.Fatalf("resizes taken %v: the last is not %s", got, tc.want)
			}
			f.host.sizeMu.Lock()
			defer f.host.sizeMu.Unlock()
			if f.host.resize != tc.want {
				t.Fatalf("the host was told of %q, want %s", f.host.resize, tc.want)
			}
		})
	}
}

// TestLateClientOfMovedHub: a client that reaches a browser whose hub ended
// because the instance moved (a proxy's stale route to the old copy) is
// sent on with "moved", as its peers were, and not told the browser closed
// for good (the engine would stop reconnecting).
func TestLateClientOfMovedHub(t *testing.T) {
	f := newHubFixture(t)
	f.h.MoveAway("This app instance moved to another worker.")
	conn := f.dialRaw(t, AccessOwner)
	m, err := nextText(t, conn)
	if err != nil || m["t"] != "moved" {
		t.Fatalf("a late client of a moved hub got %v %v, want moved", m, err)
	}
}

// TestRefreshResendsTheLastFrame: a client engine that asks for a frame
// ({"t":"refresh"}: it got none for a while) gets the last one again.
func TestRefreshResendsTheLastFrame(t *testing.T) {
	f := newHubFixture(t)
	owner, _ := f.dial(t, AccessOwner)
	f.fb.Frames <- smallFrame(7)
	if seq := nextFrame(t, owner); seq != 7 {
		t.Fatalf("first frame %d", seq)
	}
	_ = owner.WriteJSON(map[string]any{"t": "refresh"})
	if seq := nextFrame(t, owner); seq != 7 {
		t.Fatalf("frame after a refresh: %d, want the last one (7) again", seq)
	}
}
