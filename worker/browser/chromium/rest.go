package chromium

import (
	"context"
	"sync"
	"sync/atomic"

	cdpbrowser "github.com/chromedp/cdproto/browser"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium/window"
)

// Resting browsers (browser.Browser.SetResting). A page in a minimized
// window is hidden: Chromium stops painting it and frees its compositor
// tiles and GPU buffers, while its scripts run as a background tab's (timers
// at most once a second). Measured with 10 idle browsers: private memory
// ~20 -> ~12 MiB each (docs/chromium.md, "Resting browsers"). Freezing the
// page (Page.setWebLifecycleState) saves about the same but stops its
// timers, so an app awaiting one would hang until a viewer came back: not
// used.

// rester hides the page while nobody watches it.
type rester struct {
	b *cbrowser
	// restMu serializes SetResting; resting is its state (read without
	// the lock by a screencast, which expects no frames of a hidden page)
	// and window the page's window (0 until first needed).
	restMu  sync.Mutex
	resting atomic.Bool
	window  cdpbrowser.WindowID
}

// SetResting implements browser.Browser.
func (r *rester) SetResting(ctx context.Context, resting bool) error {
	b := r.b
	r.restMu.Lock()
	defer r.restMu.Unlock()
	if r.resting.Load() == resting {
		return nil
	}
	cctx, cancel, err := b.call(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if r.window == 0 {
		if r.window, err = window.Of(cctx, b.p.browser, b.t.TargetID); err != nil {
			return b.fail("rest: window", err)
		}
	}
	if err := window.SetMinimized(cctx, b.p.browser, r.window, resting); err != nil {
		return b.fail("rest", err)
	}
	r.resting.Store(resting)
	return nil
}
