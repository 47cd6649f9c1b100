package chromium

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// TestScreencastFollowsResize: a viewer sees the page at its new size
// after a resize, even when the frame Chromium takes of it is lost (its
// capturer drops one on a size change and, on a loaded machine, may send
// no other for a page at rest), and a viewport grown past the size the
// screencast started with comes at full size, not scaled down to it.
func TestScreencastFollowsResize(t *testing.T) {
	b := newBrowser(t, shared(t), browser.Options{URL: testSrv.URL + "/form", Width: 800, Height: 600})
	waitLoaded(t, b)
	// lose: the first frame of this size is lost, as Chromium may lose it.
	var lose atomic.Pointer[string]
	var lost atomic.Int32
	b.(*cbrowser).loseFrame = func(f browser.Frame) bool {
		if p := lose.Load(); p != nil && *p == fmt.Sprintf("%vx%v", f.DeviceWidth, f.DeviceHeight) && lose.CompareAndSwap(p, nil) {
			lost.Add(1)
			return true
		}
		return false
	}
	rt := b.(*cbrowser).rt
	restarts := rt.resizeRestarts.Load()
	settled := recordScreencast(t, b, browser.ScreencastOptions{})
	settled()

	for _, c := range []struct {
		w, h int
		lose bool
	}{
		{640, 480, true},   // smaller, its frame lost
		{1000, 700, false}, // larger than the screencast's start
		{1200, 900, true},  // larger, its frame lost
	} {
		want := fmt.Sprintf("%dx%d", c.w, c.h)
		if c.lose {
			lose.Store(&want)
		}
		if err := b.Input(testCtx(t), browser.InputEvent{Type: browser.InputResize, Width: c.w, Height: c.h}); err != nil {
			t.Fatal(err)
		}
		fs := settled()
		f := fs[len(fs)-1]
		if got := fmt.Sprintf("%vx%v", f.DeviceWidth, f.DeviceHeight); got != want || size(f) != want {
			t.Fatalf("after a resize to %s the last frame is %s for a %s page, want %s for %s", want, size(f), got, want, want)
		}
	}
	if n := lost.Load(); n != 2 {
		t.Fatalf("%d frames lost, want 2: the test lost nothing it covers", n)
	}
	// The worker's metric counts the restarts that made up for them. At
	// least one: a frame the page paints anyway within the follow-up's
	// wait (a loaded machine's order of events) makes a restart needless.
	st, err := rt.Stats(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if n := st.ResizeRestarts - restarts; n < 1 {
		t.Fatalf("Stats.ResizeRestarts grew by %d, want the restarts that made up for the lost frames counted", n)
	}
}

func TestResizeWantShows(t *testing.T) {
	want := resizeWant{w: 1000, h: 700}
	for _, tc := range []struct {
		name     string
		f        browser.Frame
		expected bool
	}{
		{"full size", browser.Frame{Width: 1000, Height: 700, DeviceWidth: 1000, DeviceHeight: 700}, true},
		{"scaled by the grade", browser.Frame{Width: 500, Height: 350, DeviceWidth: 1000, DeviceHeight: 700}, true},
		{"scaled with rounding", browser.Frame{Width: 571, Height: 400, DeviceWidth: 1000, DeviceHeight: 700}, true},
		{"render scale rounding", browser.Frame{Width: 500, Height: 350, DeviceWidth: 1001, DeviceHeight: 700}, true},
		{"the old size", browser.Frame{Width: 800, Height: 600, DeviceWidth: 800, DeviceHeight: 600}, false},
		{"new metadata, old picture", browser.Frame{Width: 933, Height: 700, DeviceWidth: 1000, DeviceHeight: 700}, false},
	} {
		if got := want.shows(tc.f); got != tc.expected {
			t.Errorf("%s: shows = %v, want %v", tc.name, got, tc.expected)
		}
	}
}
