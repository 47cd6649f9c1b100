package worker

import (
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// Frames graded to the viewers' links (issue 16, bytes per viewer). The
// worker's CPU grades every screencast (worker/grade); a viewer's link
// grades its browser's: when even the best-connected viewer took longer
// than linkSlow for its last frame (from its write to its ack: the link
// and the screen), frames get smaller and coarser, to the first step
// predicted to take less (or linkSteps' last);
// when the time predicted for the step above is under linkFast for
// linkUpAfter acks in a row, a step larger. A viewer slower than the
// others gets fewer frames (pace.go) rather than worse ones for everyone.

// linkSteps are the frames' scale and JPEG quality per step (0 = the
// screencast's, 80), and a frame's bytes relative to the first step
// (scripts/bench/cmd/framecost on a text page: 121, 60, 26, 12 KiB).
var linkSteps = []struct {
	scale   float64
	quality int
	bytes   float64
}{
	{1, 0, 1}, {0.75, 60, 0.50}, {0.5, 50, 0.21}, {0.35, 40, 0.10},
}

const (
	linkSlow    = 250 * time.Millisecond
	linkFast    = 150 * time.Millisecond
	linkUpAfter = 3
	// linkSettle is how many acks after a step pass before the next
	// decision: the transfer times are a moving average of the old size.
	linkSettle = 3
)

// linkGrade is a hub's step; the hub's mu guards it.
type linkGrade struct {
	step int
	good int    // acks in a row predicting the step above is fast enough
	seen uint64 // hub.acks at the last decision
	hold uint64 // no decision before seen reaches this
}

// frameGrade is the grade of the hub's frames now: the smaller of the
// worker's CPU grade and its viewers' link grade. The screencast asks
// before every frame.
func (h *hub) frameGrade() browser.Grade {
	cpu := 1.0
	if h.grade != nil {
		cpu = h.grade.Scale()
	}
	h.mu.Lock()
	step := h.linkStepLocked()
	h.mu.Unlock()
	ls := linkSteps[step]
	// A page at rest is sharpened only when the link takes full frames.
	return browser.Grade{Scale: min(cpu, ls.scale), Quality: ls.quality, Sharpen: step == 0}
}

// linkStepLocked decides the link step from the clients' transfer times,
// once per new ack.
func (h *hub) linkStepLocked() int {
	var best time.Duration
	for c := range h.clients {
		if x, n := c.pace.transfer(); n > 0 && (best == 0 || x < best) {
			best = x
		}
	}
	seen := h.acks.Load()
	l := &h.link
	if best == 0 || seen == l.seen || seen < l.hold {
		return l.step
	}
	l.seen = seen
	was := l.step
	switch {
	case best > linkSlow && l.step < len(linkSteps)-1:
		// Straight to the first step predicted to be fast enough (or
		// the last): a 110 KiB frame on a 256 kbit/s link takes 3.5 s,
		// and a step at a time would take several of those.
		cur := l.step
		for l.step < len(linkSteps)-1 && time.Duration(float64(best)*linkSteps[l.step].bytes/linkSteps[cur].bytes) > linkSlow {
			l.step++
		}
		l.good = 0
	case l.step > 0 && time.Duration(float64(best)*linkSteps[l.step-1].bytes/linkSteps[l.step].bytes) < linkFast:
		if l.good++; l.good >= linkUpAfter {
			l.step--
			l.good = 0
		}
	default:
		l.good = 0
	}
	if l.step != was {
		l.hold = seen + linkSettle
		switch {
		case was == 0:
			h.frames.linkGraded.Add(1)
		case l.step == 0:
			h.frames.linkGraded.Add(-1)
		}
		h.log.Debug().Int("step", l.step).Dur("transfer", best).Msg("frames graded to the viewers' link")
	}
	return l.step
}

// resetLinkLocked forgets the link grade: the last client left (the next
// ones may be on other links).
func (h *hub) resetLinkLocked() {
	if h.link.step > 0 {
		h.frames.linkGraded.Add(-1)
	}
	h.link = linkGrade{seen: h.acks.Load()}
}
