package e2e

import (
	"testing"
	"time"
)

// TestRenderScale: a worker started with --render-scale 0.5 sends every
// frame at half the page's size, while the page changes and at rest (no
// sharp frame: docs/chromium.md), and nothing once it rests; a real user's
// click through the client engine lands on the button the user sees.
func TestRenderScale(t *testing.T) {
	c := appsCluster(t, "--render-scale", "0.5", "--frame-sharpen", "300ms")
	// The admin API (and with it the dashboard) says how the worker draws.
	if w := c.mustStatus().Workers[0]; w.RenderScale != 0.5 {
		t.Fatalf("the cluster status shows render scale %v for %s, want 0.5", w.RenderScale, w.ID)
	}
	u := newUser(t, "http://"+c.public)
	path := lastHop(t, u.open("/typing"))
	fs := watchFrames(t, dialSocket(t, u, "ws://"+c.public+path+"/ws"))
	first, ok := fs.next(30 * time.Second)
	if !ok {
		t.Fatal("no first frame")
	}
	frames := []frameHeader{first}
	// half: every frame so far is half the page's size, the page's size
	// unchanged (the socket sends no resize).
	half := func(what string) {
		t.Helper()
		for _, f := range frames {
			if f.W == 0 || f.W*2 > int(f.DW)+1 || f.H*2 > int(f.DH)+1 || f.DW != first.DW || f.DH != first.DH {
				t.Fatalf("%s: frame %d is %dx%d for a %vx%v page, want half of %vx%v", what, f.Seq, f.W, f.H, f.DW, f.DH, first.DW, first.DH)
			}
		}
	}
	settle := func(what string) {
		t.Helper()
		for range 100 {
			f, ok := fs.next(time.Second)
			if !ok {
				half(what)
				return
			}
			frames = append(frames, f)
		}
		t.Fatalf("%s: frames keep coming", what)
	}
	settle("first frames")
	fs.input(map[string]any{"type": "mousedown", "x": 100, "y": 60, "button": "left", "buttons": 1, "clickCount": 1})
	fs.input(map[string]any{"type": "mouseup", "x": 100, "y": 60, "button": "left", "clickCount": 1})
	settle("focus")
	n := len(frames)
	for _, key := range []string{"a", "b", "c", "d", "e"} {
		fs.input(map[string]any{"type": "keydown", "key": key})
		fs.input(map[string]any{"type": "keyup", "key": key})
		time.Sleep(100 * time.Millisecond)
	}
	settle("typing and the page at rest")
	if len(frames) == n {
		t.Fatal("no frame after 5 keys")
	}
	if f, ok := fs.next(3 * time.Second); ok {
		t.Fatalf("a frame (%dx%d) for a page at rest", f.W, f.H)
	}

	// A real user: the canvas shows the page at its size, so the button is
	// where the page has it, 20+60 by 120+20.
	users := userBrowsers(t)
	alice := open(t, users, "http://"+c.public+"/typing")
	eventually(t, alice, "the engine connects", "document.body.dataset.status", "live")
	eventually(t, alice, "frames", "Number(document.body.dataset.frames || 0) > 0", "true")
	// The engine resizes the page to its window: until a frame of the
	// resized page comes, the canvas shows the page scaled to fit and the
	// button is not yet where it will be. At render scale 0.5 the page's
	// size rounds to even CSS pixels (a 999-pixel window: a 1000-pixel page).
	// (On a miss it says the two widths and the frames drawn and received.)
	eventually(t, alice, "a frame of the page at the window's size",
		"(function (b, c) { var pw = Number(b.dataset.pageWidth), cw = c.clientWidth;"+
			" return Math.abs(pw - cw) <= 2 ? 'true' : 'page ' + pw + ', canvas ' + cw + ', frames ' + b.dataset.frames + ' drawn of ' + b.dataset.framesReceived;"+
			" })(document.body, document.querySelector('canvas'))", "true")
	// How often the worker had to restart a screencast for a resized page
	// (Chromium lost the frame of the new size; docs/chromium.md).
	t.Logf("screencast restarts after a resize: %v", c.workerMetric(t, "cloudbrowser_screencast_resize_restarts_total"))
	x0, y0 := canvasOrigin(t, alice)
	click(t, alice, x0+80, y0+140)
	eventually(t, alice, "the click reached the button", "document.title.includes('|clicks:1')", "true")
}
