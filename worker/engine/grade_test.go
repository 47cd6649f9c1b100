package engine

import (
	"math"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// The link grade follows the best-connected viewer's transfer times: a
// step smaller per slow ack (after the previous step settled), a step
// larger after linkUpAfter acks predicting the larger frames are fast.
func TestLinkGrade(t *testing.T) {
	ms := time.Millisecond
	type ack struct {
		xfer []time.Duration // per client (0 = that client has no ack yet)
		want int             // step after it
	}
	tests := []struct {
		name string
		acks []ack
	}{
		{"fast link stays full", []ack{{[]time.Duration{20 * ms}, 0}, {[]time.Duration{30 * ms}, 0}}},
		{"slow link: straight to the step predicted fast enough", []ack{
			// 900 ms at full size: 450 at 0.50, 189 at 0.21.
			{[]time.Duration{900 * ms}, 2}, {[]time.Duration{900 * ms}, 2}, {[]time.Duration{900 * ms}, 2},
			// settled: still slow (400 ms at step 2: 190 at step 3).
			{[]time.Duration{400 * ms}, 3}, {[]time.Duration{400 * ms}, 3}, {[]time.Duration{400 * ms}, 3},
			{[]time.Duration{400 * ms}, 3}}},
		{"very slow link: the last step", []ack{{[]time.Duration{4 * time.Second}, 3}}},
		{"slightly slow: one step", []ack{{[]time.Duration{300 * ms}, 1}}},
		{"a fast co-viewer keeps frames full", []ack{
			{[]time.Duration{900 * ms, 30 * ms}, 0}, {[]time.Duration{900 * ms, 30 * ms}, 0}}},
		{"viewers without acks do not count", []ack{{[]time.Duration{0}, 0}, {[]time.Duration{0, 300 * ms}, 1}}},
		{"back up after three fast acks", []ack{
			{[]time.Duration{300 * ms}, 1}, {[]time.Duration{200 * ms}, 1}, {[]time.Duration{200 * ms}, 1}, {[]time.Duration{200 * ms}, 1},
			// step 1 → 0 needs 0.5 of 150 ms: under 75 ms.
			{[]time.Duration{70 * ms}, 1}, {[]time.Duration{70 * ms}, 1}, {[]time.Duration{100 * ms}, 1},
			{[]time.Duration{70 * ms}, 1}, {[]time.Duration{70 * ms}, 1}, {[]time.Duration{70 * ms}, 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := bareHub()
			var cs []*client
			for i, a := range tt.acks {
				for len(cs) < len(a.xfer) {
					c := &client{}
					cs = append(cs, c)
					h.clients[c] = struct{}{}
				}
				for j, x := range a.xfer {
					cs[j].pace.xfer = x
					if x > 0 {
						cs[j].pace.samples++
					}
				}
				h.link.acks.Add(1)
				g := h.frameGrade()
				if h.link.step != a.want || g.Scale != linkSteps[a.want].scale || g.Sharpen != (a.want == 0) {
					t.Fatalf("ack %d: step %d (grade %+v), want %d", i+1, h.link.step, g, a.want)
				}
				if got := h.frameGrade(); got != g {
					t.Fatalf("ack %d: asked again without a new ack: %+v, was %+v", i+1, got, g)
				}
			}
			graded := int64(0)
			if h.link.step > 0 {
				graded = 1
			}
			if n := h.frames.linkGraded.Load(); n != graded {
				t.Fatalf("linkGraded %d, want %d", n, graded)
			}
			h.mu.Lock()
			h.link.reset()
			h.mu.Unlock()
			if n := h.frames.linkGraded.Load(); n != 0 || h.link.step != 0 {
				t.Fatalf("after the last client left: linkGraded %d, step %d", n, h.link.step)
			}
		})
	}
}

// A joining client's link hint sizes the frames until a frame is timed: the
// step predicted fast enough for the last frame's size (or a default one),
// the last frame withheld when it would be slow; the first ack then decides
// from the real transfer time, larger or smaller.
func TestLinkHint(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name      string
		kbps      int
		lastBytes int           // 0 = no frame yet
		timed     bool          // another viewer has timed a frame
		wantStep  int           // after the hint
		wantStale bool          // the last frame is withheld
		firstAck  time.Duration // the hinted frame's transfer time (0 = none)
		wantAfter int           // step after that ack
	}{
		{"no hint", 0, 120 << 10, false, 0, false, 0, 0},
		{"fast link: full frames", 100_000, 120 << 10, false, 0, false, 0, 0},
		// 120 KiB at 256 kbit/s: 3.8 s; 12 KiB at step 3: 384 ms, the last.
		{"256 kbit/s: the last step", 256, 120 << 10, false, 3, true, 300 * ms, 3},
		// 2 Mbit/s: 480 ms full, 240 at 0.50: step 1.
		{"2 Mbit/s: one step", 2000, 120 << 10, false, 1, true, 0, 1},
		// A small page's frames (8 KiB) pass at 256 kbit/s in 256 ms... just over.
		{"small frames on a slow link", 256, 8 << 10, false, 1, true, 0, 1},
		{"no frame yet: the default size", 256, 0, false, 3, false, 0, 3},
		{"a timed viewer knows better", 256, 120 << 10, true, 0, false, 0, 0},
		// The hint was wrong: the small frame came back in 10 ms, so full
		// frames (10× its bytes) are predicted at 100 ms.
		{"wrong hint: the first ack restores full size", 256, 120 << 10, false, 3, true, 10 * ms, 0},
		{"hint a little slow: the first ack moves one step", 2000, 120 << 10, false, 1, true, 400 * ms, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := bareHub()
			if tt.lastBytes > 0 {
				h.last = &frameMsg{b: make([]byte, tt.lastBytes)}
			}
			if tt.timed {
				other := &client{}
				other.pace.xfer, other.pace.samples = 20*ms, 1
				h.clients[other] = struct{}{}
			}
			c := &client{}
			h.clients[c] = struct{}{}
			h.mu.Lock()
			stale := h.link.hint(tt.kbps, h.clients, h.last)
			h.mu.Unlock()
			if h.link.step != tt.wantStep || stale != tt.wantStale {
				t.Fatalf("after the hint: step %d, stale %v; want %d, %v", h.link.step, stale, tt.wantStep, tt.wantStale)
			}
			if g := h.frameGrade(); g.Scale != linkSteps[tt.wantStep].scale {
				t.Fatalf("grade before any ack: %+v, want step %d", g, tt.wantStep)
			}
			if h.hintPending() != (tt.wantStep > 0) {
				t.Fatalf("hint pending %v with step %d", h.hintPending(), tt.wantStep)
			}
			if tt.firstAck > 0 {
				c.pace.xfer, c.pace.samples = tt.firstAck, 1
				h.link.acks.Add(1)
				h.frameGrade()
				if h.link.step != tt.wantAfter || h.hintPending() {
					t.Fatalf("after the first ack: step %d (hint pending %v), want %d", h.link.step, h.hintPending(), tt.wantAfter)
				}
			}
			if want := int64(min(h.link.step, 1)); h.frames.linkGraded.Load() != want {
				t.Fatalf("linkGraded %d, want %d", h.frames.linkGraded.Load(), want)
			}
		})
	}
}

func TestLinkHintParsing(t *testing.T) {
	tests := []struct {
		query   string
		want    int
		wantErr bool
	}{
		{"", 0, false},
		{"link=256", 256, false},
		{"link=10000000", 10_000_000, false},
		{"link=0", 0, true},
		{"link=-5", 0, true},
		{"link=fast", 0, true},
		{"link=10000001", 0, true},
		{"link=1.5", 0, true},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "/app/a/i/b/b/ws?"+tt.query, nil)
		got, err := LinkHint(r)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("?%s: %d, %v; want %d, error %v", tt.query, got, err, tt.want, tt.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), "link:") {
			t.Errorf("?%s: error %q does not name the field", tt.query, err)
		}
	}
}

// While a joining viewer's hint stands, frames graded before it (too large
// for the hinted step) reach nobody; the restart's smaller frame does.
func TestHintedHubDropsLargerFrames(t *testing.T) {
	h := bareHub()
	c := &client{frameSig: make(chan struct{}, 1)}
	h.clients[c] = struct{}{}
	h.mu.Lock()
	h.link.hint(8, h.clients, h.last) // the last step: 0.35
	h.mu.Unlock()
	h.fanOut(browser.Frame{Seq: 1, Data: []byte{1}, Width: 1280, Height: 720, DeviceWidth: 1280, DeviceHeight: 720})
	if f := c.frame.Load(); f != nil || h.last != nil {
		t.Fatalf("a full-size frame reached the hinted viewer: %+v", f)
	}
	h.fanOut(browser.Frame{Seq: 2, Data: []byte{1}, Width: 448, Height: 252, DeviceWidth: 1280, DeviceHeight: 720})
	if f := c.frame.Load(); f == nil || f.seq != 2 {
		t.Fatalf("the frame at the hinted size did not reach the viewer: %+v", f)
	}
}

// A screencast that keeps sending frames too large for the hint (its size
// lagging a resize) does not starve the viewer: after a few drops, the
// next frame goes out, and its ack decides the step.
func TestHintedHubGivesUpDropping(t *testing.T) {
	h := bareHub()
	c := &client{frameSig: make(chan struct{}, 1)}
	h.clients[c] = struct{}{}
	h.mu.Lock()
	h.link.hint(8, h.clients, h.last)
	h.mu.Unlock()
	large := browser.Frame{Data: []byte{1}, Width: 602, Height: 421, DeviceWidth: 1000, DeviceHeight: 700}
	for seq := uint64(1); seq <= maxHintDrops; seq++ {
		large.Seq = seq
		h.fanOut(large)
		if f := c.frame.Load(); f != nil {
			t.Fatalf("frame %d reached the viewer while the hint drops", seq)
		}
	}
	large.Seq = maxHintDrops + 1
	h.fanOut(large)
	if f := c.frame.Load(); f == nil || f.seq != maxHintDrops+1 {
		t.Fatalf("after %d drops the viewer still has no frame: %+v", maxHintDrops, f)
	}
}

// TestHintedHubCountsDevicePixels: on a HiDPI screen frames carry scale
// device pixels per CSS pixel; a frame graded for the hint at that scale
// is not too large, one twice it is.
func TestHintedHubCountsDevicePixels(t *testing.T) {
	for _, tc := range []struct {
		name    string
		times   float64 // the frame's width over the hinted width at scale 2
		dropped bool
	}{
		{"graded at the device's pixels", 1, false},
		{"twice that", 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := bareHub()
			h.input.scale.Store(math.Float64bits(2)) // the owner's resize said so
			c := &client{frameSig: make(chan struct{}, 1)}
			h.clients[c] = struct{}{}
			h.mu.Lock()
			h.link.hint(8, h.clients, h.last)
			step := linkSteps[h.link.step].scale
			h.mu.Unlock()
			w := int(1000 * 2 * step * tc.times)
			h.fanOut(browser.Frame{Data: []byte{1}, Seq: 1, Width: w, Height: 10, DeviceWidth: 1000, DeviceHeight: 700})
			if got := c.frame.Load() == nil; got != tc.dropped {
				t.Fatalf("frame %d px wide for 1000 CSS px at scale 2 and step %v: dropped %v, want %v", w, step, got, tc.dropped)
			}
		})
	}
}
