package chromium

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/page"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium/cdpinput"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium/window"
)

// maxTouchPoints is what a mobile viewport reports in
// navigator.maxTouchPoints: enough fingers for a pinch and then some, as a
// phone has.
const maxTouchPoints = 5

// screen is the device the page is shown on and touched: what the last
// resize set besides the CSS size (cbrowser.width, height), the window's
// place among Chromium's screens, and the fingers on it. Screencast frames
// carry its pixels, not the CSS ones.
type screen struct {
	b *cbrowser
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

// resize sets the viewport: w×h CSS pixels on a screen of scale device
// pixels per CSS pixel (0 = 1). mobile makes it a phone's: the page's
// <meta name=viewport> applies, scrollbars overlay, and touch is on, so
// the page sees a coarse pointer and touch events, as a phone's page does.
func (s *screen) resize(ctx context.Context, w, h int, scale float64, mobile bool) error {
	b := s.b
	if scale <= 0 {
		scale = 1
	}
	if mobile {
		s.zoomable.Store(true)
	}
	metrics := emulation.SetDeviceMetricsOverrideParams{
		Width: int64(w), Height: int64(h), DeviceScaleFactor: scale, Mobile: mobile,
	}
	b.mu.Lock()
	s.metrics, s.wantScale = metrics, s.screenScale(w, h, scale)
	touched := s.touched || mobile
	s.touched = touched
	b.mu.Unlock()
	// The window first: a move undoes the viewport.
	s.moveToScreen(ctx)
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
func (s *screen) screenScale(w, h int, scale float64) float64 {
	if s.b.rt.scale != 1 {
		return 1
	}
	r := math.Round(scale*4) / 4
	r = min(r, math.Floor(float64(browser.MaxViewport)/float64(max(w, h))*4)/4)
	return max(1, r)
}

// devicePixels is the viewport's size in device pixels, the most a frame
// shows; cbrowser.mu must be held.
func (s *screen) devicePixels() (w, h int) {
	scale := max(1, s.frameScale) // also before the first resize
	return int(math.Round(float64(s.b.width) * scale)), int(math.Round(float64(s.b.height) * scale))
}

// placeWindow moves the page's window to the screen it should be on, if
// it is not there yet, and sets its viewport again.
func (s *screen) placeWindow(ctx context.Context) {
	b := s.b
	if !s.moveToScreen(ctx) {
		return
	}
	b.mu.Lock()
	metrics := s.metrics
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
func (s *screen) moveToScreen(ctx context.Context) (moved bool) {
	b := s.b
	b.mu.Lock()
	want, have := max(1, s.wantScale), max(1, s.frameScale)
	b.mu.Unlock()
	if want == have || b.resting.Load() {
		return false
	}
	added, err := window.MoveToScreen(ctx, b.p.browser, b.t.TargetID, want)
	if added {
		b.log.Debug().Float64("scale", want).Msg("screen added")
	}
	b.mu.Lock()
	if s.wantScale == want {
		if err != nil {
			s.wantScale = have
		} else {
			s.frameScale = want
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

// toPage is what a position on the screen, in the CSS pixels the clients
// see in the frames, is multiplied by for CDP's input commands: those take
// the page's CSS pixels from the visual viewport's corner, which the page
// scale enlarges (a phone's page laid out wider than its screen, or one
// pinch-zoomed).
func (s *screen) toPage(ctx context.Context) float64 {
	if !s.zoomable.Load() {
		return 1 // never a phone nor touched: no lookup
	}
	if k := math.Float64frombits(s.b.screencaster.pageScale.Load()); k > 0 {
		return 1 / k // what the viewers see
	}
	m, err := pageCall(ctx, s.b, page.GetLayoutMetrics, cdp.Empty{})
	if err != nil || m.CSSVisualViewport == nil || !(m.CSSVisualViewport.Scale > 0) {
		return 1
	}
	return 1 / m.CSSVisualViewport.Scale
}

// touch sends one step of a gesture. The client sends the fingers still
// down, as a DOM TouchEvent's touches; Chromium wants those that changed,
// by kind: touchStart presses the points it gets, touchMove moves them,
// touchEnd lifts them, and touchCancel (with no points) cancels them all.
// Its gesture detection makes the rest: a tap clicks, a drag scrolls, a
// pinch zooms.
func (s *screen) touch(ctx context.Context, ev browser.InputEvent) error {
	s.touchMu.Lock()
	defer s.touchMu.Unlock()
	// A pinch zooms desktop pages too.
	s.zoomable.Store(true)
	if s.fingers == nil {
		s.fingers = map[int]browser.TouchPoint{}
	}
	if ev.Phase == browser.TouchCancel {
		// CDP cancels all fingers or none: those still down come back
		// pressed anew with their next move.
		if len(s.fingers) == 0 {
			return nil
		}
		clear(s.fingers)
		return s.dispatchTouch(ctx, input.DispatchTouchEventTypeTouchCancel, nil, ev.Modifiers)
	}
	moved, lifted, pressed := cdpinput.TouchChanges(s.fingers, ev.Touches)
	if len(moved) > 0 {
		err := s.dispatchTouch(ctx, input.DispatchTouchEventTypeTouchMove, moved, ev.Modifiers)
		switch {
		case cdpinput.IsNoTouch(err):
			// Chromium forgot the fingers (its input state goes with a
			// renderer swap): these are new ones to it.
			clear(s.fingers)
			pressed, lifted = append(pressed, moved...), nil
		case err != nil:
			return err
		default:
			for _, t := range moved {
				s.fingers[t.ID] = t
			}
		}
	}
	if len(lifted) > 0 {
		err := s.dispatchTouch(ctx, input.DispatchTouchEventTypeTouchEnd, lifted, ev.Modifiers)
		if err != nil && !cdpinput.IsNoTouch(err) { // none down is what a lift leaves
			return err
		}
		for _, t := range lifted {
			delete(s.fingers, t.ID)
		}
	}
	if len(pressed) > 0 {
		if err := s.dispatchTouch(ctx, input.DispatchTouchEventTypeTouchStart, pressed, ev.Modifiers); err != nil {
			return err
		}
		for _, t := range pressed {
			s.fingers[t.ID] = t
		}
	}
	return nil
}

// dispatchTouch sends one CDP touch event of points, converted from the
// screen's positions to the page's (toPage).
func (s *screen) dispatchTouch(ctx context.Context, typ input.DispatchTouchEventType, points []browser.TouchPoint, mods browser.Modifiers) error {
	_, err := pageCall(ctx, s.b, input.DispatchTouchEvent, cdpinput.Touch(typ, points, s.toPage(ctx), mods))
	return err
}
