package web

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/httpsec"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium"
)

// The engine page names each asset by its current version, and every asset
// it names exists: a browser keeps them until the binary changes them.
func TestEnginePageNamesVersionedAssets(t *testing.T) {
	var buf bytes.Buffer
	base := "/hello/a/w-test.abcdefghijkl"
	if err := Engine.Execute(&buf, EngineData{App: "hello", Base: base, Socket: base + "/b/bxyz/ws"}); err != nil {
		t.Fatal(err)
	}
	refs := regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(buf.String(), -1)
	seen := map[string]bool{}
	for _, m := range refs {
		rest, ok := strings.CutPrefix(m[1], base+"/_cb/")
		if !ok {
			t.Errorf("reference %q outside %s/_cb/", m[1], base)
			continue
		}
		name, v, _ := strings.Cut(rest, "?v=")
		if want := Assets.Version(name); want == "" || v != want {
			t.Errorf("reference %q: version %q, want %q", m[1], v, want)
		}
		seen[name] = true
	}
	if !seen["engine.js"] || !seen["engine.css"] {
		t.Fatalf("engine page does not load engine.js and engine.css: %s", buf.String())
	}
}

// Templates are rendered, never handed out as files.
func TestAssetsLeaveOutTemplates(t *testing.T) {
	_ = fs.WalkDir(Static, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if served := Assets.Version(name) != ""; served == strings.HasSuffix(name, ".html") {
			t.Errorf("%s: served %v", name, served)
		}
		return nil
	})
}

// Every inline script and style of our pages is allowed by its hash in the
// pages' Content-Security-Policy, as the template source has it.
func TestInlineBlocksInPolicy(t *testing.T) {
	csp := httpsec.PageCSP()
	blocks := regexp.MustCompile(`(?s)<(?:script|style)>(.*?)</(?:script|style)>`)
	_ = fs.WalkDir(files, "static", func(name string, d fs.DirEntry, err error) error {
		if err != nil || !strings.HasSuffix(name, ".html") {
			return err
		}
		b, _ := files.ReadFile(name)
		for _, m := range blocks.FindAllSubmatch(b, -1) {
			sum := sha256.Sum256(m[1])
			if h := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"; !strings.Contains(csp, h) {
				t.Errorf("%s: inline block %.40q not in the policy (%s)", name, m[1], h)
			}
		}
		return nil
	})
}

// The client engine against a scripted worker: a real engine page in
// headless Chromium, its socket answered by the test, which decides when
// each hello, frame, hold or move happens.

const (
	engineBase = "/app/a/w-test.engineengine"
	enginePath = engineBase + "/b/bengine"
)

// fakeSocket is one engine socket as the worker sees it.
type fakeSocket struct {
	conn *websocket.Conn
	wmu  sync.Mutex
	msgs chan map[string]any // what the engine sent, closed when it is gone
}

func (s *fakeSocket) send(t *testing.T, v any) {
	t.Helper()
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.conn.WriteJSON(v); err != nil {
		t.Fatal(err)
	}
}

func (s *fakeSocket) hello(t *testing.T) {
	t.Helper()
	s.send(t, map[string]any{"t": "hello", "browser": "bengine", "worker": "w-test", "page": map[string]string{"url": "https://example.test/"}})
}

// frame sends a frame (a real, tiny JPEG) with sequence number seq.
func (s *fakeSocket) frame(t *testing.T, seq int) {
	t.Helper()
	var img bytes.Buffer
	im := image.NewGray(image.Rect(0, 0, 8, 6))
	for i := range im.Pix {
		im.Pix[i] = color.Gray{Y: 200}.Y
	}
	_ = jpeg.Encode(&img, im, nil)
	hdr, _ := json.Marshal(map[string]any{"seq": seq, "w": 8, "h": 6, "dw": 800, "dh": 600, "ts": time.Now().UnixMilli()})
	msg := binary.BigEndian.AppendUint32(nil, uint32(len(hdr)))
	msg = append(append(msg, hdr...), img.Bytes()...)
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.conn.WriteMessage(websocket.BinaryMessage, msg); err != nil {
		t.Fatal(err)
	}
}

// next is the engine's next message that match accepts.
func (s *fakeSocket) next(t *testing.T, what string, match func(map[string]any) bool) map[string]any {
	t.Helper()
	timeout := time.After(testutil.Scale(30 * time.Second))
	for {
		select {
		case m, ok := <-s.msgs:
			if !ok {
				t.Fatalf("socket closed while waiting for %s", what)
			}
			if match(m) {
				return m
			}
		case <-timeout:
			t.Fatalf("no %s from the engine", what)
		}
	}
}

// keydowns reads the next n keydowns' keys.
func (s *fakeSocket) keydowns(t *testing.T, n int) []string {
	t.Helper()
	var keys []string
	for len(keys) < n {
		m := s.next(t, "keydown", func(m map[string]any) bool { return m["t"] == "input" && m["type"] == "keydown" })
		keys = append(keys, fmt.Sprint(m["key"]))
	}
	return keys
}

// engineSite serves the engine page and its assets, and hands each socket
// the engine opens to the test.
func engineSite(t *testing.T) (string, chan *fakeSocket) {
	t.Helper()
	socks := make(chan *fakeSocket, 8)
	up := websocket.Upgrader{}
	mux := http.NewServeMux()
	mux.HandleFunc(enginePath, func(w http.ResponseWriter, r *http.Request) {
		_ = Engine.Execute(w, EngineData{App: "app", AppName: "App", Base: engineBase, Socket: enginePath + "/ws"})
	})
	mux.HandleFunc(engineBase+"/_cb/", func(w http.ResponseWriter, r *http.Request) {
		if !Assets.Serve(w, r, strings.TrimPrefix(r.URL.Path, engineBase+"/_cb/")) {
			http.NotFound(w, r)
		}
	})
	mux.HandleFunc(enginePath+"/ws", func(w http.ResponseWriter, r *http.Request) {
		conn, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		s := &fakeSocket{conn: conn, msgs: make(chan map[string]any, 10000)}
		go func() {
			defer close(s.msgs)
			for {
				var m map[string]any
				if err := conn.ReadJSON(&m); err != nil {
					return
				}
				s.msgs <- m
			}
		}()
		socks <- s
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + enginePath, socks
}

func accept(t *testing.T, socks chan *fakeSocket) *fakeSocket {
	t.Helper()
	select {
	case s := <-socks:
		t.Cleanup(func() { s.conn.Close() })
		return s
	case <-time.After(testutil.Scale(30 * time.Second)):
		t.Fatal("the engine opened no socket")
		return nil
	}
}

// userEngine opens the engine page in a user's own headless Chromium.
func userEngine(t *testing.T, url string) browser.Browser {
	t.Helper()
	testutil.NeedChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rt, err := chromium.New(ctx, chromium.Config{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	b, err := rt.NewBrowser(ctx, browser.Options{URL: url, Width: 900, Height: 700})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// dataset waits until the engine page's body.dataset[key] is want.
func dataset(t *testing.T, b browser.Browser, key, want string) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, func() error {
		var got string
		if err := b.Evaluate(context.Background(), fmt.Sprintf("String(document.body.dataset[%q])", key), &got); err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("dataset.%s = %q, want %q", key, got, want)
		}
		return nil
	})
}

func typeKey(t *testing.T, b browser.Browser, k string) {
	t.Helper()
	for _, ev := range []browser.InputEvent{{Type: browser.InputKeyDown, Key: k, Text: k}, {Type: browser.InputKeyUp, Key: k}} {
		if err := b.Input(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
}

// TestEngineKeepsInputAcrossMoves: keys typed while a migration holds the
// browser's input, input the worker sent back, and keys typed while the
// engine reconnects after the move all reach the browser's new copy, in
// the order they were typed, and none the old one.
func TestEngineKeepsInputAcrossMoves(t *testing.T) {
	url, socks := engineSite(t)
	b := userEngine(t, url)
	old := accept(t, socks)
	old.hello(t)
	old.frame(t, 1)
	dataset(t, b, "status", "live")
	typeKey(t, b, "a")
	if k := old.keydowns(t, 1); k[0] != "a" {
		t.Fatalf("first key %v", k)
	}

	old.send(t, map[string]any{"t": "hold"})
	dataset(t, b, "status", "moving")
	typeKey(t, b, "b")
	typeKey(t, b, "c")
	// "x" was typed before the engine saw the hold: the worker sends it
	// back, and it goes before b and c.
	old.send(t, map[string]any{"t": "held", "input": map[string]any{"t": "input", "type": "keydown", "key": "x", "text": "x"}})
	dataset(t, b, "queued", "5")
	old.send(t, map[string]any{"t": "moved", "reason": "test"})
	old.conn.Close()
	for m := range old.msgs {
		if m["t"] == "input" && m["type"] == "keydown" {
			t.Fatalf("the old copy got a key during the hold: %v", m)
		}
	}

	moved := accept(t, socks)
	dataset(t, b, "status", "moving") // reconnected, no hello yet
	typeKey(t, b, "d")
	dataset(t, b, "queued", "7")
	moved.hello(t)
	if got := strings.Join(moved.keydowns(t, 4), ""); got != "xbcd" {
		t.Fatalf("keys at the new copy: %q, want xbcd", got)
	}
	dataset(t, b, "queued", "0")
	moved.frame(t, 1)
	dataset(t, b, "status", "live")
	typeKey(t, b, "e")
	if k := moved.keydowns(t, 1); k[0] != "e" {
		t.Fatalf("key after the move %v", k)
	}
}

// TestEngineKeepsABoundedQueue: beyond 2000 events kept while
// disconnected, the oldest go.
func TestEngineKeepsABoundedQueue(t *testing.T) {
	url, socks := engineSite(t)
	b := userEngine(t, url)
	first := accept(t, socks)
	first.hello(t)
	first.frame(t, 1)
	dataset(t, b, "status", "live")
	first.conn.Close()
	second := accept(t, socks)
	dataset(t, b, "status", "reconnecting")
	if err := b.Evaluate(context.Background(), `(() => { const c = document.getElementById("keys");
		for (let i = 0; i < 2100; i++) { c.dispatchEvent(new KeyboardEvent("keydown", {key: "K" + i})); } return true; })()`, nil); err != nil {
		t.Fatal(err)
	}
	dataset(t, b, "queued", "2000")
	dataset(t, b, "dropped", "100")
	second.hello(t)
	keys := second.keydowns(t, 2000)
	if keys[0] != "K100" || keys[1999] != "K2099" {
		t.Fatalf("kept keys from %s to %s, want K100 to K2099", keys[0], keys[1999])
	}
}

// TestEngineStatusNeedsFrames: a connected engine that gets no frame asks
// for one after a second; input that no frame answers asks again and then
// shows "connection problem" instead of "live", until a frame comes.
func TestEngineStatusNeedsFrames(t *testing.T) {
	url, socks := engineSite(t)
	b := userEngine(t, url)
	s := accept(t, socks)
	s.hello(t)
	s.next(t, "a refresh after a connect without a frame", func(m map[string]any) bool { return m["t"] == "refresh" })
	typeKey(t, b, "q")
	s.keydowns(t, 1)
	s.next(t, "a refresh for input without a frame", func(m map[string]any) bool { return m["t"] == "refresh" })
	dataset(t, b, "status", "connection problem")
	s.frame(t, 1)
	dataset(t, b, "status", "live")
}
