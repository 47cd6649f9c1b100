// Package window places the page windows of a Chromium: on a screen of a
// given device pixel ratio, which it adds to that Chromium when none has
// it yet, and minimized or not. It speaks to Chromium through a cdp.Session
// of the browser target.
package window

import (
	"context"
	"fmt"
	"math"
	"sync"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/target"
)

// screensMu keeps two browsers from adding the same screen at once.
var screensMu sync.Mutex

// Of is the window of the page t.
func Of(ctx context.Context, browser cdp.Session, t target.ID) (cdpbrowser.WindowID, error) {
	w, err := cdp.Call(ctx, browser, cdpbrowser.GetWindowForTarget, cdpbrowser.GetWindowForTargetParams{TargetID: t})
	if err != nil {
		return 0, err
	}
	return w.WindowID, nil
}

// SetMinimized minimizes the window or restores it.
func SetMinimized(ctx context.Context, browser cdp.Session, id cdpbrowser.WindowID, minimized bool) error {
	state := cdpbrowser.WindowStateNormal
	if minimized {
		state = cdpbrowser.WindowStateMinimized
	}
	_, err := cdp.Call(ctx, browser, cdpbrowser.SetWindowBounds,
		cdpbrowser.SetWindowBoundsParams{WindowID: id, Bounds: &cdpbrowser.Bounds{WindowState: state}})
	return err
}

// MoveToScreen puts the window of the page t at the corner of the screen
// of device pixel ratio scale; added says that screen was added for it.
func MoveToScreen(ctx context.Context, browser cdp.Session, t target.ID, scale float64) (added bool, err error) {
	w, err := Of(ctx, browser, t)
	if err != nil {
		return false, fmt.Errorf("window: %w", err)
	}
	s, added, err := screenOf(ctx, browser, scale)
	if err != nil {
		return false, err
	}
	_, err = cdp.Call(ctx, browser, cdpbrowser.SetWindowBounds, cdpbrowser.SetWindowBoundsParams{
		WindowID: w, Bounds: &cdpbrowser.Bounds{Left: &s.Left, Top: &s.Top},
	})
	return added, err
}

// screenOf finds the screen of device pixel ratio scale, or adds one: as
// large in CSS pixels as the primary screen (the page's window.screen stays
// the same), right of the others. Screens stay for the process's life;
// there are few (quarter steps up to browser.MaxScale).
func screenOf(ctx context.Context, browser cdp.Session, scale float64) (*emulation.ScreenInfo, bool, error) {
	screensMu.Lock()
	defer screensMu.Unlock()
	got, err := cdp.Call(ctx, browser, emulation.GetScreenInfos, cdp.Empty{})
	if err != nil {
		return nil, false, fmt.Errorf("screens: %w", err)
	}
	var primary *emulation.ScreenInfo
	var right int64
	for _, s := range got.ScreenInfos {
		if s.IsPrimary {
			primary = s
		}
		if scale == 1 && s.IsPrimary || scale != 1 && s.DevicePixelRatio == scale {
			return s, false, nil
		}
		right = max(right, s.Left+s.Width)
	}
	if primary == nil {
		return nil, false, fmt.Errorf("screens: no primary screen among %d", len(got.ScreenInfos))
	}
	added, err := cdp.Call(ctx, browser, emulation.AddScreen, emulation.AddScreenParams{
		Left: right, Top: primary.Top,
		// In device pixels.
		Width:            int64(math.Round(float64(primary.Width) * scale)),
		Height:           int64(math.Round(float64(primary.Height) * scale)),
		DevicePixelRatio: scale,
	})
	if err != nil {
		return nil, false, fmt.Errorf("add a screen at %v: %w", scale, err)
	}
	return added.ScreenInfo, true, nil
}
