package engine

import (
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// TestMissedScrollRestartsScreencast: after a wheel, if the page rests
// scrolled elsewhere than the last frame shows (Chromium dropped the
// frame), the screencast starts again, which sends the page as it is; if
// the last frame shows the page's scroll, it does not.
func TestMissedScrollRestartsScreencast(t *testing.T) {
	f := newHubFixture(t)
	owner, _ := f.dial(t, AccessOwner)
	frame := func(seq uint64, y float64) {
		f.fb.Frames <- browser.Frame{Data: []byte{0xff, 0xd8}, Width: 8, Height: 6, DeviceWidth: 8, DeviceHeight: 6, Seq: seq, ScrollY: y, Timestamp: time.Now()}
		if got := nextFrame(t, owner); got != seq {
			t.Fatalf("frame %d, want %d", got, seq)
		}
	}
	wheel := func() {
		_ = owner.WriteJSON(map[string]any{"t": "input", "type": "wheel", "x": 4, "y": 3, "deltaX": 0, "deltaY": 120})
	}
	frame(1, 0)
	// The page scrolled to 480; its frame never came.
	f.fb.SetScroll(0, 480)
	wheel()
	testutil.Eventually(t, 10*time.Second, testutil.Cond("the screencast restarted", func() bool {
		started, _ := f.fb.Casts()
		return started == 2
	}))
	if s := f.h.frames.Stats(); s.ScrollRestarts != 1 {
		t.Fatalf("scroll restarts %d, want 1", s.ScrollRestarts)
	}
	// The restarted screencast's frame shows 480: a wheel that leaves the
	// page there restarts nothing.
	frame(2, 480)
	_, reads := f.fb.Casts()
	wheel()
	testutil.Eventually(t, 10*time.Second, testutil.Cond("the scroll checked again", func() bool {
		_, r := f.fb.Casts()
		return r > reads
	}))
	if started, _ := f.fb.Casts(); started != 2 {
		t.Fatalf("%d screencasts started for a frame that showed the scroll, want 2", started)
	}
}
