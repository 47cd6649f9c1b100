package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	be "encoding/binary"
	"encoding/json"
	"fmt"
	"image"
	"image/draw"
	"image/jpeg"
	"image/png"
	"math"
	"net/http"
	"net/http/cookiejar"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/internal/cdpraw"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium"
)

// tileTolerance is the largest mean difference (0..255, over the three
// channels) of any 16×16 block between an engine's composed screen and the
// worker's whole frame, both decoded by the viewer's Chromium. The tiles
// are the frame's own JPEG blocks (worker/tiles), so the difference is
// only the chroma upsampling at a tile's edge, which blends with its
// neighbour in the atlas rather than in the frame. A glyph missing from
// the screen is far above it; the test checks that too.
const tileTolerance = 3

// shotTolerance is the largest mean difference, as tileTolerance, between
// an engine's composed screen and Page.captureScreenshot's lossless PNG of
// the page at the same moment. The screencast's frames are JPEG at
// quality 80 with 4:2:0 chroma, which loses that much in a 16×16 block of
// coloured text. Measured on the tiles app at 900×600, the states
// shotSame compares, over 8 runs: at rest, typed into and after the video
// 11.85 (once 12.54), scrolled to 480 12.98 to 13.26, back to 360 12.40
// to 13.02, always in text; the worker's whole frame differs from the
// screenshot as much (the composition adds ≤ tileTolerance). Typing a
// few words changes the screen by 38 (checked: the comparison is not
// blind); a frame of another scroll offset by 165.
const shotTolerance = 16

// TestTileUpdatesShowThePage: with --frame-tiles, client engines get the
// changed tiles of each frame, composed on their canvas. After typing, a
// video playing and paused, scrolling by wheel notches down and back up, a
// resize, and for a viewer who joins late, the engine's screen equals the
// page's whole frame (what an engine without tiles is sent: the
// screencast's picture of the page) within JPEG's tolerance; while the
// video plays, everything outside it does. And on the browser of an
// automation session, whose page the test can screenshot over CDP, the
// engine's screen equals Page.captureScreenshot's picture of the page.
// The steps are subtests, in order, on the same browsers: one that fails
// does not hide the others' results.
func TestTileUpdatesShowThePage(t *testing.T) {
	// Frames not graded for the CPU: a loaded host would otherwise
	// change their size, every change a whole frame, and typing might
	// bring no update to check.
	c := appsCluster(t, "--frame-tiles", "--frame-scale-min", "1")
	users := userBrowsers(t)
	// The browsers are the whole test's (a subtest's close when it ends).
	r := &tilesRun{c: c, alice: open(t, users, "http://"+c.public+"/tiles")}
	t.Run("typing", r.typing)
	t.Run("video", r.video)
	t.Run("scrolling", r.scrolling)
	if r.browserPath != "" {
		r.bob = open(t, users, "http://"+c.public+r.browserPath)
	}
	t.Run("late joiner", r.lateJoiner)
	t.Run("resize", r.resize)
	t.Run("screenshot", func(t *testing.T) { tilesScreenshot(t, c, users) })
}

// tilesRun is what the steps of TestTileUpdatesShowThePage share: alice
// owns a browser of the tiles app, bob watches it read-only.
type tilesRun struct {
	c           *cluster
	alice, bob  browser.Browser
	browserPath string  // alice's browser's, once her engine is live
	x0, y0      float64 // where alice's canvas starts
	typed       string  // what alice typed into the page
}

// needAlice skips a step when the first one did not get alice's engine
// live.
func (r *tilesRun) needAlice(t *testing.T) {
	t.Helper()
	if r.browserPath == "" {
		t.Skip("alice's engine is not live")
	}
}

// typeIn types s into alice's page and waits for the page's title.
func (r *tilesRun) typeIn(t *testing.T, s string) {
	t.Helper()
	typeText(t, r.alice, s)
	r.typed += s
	eventually(t, r.alice, "typed text reached the virtual page", "document.title", "typed:"+r.typed+" · CloudBrowser")
}

// typing: alice's first frame, then keys into the page's input.
func (r *tilesRun) typing(t *testing.T) {
	c, alice := r.c, r.alice
	base := "http://" + c.public
	eventually(t, alice, "alice's engine connects", "document.body.dataset.status", "live")
	ownViewport(t, alice)
	browserPath := strings.TrimPrefix(alice.Page().URL, base)
	if out, err := c.cli(t, "share", browserPath, "*", "reader"); err != nil {
		t.Fatalf("share: %v %s", err, out)
	}
	r.browserPath = browserPath
	before := sameScreen(t, c, r.browserPath, alice, "alice's first frame")

	r.x0, r.y0 = canvasOrigin(t, alice)
	click(t, alice, r.x0+60, r.y0+60)
	r.typeIn(t, "tiles compose")
	eventually(t, alice, "typing came as tile updates", "Number(document.body.dataset.tileUpdates || 0) > 0", "true")
	// The comparison sees a change as small as the typed text. The title
	// changes before the page paints the text: a screen caught up with
	// the frame before that paint is looked at again.
	testutil.Eventually(t, 30*time.Second, func() error {
		after := sameScreen(t, c, r.browserPath, alice, "after typing")
		if d := blockDiff(before.img, after.img); d <= tileTolerance {
			return fmt.Errorf("the screens before and after typing differ by %.1f, not above the tolerance %d: the comparison is blind, or the text never showed", d, tileTolerance)
		}
		return nil
	})
}

// video: the app's button (fixed at 340,40, 120×40 CSS pixels; its
// mousedown keeps the focus in the input) plays the canvas animation and
// the <video> of it, and pauses them.
func (r *tilesRun) video(t *testing.T) {
	r.needAlice(t)
	alice := r.alice
	playing := "typed:" + r.typed + " [video playing] · CloudBrowser"
	click(t, alice, r.x0+400, r.y0+60)
	eventually(t, alice, "the video plays", "document.title", playing)
	defer func() { // paused for the next steps, also when this one fails
		var title string
		if alice.Evaluate(ctxT(t, 10*time.Second), "document.title", &title) == nil && title == playing {
			click(t, alice, r.x0+400, r.y0+60)
		}
	}()
	played := mediaWhilePlaying(t, r.c, r.browserPath, alice)
	click(t, alice, r.x0+400, r.y0+60)
	eventually(t, alice, "the video pauses", "document.title", "typed:"+r.typed+" · CloudBrowser")
	sameScreen(t, r.c, r.browserPath, alice, "after the video paused")
	t.Logf("the video played for %d tile updates", played)
}

// scrolling: the common mouse's notches, one after another (each a move
// of the screen, with the worker's scroll moves), then one back up. Each
// notch scrolls 120 CSS pixels; the worker's frames say how far the page
// is scrolled.
func (r *tilesRun) scrolling(t *testing.T) {
	r.needAlice(t)
	alice, c := r.alice, r.c
	before := screenOf(t, alice)
	wheel := func(dy float64) {
		input(t, alice, browser.InputEvent{Type: browser.InputWheel, X: r.x0 + 400, Y: r.y0 + 400, DeltaY: dy})
	}
	for range 4 {
		wheel(120)
	}
	waitScrolled(t, c, r.browserPath, 480, "4 wheel notches down")
	down := sameScreen(t, c, r.browserPath, alice, "after 4 wheel notches down")
	if d := blockDiff(before.img, down.img); d <= tileTolerance {
		t.Fatalf("the screens before and after scrolling down differ by %.1f: the page did not scroll", d)
	}
	wheel(-120)
	waitScrolled(t, c, r.browserPath, 360, "a wheel notch back up")
	up := sameScreen(t, c, r.browserPath, alice, "after a wheel notch back up")
	if d := blockDiff(down.img, up.img); d <= tileTolerance {
		t.Fatalf("the screens before and after scrolling up differ by %.1f: the page did not scroll", d)
	}
	var moves string
	if err := alice.Evaluate(ctxT(t, 10*time.Second), `document.body.dataset.scrollMoves || "0"`, &moves); err != nil {
		t.Fatal(err)
	}
	t.Logf("the scrolls came as %s move updates", moves)
}

// lateJoiner: bob joins late, read-only: a keyframe, then updates.
func (r *tilesRun) lateJoiner(t *testing.T) {
	r.needAlice(t)
	bob := r.bob
	eventually(t, bob, "bob's engine connects read-only", "document.body.dataset.status", "live (read-only)")
	r.typeIn(t, " and more")
	eventually(t, bob, "bob sees alice's typing", "document.title", "typed:"+r.typed+" · CloudBrowser")
	eventually(t, bob, "bob gets tile updates", "Number(document.body.dataset.tileUpdates || 0) > 0", "true")
	sameScreen(t, r.c, r.browserPath, bob, "the late joiner")
	sameScreen(t, r.c, r.browserPath, r.alice, "alice beside the late joiner")
}

// resize: a keyframe of the new size, then updates on it.
func (r *tilesRun) resize(t *testing.T) {
	r.needAlice(t)
	alice, c := r.alice, r.c
	input(t, alice, browser.InputEvent{Type: browser.InputResize, Width: 860, Height: 600})
	eventually(t, alice, "the virtual page follows the smaller window", "Number(document.body.dataset.pageWidth || 0) <= 860", "true")
	ownViewport(t, alice)
	updates := tileUpdatesOf(t, alice)
	// A key's frame comes whole if the viewer's pacing skipped the frame
	// before it (a loaded host): some key of a few brings an update.
	for i := 0; ; i++ {
		if i == 10 {
			t.Fatal("no tile update for 10 keys typed after the resize")
		}
		seq := shownSeq(t, alice)
		r.typeIn(t, "!")
		eventually(t, alice, "a frame of the key", "document.body.dataset.frameSeq !== "+strconv.Quote(seq), "true")
		if tileUpdatesOf(t, alice) > updates {
			t.Logf("a tile update after %d keys on the new size", i+1)
			break
		}
	}
	s := sameScreen(t, c, r.browserPath, alice, "after the resize")
	if w := s.img.Bounds().Dx(); w > 870 {
		t.Fatalf("the screen is %d pixels wide after the resize to 860", w)
	}
	sameScreen(t, c, r.browserPath, r.bob, "the late joiner after the resize")
}

// tilesScreenshot: the browser of an automation session of the tiles app,
// driven over CDP (a raw client through the gate, as any automation
// client) and watched read-only in the client engine (the session's
// liveUrl), against the page's own screenshots: its first frame, typing,
// the video played and paused, wheel notches down and back up.
func tilesScreenshot(t *testing.T, c *cluster, users *chromium.Runtime) {
	if st, _, body := c.api("PUT", "/api/v1/apps/tiles/job-users/automation", c.token, nil); st/100 != 2 {
		t.Fatalf("grant automation on tiles: %d %s", st, body)
	}
	sess := c.openSession(t, "tiles", map[string]any{"keepAlive": "5m", "viewport": map[string]any{"width": 900, "height": 600}})
	page := dialSessionPage(t, sess.CDPURL)
	browserPath := strings.TrimPrefix(sess.LiveURL, "http://"+c.public)
	if out, err := c.cli(t, "share", browserPath, "*", "reader"); err != nil {
		t.Fatalf("share: %v %s", err, out)
	}
	carol := open(t, users, sess.LiveURL)
	eventually(t, carol, "the watcher's engine connects read-only", "document.body.dataset.status", "live (read-only)")
	first := shotSame(t, c, browserPath, carol, page, "the session's first frame")

	page.eval(t, `document.getElementById("t").focus()`)
	page.call(t, "Input.insertText", map[string]any{"text": "typed by automation"}, nil)
	page.waitTitle(t, "typed:typed by automation")
	eventually(t, carol, "the watcher gets tile updates", "Number(document.body.dataset.tileUpdates || 0) > 0", "true")
	typed := shotSame(t, c, browserPath, carol, page, "the session after typing")
	// The comparison sees a change as small as the typed text.
	if d := blockDiff(first.img, typed.img); d <= shotTolerance {
		t.Fatalf("the screens before and after typing differ by %.1f, not above the screenshot tolerance %d: the comparison is blind", d, shotTolerance)
	}

	// The video, played (its updates reach the watcher) and paused, by
	// clicks of the page's own.
	page.eval(t, `document.getElementById("v").click()`)
	page.waitTitle(t, "typed:typed by automation [video playing]")
	from := tileUpdatesOf(t, carol)
	testutil.Eventually(t, 30*time.Second, func() error {
		if n := tileUpdatesOf(t, carol) - from; n < 10 {
			return fmt.Errorf("%d tile updates while the video plays, want 10", n)
		}
		return nil
	})
	page.eval(t, `document.getElementById("v").click()`)
	page.waitTitle(t, "typed:typed by automation")
	shotSame(t, c, browserPath, carol, page, "the session after the video")

	// Wheel notches down, one after another, then one back up.
	for range 4 {
		page.call(t, "Input.dispatchMouseEvent", map[string]any{"type": "mouseWheel", "x": 450, "y": 400, "deltaX": 0, "deltaY": 120}, nil)
	}
	page.waitScrollY(t, 480)
	// The worker's frames show it before any screenshot: a screenshot
	// makes the screencast send a frame, which would hide a frame that
	// never came.
	waitScrolled(t, c, browserPath, 480, "the session's page, scrolled to 480 (its window.scrollY)")
	shotSame(t, c, browserPath, carol, page, "the session after 4 wheel notches down")
	page.call(t, "Input.dispatchMouseEvent", map[string]any{"type": "mouseWheel", "x": 450, "y": 400, "deltaX": 0, "deltaY": -120}, nil)
	page.waitScrollY(t, 360)
	waitScrolled(t, c, browserPath, 360, "the session's page, scrolled back to 360 (its window.scrollY)")
	shotSame(t, c, browserPath, carol, page, "the session after a wheel notch back up")
}

// mediaRect is where the tiles app's animation and video are (both, or
// one: 0 the animation, 1 the video) on m, a frame of a page pageWidth
// CSS pixels wide, not scrolled (index.html: 160×120 each, at (24,100)
// and (200,100)). A frame's scale changes with the link's grade.
func mediaRect(m image.Image, pageWidth int, which ...int) image.Rectangle {
	r := image.Rect(24, 100, 360, 220)
	if len(which) > 0 {
		r = image.Rect(24+176*which[0], 100, 184+176*which[0], 220)
	}
	scale := float64(m.Bounds().Dx()) / float64(pageWidth)
	sc := func(v int) int { return int(math.Round(float64(v) * scale)) }
	return image.Rect(sc(r.Min.X), sc(r.Min.Y), sc(r.Max.X), sc(r.Max.Y))
}

// pageWidthOf is the width of b's virtual page in CSS pixels.
func pageWidthOf(t *testing.T, b browser.Browser) int {
	t.Helper()
	var w int
	if err := b.Evaluate(ctxT(t, 10*time.Second), "Number(document.body.dataset.pageWidth || 0)", &w); err != nil {
		t.Fatal(err)
	}
	if w <= 0 {
		t.Fatalf("the virtual page is %d pixels wide", w)
	}
	return w
}

func tileUpdatesOf(t *testing.T, b browser.Browser) int {
	t.Helper()
	var n int
	if err := b.Evaluate(ctxT(t, 10*time.Second), "Number(document.body.dataset.tileUpdates || 0)", &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// mediaWhilePlaying checks b's engine while the tiles app's video plays
// (the page otherwise at rest): frames keep coming as tile updates, the
// animation's and the video's regions of the screen change from one look
// to the next, and outside their 64×64 tiles the screen equals the
// worker's latest whole frame. Those tiles are compared once the video
// is paused: until then they come coarsened (busy tiles), and the whole
// frame is likely of a later moment of the video. It returns the tile
// updates seen.
func mediaWhilePlaying(t *testing.T, c *cluster, browserPath string, b browser.Browser) int {
	t.Helper()
	pageWidth := pageWidthOf(t, b)
	from := tileUpdatesOf(t, b)
	const many = 10
	var prev *screen
	var changed [2]bool
	var r image.Rectangle
	var diff float64
	var at image.Point
	testutil.Eventually(t, 30*time.Second, func() error {
		f, err := wholeFrame(t, c, browserPath)
		if err != nil {
			return fmt.Errorf("whole frame: %w", err)
		}
		s := screenOf(t, b)
		ref := decodeIn(t, b, f.data)
		if s.img.Bounds().Size() != ref.Bounds().Size() {
			return fmt.Errorf("while the video plays: the screen is %v, the frame %v", s.img.Bounds(), ref.Bounds())
		}
		// Outside the tiles that hold some of the media: busy tiles,
		// which come coarsened until they rest (docs/client-engine.md).
		r = mediaRect(s.img, pageWidth)
		r = image.Rect(r.Min.X/64*64, r.Min.Y/64*64, (r.Max.X+63)/64*64, (r.Max.Y+63)/64*64)
		if diff, at = blockDiffAt(masked(s.img, r), masked(ref, r)); diff > tileTolerance {
			return fmt.Errorf("while the video plays, the screen (frame %s) differs from the worker's frame %s outside the video's tiles %v by %.1f in the 16×16 block at %v (tolerance %d)", s.seq, f.seq, r, diff, at, tileTolerance)
		}
		// The media change between looks of one size (the link's grade
		// may change it).
		if prev == nil || prev.img.Bounds() != s.img.Bounds() {
			prev = &s
			return fmt.Errorf("while the video plays: a first look at the screen")
		}
		var err2 error
		for i, name := range []string{"the animation", "the video"} {
			mr := mediaRect(s.img, pageWidth, i)
			d := blockDiff(crop(prev.img, mr), crop(s.img, mr))
			if changed[i] = changed[i] || d > tileTolerance; !changed[i] {
				err2 = fmt.Errorf("%s's region %v of the screen: frames %s and %s differ by %.1f: not playing on the screen", name, mr, prev.seq, s.seq, d)
			}
		}
		if err2 != nil {
			return err2
		}
		if n := tileUpdatesOf(t, b) - from; n < many {
			return fmt.Errorf("%d tile updates while the video plays, want %d", n, many)
		}
		return nil
	})
	t.Logf("while the video plays: outside %v, largest 16×16 block difference %.2f", r, diff)
	return tileUpdatesOf(t, b) - from
}

// decodeIn decodes a JPEG in b's Chromium, as its engine does.
func decodeIn(t *testing.T, b browser.Browser, data []byte) image.Image {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got string
	js := `(async () => {
		const r = await fetch("data:image/jpeg;base64,` + base64.StdEncoding.EncodeToString(data) + `");
		const bmp = await createImageBitmap(await r.blob());
		const c = document.createElement("canvas");
		c.width = bmp.width; c.height = bmp.height;
		c.getContext("2d").drawImage(bmp, 0, 0);
		return c.toDataURL("image/png");
	})()`
	if err := b.Evaluate(ctx, js, &got); err != nil {
		t.Fatal(err)
	}
	return pngOf(t, got)
}

func pngOf(t *testing.T, dataURL string) image.Image {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(dataURL, "data:image/png;base64,"))
	if err != nil {
		t.Fatal(err)
	}
	return decodePNG(t, raw)
}

func decodePNG(t *testing.T, raw []byte) image.Image {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("png: %v", err)
	}
	return img
}

// screen is an engine's composed screen and the frame it shows.
type screen struct {
	seq string
	img image.Image
}

func screenOf(t *testing.T, b browser.Browser) screen {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got struct{ Seq, PNG string }
	if err := b.Evaluate(ctx, `({Seq: document.body.dataset.frameSeq || "", PNG: window.cloudbrowserEngine.screen()})`, &got); err != nil {
		t.Fatal(err)
	}
	return screen{seq: got.Seq, img: pngOf(t, got.PNG)}
}

// shownSeq is the seq of the frame b's engine shows (cheaper than its
// screen).
func shownSeq(t *testing.T, b browser.Browser) string {
	t.Helper()
	var seq string
	if err := b.Evaluate(ctxT(t, 10*time.Second), `document.body.dataset.frameSeq || ""`, &seq); err != nil {
		t.Fatal(err)
	}
	return seq
}

// workerFrame is the browser's last frame as an engine without tiles
// gets it on joining: its seq, the page's scroll offset (CSS pixels) and
// the picture.
type workerFrame struct {
	seq  string
	sy   float64
	data []byte
}

// frameJars keeps, per cluster, the identity of the test's own frame
// sockets: each socket without one would make a new anonymous identity,
// of which the worker lets an address make only so many (a handshake's
// answer cannot set the cookie; the browser's page does).
var frameJars sync.Map // *cluster → http.CookieJar

func frameJar(c *cluster, browserPath string) (http.CookieJar, error) {
	if j, ok := frameJars.Load(c); ok {
		return j.(http.CookieJar), nil
	}
	jar, err := cookiejar.New(nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Jar: jar, Timeout: 10 * time.Second}).Get("http://" + c.public + browserPath)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	frameJars.Store(c, jar)
	return jar, nil
}

// wholeFrame is the browser's last frame, whole.
func wholeFrame(t *testing.T, c *cluster, browserPath string) (workerFrame, error) {
	t.Helper()
	base := "http://" + c.public
	jar, err := frameJar(c, browserPath)
	if err != nil {
		return workerFrame{}, err
	}
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second, Jar: jar}
	ws, _, err := d.Dial("ws://"+c.public+browserPath+"/ws", http.Header{"Origin": {base}})
	if err != nil {
		return workerFrame{}, err
	}
	defer ws.Close()
	ws.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		typ, data, err := ws.ReadMessage()
		if err != nil {
			return workerFrame{}, err
		}
		if typ != websocket.BinaryMessage {
			continue
		}
		n := be.BigEndian.Uint32(data)
		var hdr struct {
			Seq   uint64  `json:"seq"`
			SY    float64 `json:"sy"`
			Tiles [][]int `json:"tiles"`
		}
		if err := json.Unmarshal(data[4:4+n], &hdr); err != nil {
			return workerFrame{}, err
		}
		if hdr.Tiles != nil {
			t.Fatal("a tile update to an engine that never asked for tiles")
		}
		if _, err := jpeg.DecodeConfig(bytes.NewReader(data[4+n:])); err != nil {
			return workerFrame{}, err
		}
		return workerFrame{seq: fmt.Sprint(hdr.Seq), sy: hdr.SY, data: data[4+n:]}, nil
	}
}

// waitScrolled waits until the worker's last frame is of the page
// scrolled to sy (what: the scroll).
func waitScrolled(t *testing.T, c *cluster, browserPath string, sy float64, what string) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, func() error {
		f, err := wholeFrame(t, c, browserPath)
		if err != nil {
			return fmt.Errorf("%s: whole frame: %w", what, err)
		}
		if f.sy != sy {
			return fmt.Errorf("%s: the worker's last frame %s is of the page scrolled to %v, want %v", what, f.seq, f.sy, sy)
		}
		return nil
	})
}

// caughtUp waits until b's engine shows the browser's last frame, and
// returns its screen and that frame.
func caughtUp(t *testing.T, c *cluster, browserPath string, b browser.Browser, what string) (screen, workerFrame) {
	t.Helper()
	var s screen
	var f workerFrame
	testutil.Eventually(t, 30*time.Second, func() error {
		var err error
		if f, err = wholeFrame(t, c, browserPath); err != nil {
			return fmt.Errorf("%s: whole frame: %w", what, err)
		}
		// The seq first: a screen costs more to read.
		if seq := shownSeq(t, b); seq != f.seq {
			return fmt.Errorf("%s: the engine shows frame %s, the worker's last is %s", what, seq, f.seq)
		}
		if s = screenOf(t, b); s.seq != f.seq {
			return fmt.Errorf("%s: the engine shows frame %s, the worker's last is %s", what, s.seq, f.seq)
		}
		return nil
	})
	return s, f
}

// sameScreen waits until b's engine shows the browser's last frame and
// its composed screen equals that frame, whole, within tileTolerance:
// retried until then (tiles left approximate by a scroll's move or a
// video are repaired a moment later), and failing with the last
// difference.
func sameScreen(t *testing.T, c *cluster, browserPath string, b browser.Browser, what string) screen {
	t.Helper()
	var s screen
	var diff float64
	var at image.Point
	testutil.Eventually(t, 30*time.Second, func() error {
		var f workerFrame
		s, f = caughtUp(t, c, browserPath, b, what)
		ref := decodeIn(t, b, f.data)
		if s.img.Bounds().Size() != ref.Bounds().Size() {
			return fmt.Errorf("%s: the screen is %v, the frame %v", what, s.img.Bounds(), ref.Bounds())
		}
		if diff, at = blockDiffAt(s.img, ref); diff > tileTolerance {
			return fmt.Errorf("%s: the engine's screen (frame %s) differs from the page's frame by %.1f in the 16×16 block at %v (tolerance %d)", what, s.seq, diff, at, tileTolerance)
		}
		return nil
	})
	t.Logf("%s: frame %s, largest 16×16 block difference %.2f", what, s.seq, diff)
	if diff > tileTolerance { // not reached: Eventually failed with the last difference
		t.Fatalf("%s: the engine's screen differs from the page's frame by %.1f in a 16×16 block (tolerance %d)", what, diff, tileTolerance)
	}
	return s
}

// shotSame takes a screenshot of the page (p), waits until b's engine
// shows the browser's last frame, takes another, and compares the
// engine's screen with the screenshot: the same moment if the two
// screenshots are the same (the page at rest throughout). Retried until
// they are within shotTolerance: frames trail the page (the engine may
// have caught up with a worker still waiting for the last ones; a
// screenshot makes the screencast send a frame after them), and failing
// with the last difference.
func shotSame(t *testing.T, c *cluster, browserPath string, b browser.Browser, p *cdpPage, what string) screen {
	t.Helper()
	var s screen
	var diff float64
	var at image.Point
	testutil.Eventually(t, 30*time.Second, func() error {
		raw := p.screenshot(t)
		s, _ = caughtUp(t, c, browserPath, b, what)
		if again := p.screenshot(t); !bytes.Equal(again, raw) {
			return fmt.Errorf("%s: the page changed between two screenshots", what)
		}
		shot := decodePNG(t, raw)
		if s.img.Bounds().Size() != shot.Bounds().Size() {
			return fmt.Errorf("%s: the screen (frame %s) is %v, the screenshot %v", what, s.seq, s.img.Bounds(), shot.Bounds())
		}
		if diff, at = blockDiffAt(s.img, shot); diff > shotTolerance {
			return fmt.Errorf("%s: the engine's screen (frame %s) differs from the page's screenshot by %.1f in the 16×16 block at %v (tolerance %d)", what, s.seq, diff, at, shotTolerance)
		}
		return nil
	})
	t.Logf("%s: frame %s against the screenshot, largest 16×16 block difference %.2f at %v", what, s.seq, diff, at)
	if diff > shotTolerance { // not reached: Eventually failed with the last difference
		t.Fatalf("%s: the engine's screen differs from the page's screenshot by %.1f in a 16×16 block (tolerance %d)", what, diff, shotTolerance)
	}
	return s
}

// cdpPage is a raw CDP client of an automation session's own page,
// through the gate like any automation client (chromedp would first open
// a tab of its own in the session's context).
type cdpPage struct {
	cdp     cdpraw.Conn
	session string
}

func dialSessionPage(t *testing.T, cdpURL string) *cdpPage {
	t.Helper()
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	ws, _, err := d.Dial(cdpURL, nil)
	if err != nil {
		t.Fatalf("dial %s: %v", cdpURL, err)
	}
	t.Cleanup(func() { ws.Close() })
	p := &cdpPage{cdp: cdpraw.Conn{WS: ws, Timeout: testutil.Scale(20 * time.Second)}}
	var targets struct {
		TargetInfos []struct {
			TargetID string `json:"targetId"`
			Type     string `json:"type"`
			URL      string `json:"url"`
		} `json:"targetInfos"`
	}
	p.call(t, "Target.getTargets", nil, &targets)
	var id string
	for _, ti := range targets.TargetInfos {
		if ti.Type == "page" {
			if id != "" {
				t.Fatalf("more than the session's page: %+v", targets.TargetInfos)
			}
			id = ti.TargetID
		}
	}
	if id == "" {
		t.Fatalf("no session page among %+v", targets.TargetInfos)
	}
	var att struct {
		SessionID string `json:"sessionId"`
	}
	p.call(t, "Target.attachToTarget", map[string]any{"targetId": id, "flatten": true}, &att)
	p.session = att.SessionID
	return p
}

// call sends a command (to the page once attached) and decodes its
// result into out (if not nil); events meanwhile are dropped.
func (p *cdpPage) call(t *testing.T, method string, params, out any) {
	t.Helper()
	if err := p.cdp.Call(p.session, method, params, out); err != nil {
		t.Fatal(err)
	}
}

// eval evaluates expr in the page, awaiting a promise, and returns its
// value as JSON.
func (p *cdpPage) eval(t *testing.T, expr string) string {
	t.Helper()
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	p.call(t, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &r)
	if r.ExceptionDetails != nil {
		t.Fatalf("%s: %s", expr, r.ExceptionDetails.Text)
	}
	return string(r.Result.Value)
}

// waitEval waits until expr evaluates to want (JSON) in the session's
// page: what names what it reads, for the failure.
func (p *cdpPage) waitEval(t *testing.T, expr, want, what string) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, func() error {
		if got := p.eval(t, expr); got != want {
			return fmt.Errorf("the session's page %s %s, want %s", what, got, want)
		}
		return nil
	})
}

func (p *cdpPage) waitTitle(t *testing.T, want string) {
	t.Helper()
	p.waitEval(t, "document.title", strconv.Quote(want), "title is")
}

// waitScrollY waits until the page is scrolled to y and rests there.
func (p *cdpPage) waitScrollY(t *testing.T, y int) {
	t.Helper()
	p.waitEval(t, "window.scrollY", strconv.Itoa(y), "is scrolled to")
}

// screenshot is the page's own picture, a lossless PNG.
func (p *cdpPage) screenshot(t *testing.T) []byte {
	t.Helper()
	var r struct {
		Data []byte `json:"data"` // base64 in JSON
	}
	p.call(t, "Page.captureScreenshot", map[string]any{"format": "png"}, &r)
	return r.Data
}

// blockDiff is the largest mean absolute difference per channel over the
// 16×16 blocks of a and b (the same size; a different size: 255).
func blockDiff(a, b image.Image) float64 {
	d, _ := blockDiffAt(a, b)
	return d
}

// blockDiffAt is blockDiff and the top left corner of its block.
func blockDiffAt(a, b image.Image) (float64, image.Point) {
	if a.Bounds().Size() != b.Bounds().Size() {
		return 255, image.Point{}
	}
	ra, rb := rgba(a), rgba(b)
	w, h := ra.Rect.Dx(), ra.Rect.Dy()
	worst, at := 0.0, image.Point{}
	for by := 0; by < h; by += 16 {
		for bx := 0; bx < w; bx += 16 {
			sum, n := 0, 0
			for y := by; y < min(by+16, h); y++ {
				for x := bx; x < min(bx+16, w); x++ {
					pa, pb := ra.PixOffset(x, y), rb.PixOffset(x, y)
					for ch := range 3 {
						d := int(ra.Pix[pa+ch]) - int(rb.Pix[pb+ch])
						sum += max(d, -d)
					}
					n += 3
				}
			}
			if d := float64(sum) / float64(n); d > worst {
				worst, at = d, image.Pt(bx, by)
			}
		}
	}
	return worst, at
}

// crop is r of m, at the origin.
func crop(m image.Image, r image.Rectangle) image.Image {
	out := image.NewRGBA(image.Rect(0, 0, r.Dx(), r.Dy()))
	draw.Draw(out, out.Rect, m, m.Bounds().Min.Add(r.Min), draw.Src)
	return out
}

// masked is m with r painted black.
func masked(m image.Image, r image.Rectangle) image.Image {
	out := rgba(m)
	draw.Draw(out, r, image.Black, image.Point{}, draw.Src)
	return out
}

func rgba(m image.Image) *image.RGBA {
	out := image.NewRGBA(image.Rect(0, 0, m.Bounds().Dx(), m.Bounds().Dy()))
	draw.Draw(out, out.Rect, m, m.Bounds().Min, draw.Src)
	return out
}
