package chromium

import (
	"context"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// firstFrame returns the first screencast frame b paints within 30 s.
func firstFrame(t *testing.T, b browser.Browser) browser.Frame {
	t.Helper()
	ctx, cancel := context.WithTimeout(testCtx(t), 30*time.Second)
	defer cancel()
	var got browser.Frame
	_ = b.Screencast(ctx, browser.ScreencastOptions{}, func(f browser.Frame) {
		if got.Data == nil {
			got = f
			cancel()
		}
	})
	if got.Data == nil {
		t.Fatal("no frame")
	}
	return got
}

// TestRestingBrowser: a resting page keeps its state and keeps running
// (a timer fires, unlike in a frozen page), and once woken it paints again
// at its size.
func TestRestingBrowser(t *testing.T) {
	rt := shared(t)
	b := newBrowser(t, rt, browser.Options{URL: testSrv.URL + "/form", Width: 800, Height: 600})
	waitLoaded(t, b)
	before := firstFrame(t, b)
	eval[any](t, b, "window.kept = 'yes'")

	ctx := testCtx(t)
	for range 2 { // the second call changes nothing
		if err := b.SetResting(ctx, true); err != nil {
			t.Fatal(err)
		}
	}
	if got := eval[bool](t, b, "document.hidden"); !got {
		t.Error("a resting page is not hidden")
	}
	if got := eval[string](t, b, "new Promise(r => setTimeout(() => r(window.kept), 50))"); got != "yes" {
		t.Errorf("a timer in a resting page gave %q, want the page's state (yes)", got)
	}

	if err := b.SetResting(ctx, false); err != nil {
		t.Fatal(err)
	}
	if got := eval[bool](t, b, "document.hidden"); got {
		t.Error("a woken page is still hidden")
	}
	after := firstFrame(t, b)
	if after.Width != before.Width || after.Height != before.Height {
		t.Errorf("woken page paints %dx%d, before it rested %dx%d", after.Width, after.Height, before.Width, before.Height)
	}
	if after.Seq <= before.Seq {
		t.Errorf("frame %d after waking, %d before: not a new frame", after.Seq, before.Seq)
	}
}
