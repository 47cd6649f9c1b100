package cdpgate

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/remote"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
)

// TestChromedp: the chromedp library drives a browser through the gate:
// a new tab (in the primary context), a navigation, the title.
func TestChromedp(t *testing.T) {
	f := newFixture(t, nil)
	gateURL := "ws" + strings.TrimPrefix(f.srv.URL, "http")
	// NoModifyURL: the gate has no /json/version; it is the browser URL.
	alloc, cancelAlloc := remote.NewAllocator(context.Background(), gateURL, remote.NoModifyURL)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(alloc, chromedp.WithErrorf(t.Logf))
	defer cancel()

	tctx, tcancel := context.WithTimeout(ctx, testutil.Scale(60*time.Second))
	defer tcancel()
	if err := chromedp.Do(tctx, chromedp.Navigate(`data:text/html,<title>through the gate</title><p id=p>hello`)); err != nil {
		t.Fatal(err)
	}
	title, err := chromedp.Run(tctx, chromedp.Title())
	if err != nil || title != "through the gate" {
		t.Fatalf("title %q, %v", title, err)
	}
	text, err := chromedp.Run(tctx, chromedp.Text(chromedp.ID("p")))
	if err != nil || text != "hello" {
		t.Fatalf("text %q, %v", text, err)
	}
	target := string(chromedp.FromContext(ctx).Target.TargetID)
	if got := f.contextOf(target); got != f.primary {
		t.Errorf("chromedp's tab is in %s, want the primary %s", got, f.primary)
	}
	targets, err := chromedp.Targets(tctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range targets {
		if string(ti.BrowserContextID) != f.primary {
			t.Errorf("chromedp sees %+v", ti)
		}
	}

	cancel()
	cancelAlloc()
	r := f.result()
	if r.err != nil || (r.res.Reason != ReasonClientGone && r.res.Reason != ReasonBrowserClose) {
		t.Errorf("session ended with %+v", r)
	}
	t.Logf("session: %+v", r.res)
	f.alive(f.victimT, 7)
}
