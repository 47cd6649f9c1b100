package worker

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/browsertest"
	"github.com/cloudbrowser-go/cloudbrowser/worker/httpserve"
)

type fakeRuntime struct {
	browser.Null
	mu      sync.Mutex
	created []*browsertest.Fake
}

func (r *fakeRuntime) NewBrowser(ctx context.Context, opts browser.Options) (browser.Browser, error) {
	nb, err := r.Null.NewBrowser(ctx, opts)
	if err != nil {
		return nil, err
	}
	fb := browsertest.Wrap(nb)
	r.mu.Lock()
	r.created = append(r.created, fb)
	r.mu.Unlock()
	return fb, nil
}

func (r *fakeRuntime) last() *browsertest.Fake {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.created[len(r.created)-1]
}

// hubFixture is a worker with one singleBrowserPerUser instance shared
// with anyone as role, and the owner's browser in it. dial connects a
// client engine socket to that browser, as its owner or as an anonymous
// visitor.
type hubFixture struct {
	w      *Worker
	rt     *fakeRuntime
	srv    *httptest.Server
	c      *http.Client
	iid    string
	loc    string // the owner's Browser URL
	cookie *http.Cookie
}

func newHubFixture(t *testing.T, role httpserve.Role, setup ...func(*Worker)) *hubFixture {
	t.Helper()
	rt := &fakeRuntime{}
	w, err := New(Config{ID: "w-hub", Secret: testSecret, Master: "127.0.0.1:1", Runtime: rt, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	w.replica.Store = newLocalReplica()
	for _, f := range setup {
		f(w)
	}
	srv := httptest.NewServer(signedHandler(w))
	t.Cleanup(func() { srv.Close(); w.Close() })
	app := wire.App{Name: "A", MountPoint: "app", Entry: "https://example.test/", Strategy: wire.SingleBrowserPerUser}
	_ = w.apps.AddApplication(context.Background(), app)
	iid := "w-hub.hubhubhubhub"
	if err := w.apps.CreateInstance(context.Background(), wire.CreateInstance{App: app, InstanceID: iid}); err != nil {
		t.Fatal(err)
	}
	shareWithAnyone(w, iid, role)
	c := noRedirect()
	resp, err := c.Get(srv.URL + "/app/a/" + iid)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return &hubFixture{w: w, rt: rt, srv: srv, c: c, iid: iid, loc: resp.Header.Get("Location"), cookie: resp.Cookies()[0]}
}

func (f *hubFixture) dial(t *testing.T, asOwner bool) (*websocket.Conn, map[string]any) {
	t.Helper()
	h := http.Header{"Origin": {f.srv.URL}}
	if asOwner {
		h.Add("Cookie", f.cookie.String())
	}
	conn, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(f.srv.URL, "http")+f.loc+"/ws", h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var hello map[string]any
	if err := conn.ReadJSON(&hello); err != nil || hello["t"] != "hello" {
		t.Fatalf("hello: %v %v", hello, err)
	}
	return conn, hello
}

// frameHeader is what the tests read of a frame's header (engine's
// frameHeader is the whole of it).
type frameHeader struct {
	Seq uint64 `json:"seq"`
	W   int    `json:"w"`
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

func TestHubStreamingAndCrash(t *testing.T) {
	f := newHubFixture(t, httpserve.RoleReader)
	w, rt, srv, c, iid, loc, cookie := f.w, f.rt, f.srv, f.c, f.iid, f.loc, f.cookie
	fb := rt.last()
	dial := func(asOwner bool) *websocket.Conn { conn, _ := f.dial(t, asOwner); return conn }
	owner := dial(true)
	slow := dial(false) // never reads again

	// Input from the owner reaches the browser in order; an invalid event is
	// answered with an error; the viewer's input is ignored.
	_ = owner.WriteJSON(map[string]any{"t": "input", "type": "keydown", "key": "a", "text": "a"})
	_ = owner.WriteJSON(map[string]any{"t": "input", "type": "teleport"})
	_ = slow.WriteJSON(map[string]any{"t": "input", "type": "keydown", "key": "b", "text": "b"})
	var m map[string]any
	if err := owner.ReadJSON(&m); err != nil || m["t"] != "error" || !strings.Contains(fmt.Sprint(m["message"]), "teleport") {
		t.Fatalf("invalid input answer: %v %v", m, err)
	}

	// 300 frames of 256 KiB: the slow viewer's socket fills up, the owner
	// keeps getting frames and ends with the newest.
	big := make([]byte, 256<<10)
	big[0], big[1] = 0xff, 0xd8
	go func() {
		for i := 1; i <= 300; i++ {
			fb.Frames <- browser.Frame{Data: big, Width: 800, Height: 600, DeviceWidth: 800, DeviceHeight: 600, Seq: uint64(i), Timestamp: time.Now()}
		}
	}()
	var lastSeq uint64
	received := 0
	for lastSeq != 300 {
		_ = owner.SetReadDeadline(time.Now().Add(20 * time.Second))
		typ, data, err := owner.ReadMessage()
		if err != nil {
			t.Fatalf("owner read after %d frames (last seq %d): %v", received, lastSeq, err)
		}
		if typ != websocket.BinaryMessage {
			continue
		}
		hdr, jpeg := frameOf(t, data)
		if hdr.Seq <= lastSeq || hdr.W != 800 || len(jpeg) != len(big) || jpeg[0] != 0xff {
			t.Fatalf("bad frame: %+v after seq %d", hdr, lastSeq)
		}
		lastSeq = hdr.Seq
		received++
	}
	st := w.counters.Stats()
	t.Logf("owner received %d of 300 frames; worker: %+v", received, st)
	if st.Produced != 300 || st.Dropped == 0 {
		t.Fatalf("the slow viewer should have lost frames, not the producer: %+v", st)
	}
	got := fb.Inputs()
	if len(got) != 1 || got[0].Key != "a" {
		t.Fatalf("inputs reaching the browser: %+v", got)
	}

	// A crash: the owner is told, with a link that gives a new browser.
	fb.Crash()
	for {
		_ = owner.SetReadDeadline(time.Now().Add(10 * time.Second))
		typ, data, err := owner.ReadMessage()
		if err != nil {
			t.Fatalf("no crash notice: %v", err)
		}
		if typ == websocket.TextMessage {
			_ = json.Unmarshal(data, &m)
			if m["t"] == "closed" {
				break
			}
		}
	}
	if m["reload"] != "/app/a/"+iid || !strings.Contains(fmt.Sprint(m["reason"]), "crashed") {
		t.Fatalf("crash notice: %v", m)
	}
	req, _ := http.NewRequest("GET", srv.URL+"/app/a/"+iid, nil)
	req.AddCookie(cookie)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if nl := resp.Header.Get("Location"); resp.StatusCode != 302 || nl == loc || nl == "" {
		t.Fatalf("after the crash the instance URL should give a new browser: %d %q (old %q)", resp.StatusCode, nl, loc)
	}
}

// TestLiveRoleChanges: a grant changed while a client is connected applies
// to its open socket: a reader made reader-writer starts driving, and a
// revoked visitor is told and disconnected while the owner stays.
func TestLiveRoleChanges(t *testing.T) {
	f := newHubFixture(t, httpserve.RoleReader)
	fb := f.rt.last()
	owner, _ := f.dial(t, true)
	viewer, hello := f.dial(t, false)
	if hello["readOnly"] != true {
		t.Fatalf("a reader's hello: %v", hello)
	}
	inputs := func() int {
		return len(fb.Inputs())
	}
	ctx := context.Background()
	steps := []struct {
		name       string
		role       string
		want       map[string]any // the viewer's next text message
		inputCount bool           // the viewer's input now reaches the browser
	}{
		{"reader-writer", "reader-writer", map[string]any{"t": "role"}, true},
		{"back to reader", "reader", map[string]any{"t": "role", "readOnly": true}, false},
		{"revoked", "none", map[string]any{"t": "closed", "reason": "The owner no longer shares this browser with you."}, false},
	}
	for _, s := range steps {
		if err := f.w.apps.Grant(ctx, f.iid, "", httpserve.Anyone, s.role); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		m, err := nextText(t, viewer)
		if err != nil || fmt.Sprint(m) != fmt.Sprint(s.want) {
			t.Fatalf("%s: viewer got %v %v, want %v", s.name, m, err, s.want)
		}
		if s.role == "none" {
			break
		}
		before := inputs()
		_ = viewer.WriteJSON(map[string]any{"t": "input", "type": "keydown", "key": "v", "text": "v"})
		_ = viewer.WriteJSON(map[string]any{"t": "ping", "seq": 1}) // answered after the input is handled
		if m, err := nextText(t, viewer); err != nil || m["t"] != "pong" {
			t.Fatalf("%s: pong: %v %v", s.name, m, err)
		}
		if got := inputs() - before; got != map[bool]int{true: 1, false: 0}[s.inputCount] {
			t.Fatalf("%s: %d of the viewer's inputs reached the browser", s.name, got)
		}
	}
	if _, err := nextText(t, viewer); err == nil {
		t.Fatal("the revoked viewer's socket stayed open")
	}
	// The owner's socket is untouched, and the revoked visitor is refused
	// on the next request.
	_ = owner.WriteJSON(map[string]any{"t": "ping", "seq": 7})
	if m, err := nextText(t, owner); err != nil || m["t"] != "pong" {
		t.Fatalf("owner after the revocation: %v %v", m, err)
	}
	resp, err := f.c.Get(f.srv.URL + f.loc)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("revoked visitor on the Browser URL: %d", resp.StatusCode)
	}
}

// TestBrowserServerTiming: a Browser URL says how its browser was made
// (Server-Timing), which scripts/bench/first-frame.sh reads.
func TestBrowserServerTiming(t *testing.T) {
	f := newHubFixture(t, httpserve.RoleReader)
	req, _ := http.NewRequest("GET", f.srv.URL+f.loc, nil)
	req.AddCookie(f.cookie)
	resp, err := f.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	st := resp.Header.Get("Server-Timing")
	if resp.StatusCode != 200 {
		t.Fatalf("Browser URL: %d", resp.StatusCode)
	}
	for _, step := range []string{"lease;dur=", "api;dur=", "policy;dur=", "nav;dur="} {
		if !strings.Contains(st, step) {
			t.Fatalf("Server-Timing %q lacks %s", st, step)
		}
	}
}
