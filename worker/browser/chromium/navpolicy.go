package chromium

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium/policy"
)

// navPolicy applies the browser's navigation policy (Options.Allow,
// SetPolicy) through its Chromium's request filter hub (package policy).
type navPolicy struct {
	b *cbrowser
	// filter is nil without a policy. It is set during setup, which may
	// race with a release by the supervisor.
	filter atomic.Pointer[policy.Filter]
}

// newFilter registers allow with the hub of the browser's Chromium and
// waits until the page's requests are intercepted. The page must exist and
// must not have loaded anything yet.
func (n *navPolicy) newFilter(ctx context.Context, allow func(string) bool) (*policy.Filter, error) {
	b, r := n.b, n.b.rt
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, browser.ErrClosed
	}
	r.wg.Add(1) // for the filter's loop
	r.mu.Unlock()
	return b.p.filters.NewFilter(ctx, policy.Browser{
		Target:  b.t.TargetID,
		Context: b.contextID,
		Allow:   allow,
		Log:     b.log,
		OnBlock: func() { r.blocked.Add(1) },
		Go: func(loop func()) {
			go func() {
				defer r.wg.Done()
				loop()
			}()
		},
	})
}

// SetPolicy implements browser.Browser.
func (n *navPolicy) SetPolicy(ctx context.Context, allow func(string) bool) error {
	if allow == nil {
		return nil
	}
	if n.filter.Load() != nil {
		return errors.New("chromium: a navigation policy is already set")
	}
	f, err := n.newFilter(ctx, allow)
	if err != nil {
		return fmt.Errorf("chromium: set policy: %w", err)
	}
	if !n.filter.CompareAndSwap(nil, f) {
		f.Close()
		return errors.New("chromium: a navigation policy is already set")
	}
	if n.b.released.Load() {
		f.Close()
	}
	return nil
}

// Blocked implements browser.Browser.
func (n *navPolicy) Blocked() uint64 {
	if f := n.filter.Load(); f != nil {
		return f.Blocked()
	}
	return 0
}
