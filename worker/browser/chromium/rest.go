package chromium

import (
	"context"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
)

// Resting browsers (browser.Browser.SetResting). A page in a minimized
// window is hidden: Chromium stops painting it and frees its compositor
// tiles and GPU buffers, while its scripts run as a background tab's (timers
// at most once a second). Measured with 10 idle browsers: private memory
// ~20 -> ~12 MiB each (docs/chromium.md, "Resting browsers"). Freezing the
// page (Page.setWebLifecycleState) saves about the same but stops its
// timers, so an app awaiting one would hang until a viewer came back: not
// used.

// SetResting implements browser.Browser.
func (b *cbrowser) SetResting(ctx context.Context, resting bool) error {
	b.restMu.Lock()
	defer b.restMu.Unlock()
	if b.resting.Load() == resting {
		return nil
	}
	cctx, cancel, err := b.call(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if b.window == 0 {
		w, err := cdp.Call(cctx, b.p.browser, cdpbrowser.GetWindowForTarget, cdpbrowser.GetWindowForTargetParams{TargetID: b.t.TargetID})
		if err != nil {
			return b.fail("rest: window", err)
		}
		b.window = w.WindowID
	}
	state := cdpbrowser.WindowStateNormal
	if resting {
		state = cdpbrowser.WindowStateMinimized
	}
	if _, err := cdp.Call(cctx, b.p.browser, cdpbrowser.SetWindowBounds,
		cdpbrowser.SetWindowBoundsParams{WindowID: b.window, Bounds: &cdpbrowser.Bounds{WindowState: state}}); err != nil {
		return b.fail("rest", err)
	}
	b.resting.Store(resting)
	return nil
}
