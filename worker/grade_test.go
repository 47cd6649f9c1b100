package worker

import (
	"testing"
	"time"

	"github.com/rs/zerolog"
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
			h := &hub{clients: map[*client]struct{}{}, frames: &frameCounters{}, log: zerolog.Nop()}
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
				h.acks.Add(1)
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
			h.resetLinkLocked()
			h.mu.Unlock()
			if n := h.frames.linkGraded.Load(); n != 0 || h.link.step != 0 {
				t.Fatalf("after the last client left: linkGraded %d, step %d", n, h.link.step)
			}
		})
	}
}
