package chromium

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// maxTouchPoints is what a mobile viewport reports in
// navigator.maxTouchPoints: enough fingers for a pinch and then some, as a
// phone has.
const maxTouchPoints = 5

// screen is the device the page is shown on and touched: what the last
// resize set besides the CSS size (cbrowser.width, height) and the fingers
// on it. The screencaster holds it, as its frames are the screen's pixels.
type screen struct {
	// wantScale is the device pixel ratio the frames should have and
	// frameScale the one they have: that of the (headless) screen the
	// page's window is on (0 = 1). They differ while the window could not
	// move yet (placeWindow). cbrowser.mu guards both.
	wantScale, frameScale float64
	// metrics is the last viewport set, for a window that moves: Chromium
	// sizes the page anew for its new screen. cbrowser.mu guards it.
	metrics emulation.SetDeviceMetricsOverrideParams
	// touched: touch emulation was asked for; until then it is off and
	// a desktop resize need not turn it off. cbrowser.mu guards it.
	touched bool
	// zoomable: the page may be shown at a page scale other than 1 (a
	// phone's page laid out wider than the screen, or pinch-zoomed), so
	// pointer positions need converting (toPage).
	zoomable atomic.Bool
	// fingers are the touch points down as Chromium was told, by id, at
	// the positions the client sent; touchMu guards them and keeps each
	// touch event's CDP calls together.
	touchMu sync.Mutex
	fingers map[int]browser.TouchPoint
}

// screensMu keeps two browsers from adding the same screen at once.
var screensMu sync.Mutex

// resize sets the viewport: w×h CSS pixels on a screen of scale device
// pixels per CSS pixel (0 = 1). mobile makes it a phone's: the page's
// <meta name=viewport> applies, scrollbars overlay, and touch is on, so
// the page sees a coarse pointer and touch events, as a phone's page does.
func (b *cbrowser) resize(ctx context.Context, w, h int, scale float64, mobile bool) error {
	if scale <= 0 {
		scale = 1
	}
	if mobile {
		b.zoomable.Store(true)
	}
	metrics := emulation.SetDeviceMetricsOverrideParams{
		Width: int64(w), Height: int64(h), DeviceScaleFactor: scale, Mobile: mobile,
	}
	b.mu.Lock()
	b.metrics, b.wantScale = metrics, b.screenScale(w, h, scale)
	touched := b.touched || mobile
	b.touched = touched
	b.mu.Unlock()
	// The window first: a move undoes the viewport.
	b.moveToScreen(ctx)
	if _, err := pageCall(ctx, b, emulation.SetDeviceMetricsOverride, metrics); err != nil {
		return fmt.Errorf("viewport %dx%d at %v: %w", w, h, scale, err)
	}
	// Touch follows the viewport both ways: a desktop page that finds
	// touch support may lay itself out for fingers. Most browsers are
	// never phones and pay no call for it.
	if touched {
		_, err := pageCall(ctx, b, emulation.SetTouchEmulationEnabled, emulation.SetTouchEmulationEnabledParams{
			Enabled: mobile, MaxTouchPoints: maxTouchPoints,
		})
		if err != nil {
			return fmt.Errorf("touch emulation %v: %w", mobile, err)
		}
	}
	b.mu.Lock()
	b.width, b.height = w, h
	b.mu.Unlock()
	select {
	case b.resized <- struct{}{}:
	default:
	}
	return nil
}

// screenScale is the device pixel ratio of the screen a w×h viewport of
// scale is shown on. The emulated one alone changes what the page sees
// (devicePixelRatio, media queries, the images it picks) but Chromium
// draws the page at its window's screen's, so frames would have CSS
// pixels. Screens come in quarter steps, as most devices' ratios do (the
// page sees its own exactly), and frames at most MaxViewport pixels a
// side. Under a render scale every screen has that one: no moves.
func (b *cbrowser) screenScale(w, h int, scale float64) float64 {
	if b.rt.scale != 1 {
		return 1
	}
	s := math.Round(scale*4) / 4
	s = min(s, math.Floor(float64(browser.MaxViewport)/float64(max(w, h))*4)/4)
	return max(1, s)
}

// placeWindow moves the page's window to the screen it should be on, if
// it is not there yet, and sets its viewport again.
func (b *cbrowser) placeWindow(ctx context.Context) {
	if !b.moveToScreen(ctx) {
		return
	}
	b.mu.Lock()
	metrics := b.metrics
	b.mu.Unlock()
	if _, err := pageCall(ctx, b, emulation.SetDeviceMetricsOverride, metrics); err != nil {
		b.log.Debug().Err(err).Msg("viewport after a move")
	}
}

// moveToScreen moves the page's window to a screen of device pixel ratio
// wantScale (added to its Chromium when none has it yet), so frames carry
// that many pixels per CSS pixel. The move undoes the viewport: the caller
// sets it again. A minimized window cannot move: a resting page moves
// when its screencast starts or it paints again (screencast.go). It is
// best effort: without a move the frames have fewer pixels, nothing else
// changes, and no retry comes before the next resize.
func (b *cbrowser) moveToScreen(ctx context.Context) (moved bool) {
	b.mu.Lock()
	want, have := max(1, b.wantScale), max(1, b.frameScale)
	b.mu.Unlock()
	if want == have || b.resting.Load() {
		return false
	}
	err := b.moveWindow(ctx, want)
	b.mu.Lock()
	if b.wantScale == want {
		if err != nil {
			b.wantScale = have
		} else {
			b.frameScale = want
		}
	}
	b.mu.Unlock()
	if err != nil {
		b.log.Debug().Err(err).Float64("scale", want).Msg("page window not moved: frames keep their scale")
		return false
	}
	select {
	case b.resized <- struct{}{}: // a screencast sizes its frames anew
	default:
	}
	return true
}

// moveWindow puts the page's window at the corner of the screen of scale.
func (b *cbrowser) moveWindow(ctx context.Context, scale float64) error {
	w, err := cdp.Call(ctx, b.p.browser, cdpbrowser.GetWindowForTarget, cdpbrowser.GetWindowForTargetParams{TargetID: b.t.TargetID})
	if err != nil {
		return fmt.Errorf("window: %w", err)
	}
	s, err := b.screenOf(ctx, scale)
	if err != nil {
		return err
	}
	_, err = cdp.Call(ctx, b.p.browser, cdpbrowser.SetWindowBounds, cdpbrowser.SetWindowBoundsParams{
		WindowID: w.WindowID, Bounds: &cdpbrowser.Bounds{Left: &s.Left, Top: &s.Top},
	})
	return err
}

// screenOf finds the screen of device pixel ratio scale on the browser's
// Chromium, or adds one: as large in CSS pixels as the primary screen (the
// page's window.screen stays the same), right of the others. Screens stay
// for the process's life; there are few (quarter steps up to MaxScale).
func (b *cbrowser) screenOf(ctx context.Context, scale float64) (*emulation.ScreenInfo, error) {
	screensMu.Lock()
	defer screensMu.Unlock()
	got, err := cdp.Call(ctx, b.p.browser, emulation.GetScreenInfos, cdp.Empty{})
	if err != nil {
		return nil, fmt.Errorf("screens: %w", err)
	}
	var primary *emulation.ScreenInfo
	var right int64
	for _, s := range got.ScreenInfos {
		if s.IsPrimary {
			primary = s
		}
		if scale == 1 && s.IsPrimary || scale != 1 && s.DevicePixelRatio == scale {
			return s, nil
		}
		right = max(right, s.Left+s.Width)
	}
	if primary == nil {
		return nil, fmt.Errorf("screens: no primary screen among %d", len(got.ScreenInfos))
	}
	added, err := cdp.Call(ctx, b.p.browser, emulation.AddScreen, emulation.AddScreenParams{
		Left: right, Top: primary.Top,
		// In device pixels.
		Width:            int64(math.Round(float64(primary.Width) * scale)),
		Height:           int64(math.Round(float64(primary.Height) * scale)),
		DevicePixelRatio: scale,
	})
	if err != nil {
		return nil, fmt.Errorf("add a screen at %v: %w", scale, err)
	}
	b.log.Debug().Float64("scale", scale).Msg("screen added")
	return added.ScreenInfo, nil
}

// toPage is what a position on the screen, in the CSS pixels the clients
// see in the frames, is multiplied by for CDP's input commands: those take
// the page's CSS pixels from the visual viewport's corner, which the page
// scale enlarges (a phone's page laid out wider than its screen, or one
// pinch-zoomed).
func (b *cbrowser) toPage(ctx context.Context) float64 {
	if !b.zoomable.Load() {
		return 1 // never a phone nor touched: no lookup
	}
	if s := math.Float64frombits(b.screencaster.pageScale.Load()); s > 0 {
		return 1 / s // what the viewers see
	}
	m, err := pageCall(ctx, b, page.GetLayoutMetrics, cdp.Empty{})
	if err != nil || m.CSSVisualViewport == nil || !(m.CSSVisualViewport.Scale > 0) {
		return 1
	}
	return 1 / m.CSSVisualViewport.Scale
}
