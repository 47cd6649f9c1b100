package chromium

import (
	"bytes"
	"fmt"
	"image/png"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// TestRenderScaleConfig: out-of-range scales are refused naming the
// field, and the flag it sets is the runtime's alone.
func TestRenderScaleConfig(t *testing.T) {
	for _, tc := range []struct {
		scale float64
		flags []string
		want  string // "" = accepted
	}{
		{scale: 0},
		{scale: 1},
		{scale: 0.5},
		{scale: 0.25},
		{scale: 0.2, want: "RenderScale"},
		{scale: 1.5, want: "RenderScale"},
		{scale: -1, want: "RenderScale"},
		{scale: math.NaN(), want: "RenderScale"},
		{scale: 0.5, flags: []string{"--force-device-scale-factor=2"}, want: "managed by the runtime"},
	} {
		t.Run(fmt.Sprint(tc.scale, tc.flags), func(t *testing.T) {
			_, err := allocatorOptions("/bin/true", Config{RenderScale: tc.scale, ExtraFlags: tc.flags})
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err %v, want one naming %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestRenderScale: a runtime drawing at half scale sends a 640×480 page
// as 320×240 frames, at rest too (a sharp frame would be a screenshot,
// which upsets the frames around it); the page lays out at its CSS size
// and sees devicePixelRatio 1; input lands where the viewer clicked in CSS
// pixels; a capture is full size.
func TestRenderScale(t *testing.T) {
	testutil.NeedChromium(t)
	rt, err := New(testCtx(t), Config{RenderScale: 0.5, Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	b := newBrowser(t, rt, browser.Options{URL: testSrv.URL + "/form", Width: 640, Height: 480})
	waitLoaded(t, b)
	if got := eval[[]float64](t, b, "[innerWidth, innerHeight, devicePixelRatio]"); fmt.Sprint(got) != "[640 480 1]" {
		t.Fatalf("the page sees [innerWidth innerHeight devicePixelRatio] %v, want [640 480 1]", got)
	}
	// #b is at CSS (10..310, 60..90): a click there focuses it.
	click(t, b, 50, 75)
	testutil.Eventually(t, 30*time.Second, testutil.Cond("focus on #b", func() bool { return eval[string](t, b, "document.activeElement.id") == "b" }))

	settled := recordScreencast(t, b, browser.ScreencastOptions{
		Grade:   func() browser.Grade { return browser.Grade{Scale: 1, Sharpen: true} },
		Sharpen: 300 * time.Millisecond,
	})
	before := settled()
	typeText(t, b, "xyz")
	after := settled()
	typed := after[len(before):]
	if len(typed) == 0 {
		t.Fatal("no frame after typing")
	}
	for _, f := range after {
		if size(f) != "320x240" || f.DeviceWidth != 640 || f.DeviceHeight != 480 {
			t.Fatalf("frame %d: %s for a %vx%v page, want 320x240 for 640x480", f.Seq, size(f), f.DeviceWidth, f.DeviceHeight)
		}
	}
	if v := eval[string](t, b, "document.getElementById('b').value"); v != "xyz" {
		t.Fatalf("#b holds %q, want the typed xyz", v)
	}

	shot, err := b.Capture(testCtx(t), browser.CaptureOptions{Format: browser.CapturePNG})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(shot))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Width != 640 || cfg.Height != 480 {
		t.Fatalf("capture %dx%d, want 640x480", cfg.Width, cfg.Height)
	}
}
