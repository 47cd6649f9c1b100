package chromium

import (
	"bytes"
	"fmt"
	"image/png"
	"math"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// mediaPage has a mobile viewport: on a phone it lays out at the phone's
// width.
var mediaPage = "data:text/html," + url.PathEscape(`<!doctype html><meta name=viewport content="width=device-width"><title>media</title><p>page`)

// device is what a page sees of its device.
type device struct {
	Coarse, Fine, Hover bool
	Touch               bool // 'ontouchstart' in window
	MaxTouchPoints      int
	InnerWidth          int
	DPR                 float64
}

const deviceExpr = `({
  coarse: matchMedia("(pointer: coarse)").matches, fine: matchMedia("(pointer: fine)").matches,
  hover: matchMedia("(hover: hover)").matches, touch: "ontouchstart" in window,
  maxTouchPoints: navigator.maxTouchPoints, innerWidth: innerWidth, dpr: devicePixelRatio})`

func (d device) String() string {
	return fmt.Sprintf("coarse %v fine %v hover %v touch %v maxTouchPoints %d innerWidth %d dpr %v",
		d.Coarse, d.Fine, d.Hover, d.Touch, d.MaxTouchPoints, d.InnerWidth, d.DPR)
}

// TestPhoneViewport: a phone's resize gives the page a phone: a coarse
// pointer without hover, touch, its mobile layout at the phone's CSS width
// and its pixel ratio; a desktop resize after it gives the desktop back,
// as a new browser has it (headless Chromium has no pointing device:
// neither a fine nor a coarse pointer, no hover). Feature tests of touch
// ('ontouchstart' in window) are decided when a document is created: they
// change with the next one.
func TestPhoneViewport(t *testing.T) {
	b := newBrowser(t, shared(t), browser.Options{URL: mediaPage})
	waitLoaded(t, b)
	ctx := testCtx(t)
	resize := func(w, h int, scale float64, mobile bool) {
		t.Helper()
		if err := b.Input(ctx, browser.InputEvent{Type: browser.InputResize, Width: w, Height: h, Scale: scale, Mobile: mobile}); err != nil {
			t.Fatal(err)
		}
	}
	reload := func() {
		t.Helper()
		if err := b.Input(ctx, browser.InputEvent{Type: browser.InputReload}); err != nil {
			t.Fatal(err)
		}
		waitLoaded(t, b)
	}
	desktop := eval[device](t, b, deviceExpr)
	if desktop.Coarse || desktop.Touch || desktop.MaxTouchPoints != 0 || desktop.InnerWidth != 1280 || desktop.DPR != 1 {
		t.Fatalf("a new browser's page sees %v, want a desktop's", desktop)
	}

	resize(390, 844, 3, true)
	phone := device{Coarse: true, MaxTouchPoints: maxTouchPoints, InnerWidth: 390, DPR: 3}
	if got := eval[device](t, b, deviceExpr); got != phone {
		t.Fatalf("after a phone's resize the page sees %v, want %v", got, phone)
	}
	reload()
	phone.Touch = true
	if got := eval[device](t, b, deviceExpr); got != phone {
		t.Fatalf("reloaded on a phone the page sees %v, want %v", got, phone)
	}

	resize(1280, 800, 0, false)
	reload()
	if got := eval[device](t, b, deviceExpr); got != desktop {
		t.Fatalf("after a desktop resize the page sees %v, want %v", got, desktop)
	}
}

// TestHiDPIFrames: at device pixel ratio 2 the screencast's frames carry
// the device's pixels, twice the CSS size their header keeps; the grading
// scales those, a page at rest is sharpened to them, a click lands where
// the viewer points, and ratio 1 gives CSS-sized frames again. A capture
// has the device's pixels too.
func TestHiDPIFrames(t *testing.T) {
	b := focusedForm(t, 640, 480)
	ctx := testCtx(t)
	var grade atomic.Uint64
	grade.Store(math.Float64bits(1))
	refresh := make(chan struct{}, 1)
	settled := recordScreencast(t, b, browser.ScreencastOptions{
		Grade:   func() browser.Grade { return browser.Grade{Scale: math.Float64frombits(grade.Load()), Sharpen: true} },
		Refresh: refresh,
		Sharpen: 300 * time.Millisecond,
	})
	last := func() browser.Frame {
		t.Helper()
		fs := settled()
		return fs[len(fs)-1]
	}
	want := func(f browser.Frame, px string) {
		t.Helper()
		if size(f) != px || f.DeviceWidth != 640 || f.DeviceHeight != 480 {
			t.Fatalf("frame %s for a %vx%v page, want %s for 640x480", size(f), f.DeviceWidth, f.DeviceHeight, px)
		}
	}
	want(last(), "640x480")

	if err := b.Input(ctx, browser.InputEvent{Type: browser.InputResize, Width: 640, Height: 480, Scale: 2}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		if f := last(); size(f) != "1280x960" {
			return fmt.Errorf("last frame %s after a resize to ratio 2, want 1280x960", size(f))
		}
		return nil
	})
	if dpr := eval[float64](t, b, "devicePixelRatio"); dpr != 2 {
		t.Fatalf("devicePixelRatio %v, want 2", dpr)
	}
	typeText(t, b, "x")
	want(last(), "1280x960")

	// #b is at CSS (10..310, 60..90).
	click(t, b, 50, 75)
	testutil.Eventually(t, 30*time.Second, testutil.Cond("focus on #b", func() bool { return eval[string](t, b, "document.activeElement.id") == "b" }))

	// Graded to half: frames of 640x480 pixels while typing, then a sharp
	// one of the device's pixels.
	grade.Store(math.Float64bits(0.5))
	refresh <- struct{}{}
	before := len(settled())
	typeText(t, b, "yz")
	fs := settled()
	typed := fs[before:]
	if len(typed) < 2 {
		t.Fatalf("%d frames after typing, want the typed ones and a sharp one", len(typed))
	}
	for _, f := range typed[:len(typed)-1] {
		want(f, "640x480")
	}
	want(typed[len(typed)-1], "1280x960")
	if v := eval[string](t, b, "document.getElementById('b').value"); v != "yz" {
		t.Fatalf("#b holds %q, want the typed yz", v)
	}

	shot, err := b.Capture(ctx, browser.CaptureOptions{Format: browser.CapturePNG})
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err := png.DecodeConfig(bytes.NewReader(shot)); err != nil || cfg.Width != 1280 || cfg.Height != 960 {
		t.Fatalf("capture %dx%d (%v), want 1280x960", cfg.Width, cfg.Height, err)
	}

	grade.Store(math.Float64bits(1))
	refresh <- struct{}{}
	if err := b.Input(ctx, browser.InputEvent{Type: browser.InputResize, Width: 640, Height: 480, Scale: 1}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		if f := last(); size(f) != "640x480" {
			return fmt.Errorf("last frame %s after a resize to ratio 1, want 640x480", size(f))
		}
		return nil
	})
	if dpr := eval[float64](t, b, "devicePixelRatio"); dpr != 1 {
		t.Fatalf("devicePixelRatio %v, want 1", dpr)
	}
}

// TestHiDPIWhileResting: a resting page's window cannot move to its
// screen; it does when the page is shown again, and its frames then carry
// the device's pixels.
func TestHiDPIWhileResting(t *testing.T) {
	b := newBrowser(t, shared(t), browser.Options{URL: mediaPage, Width: 400, Height: 300})
	waitLoaded(t, b)
	ctx := testCtx(t)
	if err := b.SetResting(ctx, true); err != nil {
		t.Fatal(err)
	}
	if err := b.Input(ctx, browser.InputEvent{Type: browser.InputResize, Width: 400, Height: 300, Scale: 3}); err != nil {
		t.Fatal(err)
	}
	if err := b.SetResting(ctx, false); err != nil {
		t.Fatal(err)
	}
	settled := recordScreencast(t, b, browser.ScreencastOptions{})
	testutil.Eventually(t, 30*time.Second, func() error {
		fs := settled()
		if f := fs[len(fs)-1]; size(f) != "1200x900" || f.DeviceWidth != 400 {
			return fmt.Errorf("last frame %s for %vx%v, want 1200x900 for 400x300", size(f), f.DeviceWidth, f.DeviceHeight)
		}
		return nil
	})
}

// TestResizeWantShowsHiDPI: a frame of the device's pixels shows the
// resize of its CSS size.
func TestResizeWantShowsHiDPI(t *testing.T) {
	want := resizeWant{w: 390, h: 844}
	for _, f := range []browser.Frame{
		{Width: 780, Height: 1688, DeviceWidth: 390, DeviceHeight: 844},
		{Width: 1170, Height: 2532, DeviceWidth: 390, DeviceHeight: 844},
	} {
		if !want.shows(f) {
			t.Errorf("%s for %vx%v does not show a 390x844 resize", size(f), f.DeviceWidth, f.DeviceHeight)
		}
	}
}
