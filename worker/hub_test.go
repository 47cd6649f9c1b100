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
)

// fakeBrowser streams the frames a test feeds it and can "crash".
type fakeBrowser struct {
	browser.Browser // a Null browser for the rest
	frames          chan browser.Frame
	crashed         chan struct{}
	once            sync.Once
	mu              sync.Mutex
	inputs          []browser.InputEvent
}

func (f *fakeBrowser) Screencast(ctx context.Context, _ browser.ScreencastOptions, sink func(browser.Frame)) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-f.crashed:
			return browser.ErrCrashed
		case fr := <-f.frames:
			sink(fr)
		}
	}
}

func (f *fakeBrowser) Input(ctx context.Context, ev browser.InputEvent) error {
	if err := ev.Validate(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inputs = append(f.inputs, ev)
	return nil
}

func (f *fakeBrowser) Done() <-chan struct{} { return f.crashed }

func (f *fakeBrowser) Err() error {
	select {
	case <-f.crashed:
		return fmt.Errorf("renderer gone: %w", browser.ErrCrashed)
	default:
		return nil
	}
}

func (f *fakeBrowser) crash() { f.once.Do(func() { close(f.crashed) }) }

func (f *fakeBrowser) Close(ctx context.Context) error {
	f.crash()
	return f.Browser.Close(ctx)
}

type fakeRuntime struct {
	browser.Null
	mu      sync.Mutex
	created []*fakeBrowser
}

func (r *fakeRuntime) NewBrowser(ctx context.Context, opts browser.Options) (browser.Browser, error) {
	nb, err := r.Null.NewBrowser(ctx, opts)
	if err != nil {
		return nil, err
	}
	fb := &fakeBrowser{Browser: nb, frames: make(chan browser.Frame), crashed: make(chan struct{})}
	r.mu.Lock()
	r.created = append(r.created, fb)
	r.mu.Unlock()
	return fb, nil
}

func (r *fakeRuntime) last() *fakeBrowser {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.created[len(r.created)-1]
}

func TestHubStreamingAndCrash(t *testing.T) {
	rt := &fakeRuntime{}
	w, err := New(Config{ID: "w-hub", Secret: testSecret, Master: "127.0.0.1:1", Runtime: rt, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.startBundleServer(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(w.handler())
	defer func() { srv.Close(); w.Close() }()
	app := wire.App{Name: "A", MountPoint: "app", Entry: "https://example.test/", Strategy: wire.SingleBrowserPerUser}
	_ = w.apps.AddApplication(context.Background(), app)
	iid := "w-hub.hubhubhubhub"
	if err := w.apps.CreateInstance(context.Background(), wire.CreateInstance{App: app, InstanceID: iid}); err != nil {
		t.Fatal(err)
	}
	shareWithAnyone(w, iid, RoleReader)
	c := noRedirect()
	resp, err := c.Get(srv.URL + "/app/a/" + iid)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, cookie := resp.Header.Get("Location"), resp.Cookies()[0]
	fb := rt.last()

	dial := func(withCookie bool) *websocket.Conn {
		h := http.Header{"Origin": {srv.URL}}
		if withCookie {
			h.Add("Cookie", cookie.String())
		}
		conn, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+loc+"/ws", h)
		if err != nil {
			t.Fatal(err)
		}
		var hello map[string]any
		if err := conn.ReadJSON(&hello); err != nil || hello["t"] != "hello" {
			t.Fatalf("hello: %v %v", hello, err)
		}
		return conn
	}
	owner := dial(true)
	defer owner.Close()
	slow := dial(false) // never reads again
	defer slow.Close()

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
			fb.frames <- browser.Frame{Data: big, Width: 800, Height: 600, DeviceWidth: 800, DeviceHeight: 600, Seq: uint64(i), Timestamp: time.Now()}
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
		n := binary.BigEndian.Uint32(data)
		var hdr frameHeader
		if err := json.Unmarshal(data[4:4+n], &hdr); err != nil {
			t.Fatal(err)
		}
		if hdr.Seq <= lastSeq || hdr.W != 800 || len(data)-4-int(n) != len(big) || data[4+n] != 0xff {
			t.Fatalf("bad frame: %+v after seq %d", hdr, lastSeq)
		}
		lastSeq = hdr.Seq
		received++
	}
	st := w.frames.snapshot()
	t.Logf("owner received %d of 300 frames; worker: %+v", received, st)
	if st.Produced != 300 || st.Dropped == 0 {
		t.Fatalf("the slow viewer should have lost frames, not the producer: %+v", st)
	}
	fb.mu.Lock()
	got := fb.inputs
	fb.mu.Unlock()
	if len(got) != 1 || got[0].Key != "a" {
		t.Fatalf("inputs reaching the browser: %+v", got)
	}

	// A crash: the owner is told, with a link that gives a new browser.
	fb.crash()
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
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if nl := resp.Header.Get("Location"); resp.StatusCode != 302 || nl == loc || nl == "" {
		t.Fatalf("after the crash the instance URL should give a new browser: %d %q (old %q)", resp.StatusCode, nl, loc)
	}
}
