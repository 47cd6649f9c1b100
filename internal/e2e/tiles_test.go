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
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// tileTolerance is the largest mean difference (0..255, over the three
// channels) of any 16×16 block between an engine's composed screen and the
// worker's whole frame, both decoded by the viewer's Chromium. The tiles
// are the frame's own JPEG blocks (worker/tiles), so the difference is
// only the chroma upsampling at a tile's edge, which blends with its
// neighbour in the atlas rather than in the frame. A glyph missing from
// the screen is far above it; the test checks that too.
const tileTolerance = 3

// TestTileUpdatesShowThePage: with --frame-tiles, client engines get the
// changed tiles of each frame, composed on their canvas; after typing,
// scrolling, a resize, and for a viewer who joins late, the engine's
// screen equals the page's whole frame (what an engine without tiles is
// sent: the screencast's picture of the page) within JPEG's tolerance.
func TestTileUpdatesShowThePage(t *testing.T) {
	// Frames not graded for the CPU: a loaded host would otherwise
	// change their size, every change a whole frame, and typing might
	// bring no update to check.
	c := appsCluster(t, "--frame-tiles", "--frame-scale-min", "1")
	base := "http://" + c.public
	users := userBrowsers(t)

	alice := open(t, users, base+"/tiles")
	eventually(t, alice, "alice's engine connects", "document.body.dataset.status", "live")
	ownViewport(t, alice)
	browserPath := strings.TrimPrefix(alice.Page().URL, base)
	if out, err := c.cli(t, "share", browserPath, "*", "reader"); err != nil {
		t.Fatalf("share: %v %s", err, out)
	}
	before := sameScreen(t, c, browserPath, alice, "alice's first frame")

	x0, y0 := canvasOrigin(t, alice)
	click(t, alice, x0+60, y0+60)
	typeText(t, alice, "tiles compose")
	eventually(t, alice, "typed text reached the virtual page", "document.title", "typed:tiles compose · CloudBrowser")
	eventually(t, alice, "typing came as tile updates", "Number(document.body.dataset.tileUpdates || 0) > 0", "true")
	after := sameScreen(t, c, browserPath, alice, "after typing")
	// The comparison sees a change as small as the typed text.
	if d := blockDiff(before.img, after.img); d <= tileTolerance {
		t.Fatalf("the screens before and after typing differ by %.1f, not above the tolerance %d: the comparison is blind", d, tileTolerance)
	}

	input(t, alice, browser.InputEvent{Type: browser.InputWheel, X: x0 + 400, Y: y0 + 400, DeltaY: 500})
	testutil.Eventually(t, 30*time.Second, func() error {
		if s := screenOf(t, alice); s.seq == after.seq {
			return fmt.Errorf("no frame since the scroll")
		}
		return nil
	})
	sameScreen(t, c, browserPath, alice, "after scrolling")

	// Bob joins late, read-only: a keyframe, then updates.
	bob := open(t, users, base+browserPath)
	eventually(t, bob, "bob's engine connects read-only", "document.body.dataset.status", "live (read-only)")
	typeText(t, alice, " and more")
	eventually(t, bob, "bob sees alice's typing", "document.title", "typed:tiles compose and more · CloudBrowser")
	eventually(t, bob, "bob gets tile updates", "Number(document.body.dataset.tileUpdates || 0) > 0", "true")
	sameScreen(t, c, browserPath, bob, "the late joiner")
	sameScreen(t, c, browserPath, alice, "alice beside the late joiner")

	// A resize: a keyframe of the new size, then updates on it.
	input(t, alice, browser.InputEvent{Type: browser.InputResize, Width: 860, Height: 600})
	eventually(t, alice, "the virtual page follows the smaller window", "Number(document.body.dataset.pageWidth || 0) <= 860", "true")
	ownViewport(t, alice)
	var updates int
	if err := alice.Evaluate(ctxT(t, 10*time.Second), "Number(document.body.dataset.tileUpdates || 0)", &updates); err != nil {
		t.Fatal(err)
	}
	// A key's frame comes whole if the viewer's pacing skipped the frame
	// before it (a loaded host): some key of a few brings an update.
	typed := "tiles compose and more"
	for i := 0; ; i++ {
		if i == 10 {
			t.Fatal("no tile update for 10 keys typed after the resize")
		}
		var seq string
		if err := alice.Evaluate(ctxT(t, 10*time.Second), "document.body.dataset.frameSeq", &seq); err != nil {
			t.Fatal(err)
		}
		typeText(t, alice, "!")
		typed += "!"
		eventually(t, alice, "typing after the resize", "document.title", "typed:"+typed+" · CloudBrowser")
		eventually(t, alice, "a frame of the key", "document.body.dataset.frameSeq !== "+strconv.Quote(seq), "true")
		var n int
		if err := alice.Evaluate(ctxT(t, 10*time.Second), "Number(document.body.dataset.tileUpdates || 0)", &n); err != nil {
			t.Fatal(err)
		}
		if n > updates {
			t.Logf("a tile update after %d keys on the new size", i+1)
			break
		}
	}
	s := sameScreen(t, c, browserPath, alice, "after the resize")
	if w := s.img.Bounds().Dx(); w > 870 {
		t.Fatalf("the screen is %d pixels wide after the resize to 860", w)
	}
	sameScreen(t, c, browserPath, bob, "the late joiner after the resize")
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

// wholeFrame is the browser's last frame as an engine without tiles gets
// it on joining: its seq and picture.
func wholeFrame(t *testing.T, c *cluster, browserPath string) (string, []byte, error) {
	t.Helper()
	base := "http://" + c.public
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	ws, _, err := d.Dial("ws://"+c.public+browserPath+"/ws", http.Header{"Origin": {base}})
	if err != nil {
		return "", nil, err
	}
	defer ws.Close()
	ws.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		typ, data, err := ws.ReadMessage()
		if err != nil {
			return "", nil, err
		}
		if typ != websocket.BinaryMessage {
			continue
		}
		n := be.BigEndian.Uint32(data)
		var hdr struct {
			Seq   uint64  `json:"seq"`
			Tiles [][]int `json:"tiles"`
		}
		if err := json.Unmarshal(data[4:4+n], &hdr); err != nil {
			return "", nil, err
		}
		if hdr.Tiles != nil {
			t.Fatal("a tile update to an engine that never asked for tiles")
		}
		if _, err := jpeg.DecodeConfig(bytes.NewReader(data[4+n:])); err != nil {
			return "", nil, err
		}
		return fmt.Sprint(hdr.Seq), data[4+n:], nil
	}
}

// sameScreen waits until b's engine shows the browser's last frame and
// checks its composed screen against that frame, whole.
func sameScreen(t *testing.T, c *cluster, browserPath string, b browser.Browser, what string) screen {
	t.Helper()
	var s screen
	var diff float64
	testutil.Eventually(t, 30*time.Second, func() error {
		seq, data, err := wholeFrame(t, c, browserPath)
		if err != nil {
			return fmt.Errorf("%s: whole frame: %w", what, err)
		}
		s = screenOf(t, b)
		if s.seq != seq {
			return fmt.Errorf("%s: the engine shows frame %s, the worker's last is %s", what, s.seq, seq)
		}
		ref := decodeIn(t, b, data)
		if s.img.Bounds().Size() != ref.Bounds().Size() {
			return fmt.Errorf("%s: the screen is %v, the frame %v", what, s.img.Bounds(), ref.Bounds())
		}
		diff = blockDiff(s.img, ref)
		return nil
	})
	t.Logf("%s: frame %s, largest 16×16 block difference %.2f", what, s.seq, diff)
	if diff > tileTolerance {
		t.Fatalf("%s: the engine's screen differs from the page's frame by %.1f in a 16×16 block (tolerance %d)", what, diff, tileTolerance)
	}
	return s
}

// blockDiff is the largest mean absolute difference per channel over the
// 16×16 blocks of a and b (the same size; a different size: 255).
func blockDiff(a, b image.Image) float64 {
	if a.Bounds().Size() != b.Bounds().Size() {
		return 255
	}
	ra, rb := rgba(a), rgba(b)
	w, h := ra.Rect.Dx(), ra.Rect.Dy()
	worst := 0.0
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
			worst = max(worst, float64(sum)/float64(n))
		}
	}
	return worst
}

func rgba(m image.Image) *image.RGBA {
	out := image.NewRGBA(image.Rect(0, 0, m.Bounds().Dx(), m.Bounds().Dy()))
	draw.Draw(out, out.Rect, m, m.Bounds().Min, draw.Src)
	return out
}
