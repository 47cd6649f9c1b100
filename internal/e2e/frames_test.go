package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
)

// TestStaticPageSendsNoFrames: a viewer of a page that does not change
// gets its first frames and then none (docs/benchmarks.md, bytes per
// viewer: an idle page costs nothing; typing and scrolling do), also when
// its input has the focus (a steady caret).
func TestStaticPageSendsNoFrames(t *testing.T) {
	c := appsCluster(t)
	u := newUser(t, "http://"+c.public)
	path := lastHop(t, u.open("/typing"))
	conn := dialSocket(t, u, "ws://"+c.public+path+"/ws")
	defer conn.Close()
	// One reader: a read that times out leaves a gorilla connection
	// unusable, so deadlines cannot be the clock here.
	frames := make(chan struct{}, 256)
	go func() {
		defer close(frames)
		for {
			mt, _, err := conn.ReadMessage()
			if err != nil {
				return
			}
			if mt == websocket.BinaryMessage {
				frames <- struct{}{}
			}
		}
	}()
	// frameWithin reports whether a frame arrives within d.
	frameWithin := func(d time.Duration) bool {
		select {
		case _, ok := <-frames:
			if !ok {
				t.Fatal("socket closed")
			}
			return true
		case <-time.After(d):
			return false
		}
	}
	if !frameWithin(30 * time.Second) {
		t.Fatal("no first frame")
	}
	// quiet: the page settles (fonts, first layouts, the click's repaint):
	// a second without frames; then none for 5 s.
	quiet := func(what string) {
		t.Helper()
		settled := false
		for range 30 {
			if !frameWithin(time.Second) {
				settled = true
				break
			}
		}
		if !settled {
			t.Fatalf("%s: frames keep coming: never a second without one in 30 frames", what)
		}
		if frameWithin(5 * time.Second) {
			t.Fatalf("%s: a frame for a page that did not change", what)
		}
	}
	quiet("static page")
	// The input focused: its caret shows but does not blink (a blink
	// was a whole frame, twice a second).
	for _, typ := range []string{"mousedown", "mouseup"} {
		if err := conn.WriteJSON(map[string]any{"t": "input", "type": typ, "x": 100, "y": 60, "button": "left", "buttons": 1, "clickCount": 1}); err != nil {
			t.Fatal(err)
		}
	}
	if !frameWithin(30 * time.Second) {
		t.Fatal("no frame after the click into the input")
	}
	quiet("focused input")
}

// TestUnwatchedBrowserRests: a browser whose viewer left rests (its page
// hidden, worker/engine/rest.go); a viewer who comes back to the Browser URL gets
// a live engine, new frames and the page as it was left, and can go on
// typing.
func TestUnwatchedBrowserRests(t *testing.T) {
	c := appsCluster(t, "--rest-after", "1s")
	base := "http://" + c.public
	metric := func(name string) float64 { return c.workerMetric(t, name) }
	users := userBrowsers(t)

	alice := open(t, users, base+"/typing")
	eventually(t, alice, "alice's engine connects", "document.body.dataset.status", "live")
	eventually(t, alice, "alice sees frames", "Number(document.body.dataset.frames || 0) > 0", "true")
	browserURL := alice.Page().URL
	x0, y0 := canvasOrigin(t, alice)
	click(t, alice, x0+60, y0+60)
	typeText(t, alice, "before")
	eventually(t, alice, "typed text reached the virtual page", "document.title", "typed:before|clicks:0 · CloudBrowser")
	if n := metric("cloudbrowser_browsers_resting"); n != 0 {
		t.Fatalf("%v browsers resting while alice watches", n)
	}

	// Alice leaves the page: a second later the browser rests.
	if err := alice.Navigate(ctxT(t, 10*time.Second), "about:blank"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		if n := metric("cloudbrowser_browsers_resting"); n != 1 {
			return fmt.Errorf("%v browsers resting, want 1", n)
		}
		return nil
	})

	// She comes back: the page wakes for her, as she left it.
	if err := alice.Navigate(ctxT(t, 30*time.Second), browserURL); err != nil {
		t.Fatal(err)
	}
	back := alice
	eventually(t, back, "the engine connects again", "document.body.dataset.status", "live")
	eventually(t, back, "frames after waking", "Number(document.body.dataset.frames || 0) > 0", "true")
	eventually(t, back, "the page as she left it", "document.title", "typed:before|clicks:0 · CloudBrowser")
	// A client joining gets the last frame at once, painted or not: the
	// proof of a page that paints again is frames after that one.
	var seen int
	if err := back.Evaluate(ctxT(t, 10*time.Second), "Number(document.body.dataset.frames || 0)", &seen); err != nil {
		t.Fatal(err)
	}
	x0, y0 = canvasOrigin(t, back)
	click(t, back, x0+300, y0+60)
	typeText(t, back, "+after")
	eventually(t, back, "typing goes on", "document.title", "typed:before+after|clicks:0 · CloudBrowser")
	eventually(t, back, "new frames of the woken page", fmt.Sprintf("Number(document.body.dataset.frames || 0) > %d", seen), "true")
	if n, w := metric("cloudbrowser_browsers_resting"), metric("cloudbrowser_browser_wakes_total"); n != 0 || w < 1 {
		t.Fatalf("after the return: %v resting, %v wakes; want 0 and at least 1", n, w)
	}
}
