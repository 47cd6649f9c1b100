package chromium

import (
	"context"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium/sitedata"
)

// Reset makes a browser a job used as blank as a new one, for the general
// pool to lend to the next job (docs/jobs.md, "Browser reuse"): what sites
// left (sitedata.Reset), the navigation policy, the viewport. On an error
// the browser is not known to be blank: the caller must close it.
func (b *cbrowser) Reset(ctx context.Context) error {
	cctx, cancel, err := b.call(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	b.mu.Lock()
	custom := len(b.bindings) > 0 || b.installed != ""
	b.mu.Unlock()
	if custom || b.origins.Credentials() {
		return sitedata.ErrNotResettable
	}
	tab := sitedata.Tab{Page: b.t, Browser: b.bc, Target: b.t.TargetID, Context: b.contextID, Navigate: b.navigate, Retry: retrySwap}
	if err = sitedata.Reset(cctx, tab, &b.origins); err == nil {
		if f := b.filter.Swap(nil); f != nil {
			f.Close()
		}
		err = b.resize(cctx, browser.DefaultWidth, browser.DefaultHeight, 0, false)
	}
	if err != nil {
		return b.fail("reset", err)
	}
	return nil
}
