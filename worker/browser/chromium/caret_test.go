package chromium

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// focusedForm is a width×height browser on the /form page with its
// first input focused.
func focusedForm(t *testing.T, width, height int) browser.Browser {
	t.Helper()
	b := newBrowser(t, shared(t), browser.Options{URL: testSrv.URL + "/form", Width: width, Height: height})
	waitLoaded(t, b)
	click(t, b, 50, 25) // focus #a
	testutil.Eventually(t, 30*time.Second, testutil.Cond("focus", func() bool { return eval[string](t, b, "document.activeElement.id") == "a" }))
	return b
}

// TestFocusedInputSendsNoFrames: a page whose only change is its focused
// input's caret paints nothing more once settled (the caret does not
// blink: each blink was a whole frame, twice a second), and the caret is
// still there: typing paints.
func TestFocusedInputSendsNoFrames(t *testing.T) {
	b := focusedForm(t, 800, 600)

	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	var frames atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = b.Screencast(ctx, browser.ScreencastOptions{}, func(browser.Frame) { frames.Add(1) })
	}()
	defer func() { cancel(); <-done }()
	// Settle: the first frames, then a quiet 1.5 s (a blinking caret
	// paints every 0.5 s).
	testutil.Eventually(t, 30*time.Second, func() error {
		n := frames.Load()
		time.Sleep(1500 * time.Millisecond)
		if n == 0 || frames.Load() != n {
			return errors.New("frames still coming")
		}
		return nil
	})
	n := frames.Load()
	time.Sleep(3 * time.Second)
	if got := frames.Load() - n; got != 0 {
		t.Fatalf("%d frames in 3 s for a page whose input only has the focus (a blinking caret?)", got)
	}
	if got := eval[string](t, b, "getComputedStyle(document.activeElement).caretAnimation"); got != "manual" {
		t.Errorf("caret-animation %q, want manual", got)
	}
	typeText(t, b, "x")
	testutil.Eventually(t, 30*time.Second, testutil.Cond("a frame after typing", func() bool { return frames.Load() > n }))
}
