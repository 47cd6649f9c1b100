package chromium

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// Graded frames, for capacity: while Scale says 0.5 the frames are
// half size; when the page rests, one full-size frame follows (Sharpen),
// and nothing after it; a new scale takes effect at the next frame (the
// frame of the old scale is dropped; the restart sends one at the new).
func TestScreencastScaleAndSharpen(t *testing.T) {
	b := focusedForm(t, 640, 480)

	var scale atomic.Uint64
	scale.Store(math.Float64bits(0.5))
	var linkLimited atomic.Bool // small for the link: lower quality, no sharp frame
	settled := recordScreencast(t, b, browser.ScreencastOptions{
		Grade: func() browser.Grade {
			if linkLimited.Load() {
				return browser.Grade{Scale: 0.5, Quality: 30}
			}
			return browser.Grade{Scale: math.Float64frombits(scale.Load()), Sharpen: true}
		},
		Sharpen: 300 * time.Millisecond,
	})
	fs := settled()
	typeText(t, b, "abc")
	fs2 := settled()
	typed := fs2[len(fs):]
	if len(typed) < 2 {
		t.Fatalf("%d frames after typing, want the typed ones and a sharp one", len(typed))
	}
	for _, f := range typed[:len(typed)-1] {
		if size(f) != "320x240" {
			t.Fatalf("frame while typing at scale 0.5: %s, want 320x240", size(f))
		}
	}
	last := typed[len(typed)-1]
	if size(last) != "640x480" || last.DeviceWidth != 640 || last.Seq <= typed[len(typed)-2].Seq {
		t.Fatalf("the page at rest: last frame %s device %vx%v seq %d, want a sharp 640x480 after the others",
			size(last), last.DeviceWidth, last.DeviceHeight, last.Seq)
	}

	// Back to full size: frames after the change are full size, and a page
	// at rest gets no extra frame.
	scale.Store(math.Float64bits(1))
	typeText(t, b, "d")
	fs3 := settled()
	after := fs3[len(fs2):]
	if len(after) == 0 || size(after[len(after)-1]) != "640x480" {
		t.Fatalf("after scale 1: %d frames, last %v", len(after), after)
	}
	typeText(t, b, "e")
	fs4 := settled()
	for _, f := range fs4[len(fs3):] {
		if size(f) != "640x480" {
			t.Fatalf("frame at scale 1: %s", size(f))
		}
	}
	if n := len(fs4) - len(fs3); n == 0 {
		t.Fatal("no frame for a key at scale 1")
	}

	// Small for the viewer's link: half size at a lower quality, and the
	// page at rest stays so (a full-size frame would clog the link). The
	// key's frame, painted at the old grade, is dropped: the restart sends
	// it at the new one.
	linkLimited.Store(true)
	typeText(t, b, "f")
	fs5 := settled()
	typed = fs5[len(fs4):]
	if len(typed) == 0 {
		t.Fatal("link-limited: no frame after a key")
	}
	for _, f := range typed {
		if size(f) != "320x240" {
			t.Fatalf("link-limited: a %s frame among %d; want half-size frames only", size(f), len(typed))
		}
	}
	typeText(t, b, "g")
	fs6 := settled()
	for _, f := range fs6[len(fs5):] {
		if size(f) != "320x240" {
			t.Fatalf("link-limited frame %s", size(f))
		}
	}
	if n := len(fs6) - len(fs5); n == 0 || len(fs6[len(fs6)-1].Data) >= len(fs2[len(fs2)-2].Data) {
		t.Fatalf("link-limited: %d frames; quality 30 frame %d bytes, quality 80 one %d", n, len(fs6[len(fs6)-1].Data), len(fs2[len(fs2)-2].Data))
	}
	if v := eval[string](t, b, "document.getElementById('a').value"); v != "abcdefg" {
		t.Fatalf("input %q", v)
	}
}

// recordScreencast runs b's screencast with opts until the test ends and
// returns settled, which waits until the frames stop (a quiet 1.5 s) and
// returns all of them so far.
func recordScreencast(t *testing.T, b browser.Browser, opts browser.ScreencastOptions) (settled func() []browser.Frame) {
	t.Helper()
	var mu sync.Mutex
	var frames []browser.Frame
	got := func() []browser.Frame { mu.Lock(); defer mu.Unlock(); return append([]browser.Frame(nil), frames...) }
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan error, 1)
	go func() {
		done <- b.Screencast(ctx, opts, func(f browser.Frame) { mu.Lock(); frames = append(frames, f); mu.Unlock() })
	}()
	t.Cleanup(func() { cancel(); <-done })
	return func() []browser.Frame {
		t.Helper()
		var fs []browser.Frame
		testutil.Eventually(t, 30*time.Second, func() error {
			n := len(got())
			time.Sleep(1500 * time.Millisecond)
			if fs = got(); n == 0 || len(fs) != n {
				return fmt.Errorf("frames still coming (%d)", len(fs))
			}
			return nil
		})
		return fs
	}
}

func size(f browser.Frame) string { return fmt.Sprintf("%dx%d", f.Width, f.Height) }

// TestScaledScreencastFollowsAShrink: at scale 0.5, a viewport that
// shrinks gets frames of half its new size, not of the old maximum's.
func TestScaledScreencastFollowsAShrink(t *testing.T) {
	b := focusedForm(t, 1280, 800)
	settled := recordScreencast(t, b, browser.ScreencastOptions{
		Grade: func() browser.Grade { return browser.Grade{Scale: 0.5, Quality: 50} },
	})
	if fs := settled(); len(fs) == 0 || size(fs[len(fs)-1]) != "640x400" {
		t.Fatalf("frames before the resize: %v", fs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Input(ctx, browser.InputEvent{Type: browser.InputResize, Width: 1000, Height: 700}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		typeText(t, b, "x")
		fs := settled()
		if got := size(fs[len(fs)-1]); got != "500x350" {
			return fmt.Errorf("last frame after the shrink: %s, want 500x350", got)
		}
		return nil
	})
}
