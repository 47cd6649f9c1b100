package engine

import (
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// Frames graded to the viewers' links. The
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

// linkGrade is a hub's link step and what decides it: the clients' acks,
// their transfer times and link hints. The hub's mu guards it, acks aside.
type linkGrade struct {
	step int
	good int    // acks in a row predicting the step above is fast enough
	seen uint64 // acks at the last decision
	hold uint64 // no decision before seen reaches this
	// hinted: the step came from a client's hint, and no frame has been
	// timed since; the first one decides, either way, at once.
	hinted bool
	// hintDrops counts the frames dropped as too large for the hint
	// (Hub.fanOut), which gives up after maxHintDrops.
	hintDrops int
	// acks counts the clients' acks, so the step is decided once per new
	// one.
	acks atomic.Uint64

	frames *Counters // the worker's count of link-graded browsers
	log    zerolog.Logger
}

// maxHintDrops bounds the frames dropped as too large for a hinted link:
// if the screencast keeps sending them (its size lagging the viewport's),
// a frame too large beats none, and its ack decides the step.
const maxHintDrops = 3

// Link hints. Before its first ack nobody knows a viewer's link, and the
// first frame (the browser's last, full size) took 3.5 s on a 256 kbit/s
// link. A client engine estimates its link from its own page load and says
// so when it connects (?link=<kbit/s>); until a viewer has timed a frame,
// the hint picks the step. The first ack then puts the step where that
// frame's real transfer time says, so a wrong hint costs one frame.
const (
	// defaultFrameBytes is a full frame's size before the browser has
	// sent one (framecost's text page: 121 KiB).
	defaultFrameBytes = 120 << 10
	// maxLinkHint is the largest hint taken, in kbit/s (10 Gbit/s).
	maxLinkHint = 10_000_000
)

// LinkHint is a socket request's ?link=, in kbit/s; 0 when absent.
func LinkHint(r *http.Request) (int, error) {
	v := r.URL.Query().Get("link")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxLinkHint {
		return 0, fmt.Errorf("link: %q is not a whole number of kbit/s between 1 and %d", v, maxLinkHint)
	}
	return n, nil
}

// hint takes a joining client's link hint, unless one of the hub's clients
// has timed a frame (that knows better); last is the hub's last frame. It
// reports whether that frame is too large for the hinted link: the client
// then waits for a fresh one at the new step instead (Hub.refresh).
func (l *linkGrade) hint(kbps int, clients map[*client]struct{}, last *frameMsg) (skipLast bool) {
	if kbps <= 0 {
		return false
	}
	for c := range clients {
		if _, n := c.pace.transfer(); n > 0 {
			return false
		}
	}
	// A frame of the current step: the last one, or a default one's share.
	bytes := float64(defaultFrameBytes) * linkSteps[l.step].bytes
	if last != nil {
		bytes = float64(len(last.b))
	}
	best := time.Duration(bytes * 8 / float64(kbps) * float64(time.Millisecond))
	step := firstFastStep(0, l.step, best)
	if step <= l.step {
		return false
	}
	l.seen = l.acks.Load()
	l.set(step, best, "hint")
	l.hinted, l.hold, l.good, l.hintDrops = true, 0, 0, 0
	return last != nil && best > linkSlow
}

// hintPending: the step is a hint's and the next ack decides it.
func (h *Hub) hintPending() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.link.hinted
}

// frameGrade is the grade of the hub's frames now: the smaller of the
// worker's CPU grade and its viewers' link grade. The screencast asks
// before every frame.
func (h *Hub) frameGrade() browser.Grade {
	cpu := 1.0
	if h.grade != nil {
		cpu = h.grade.Scale()
	}
	h.mu.Lock()
	step := h.link.decide(h.clients)
	h.mu.Unlock()
	ls := linkSteps[step]
	// A page at rest is sharpened only when the link takes full frames.
	return browser.Grade{Scale: min(cpu, ls.scale), Quality: ls.quality, Sharpen: step == 0}
}

// decide decides the link step from the clients' transfer times, once per
// new ack.
func (l *linkGrade) decide(clients map[*client]struct{}) int {
	var best time.Duration
	for c := range clients {
		if x, n := c.pace.transfer(); n > 0 && (best == 0 || x < best) {
			best = x
		}
	}
	seen := l.acks.Load()
	if best == 0 || seen == l.seen || seen < l.hold {
		return l.step
	}
	l.seen = seen
	step := l.step
	switch {
	case l.hinted:
		// The first timed frame after a hint: the step it predicts fast
		// enough, larger or smaller.
		l.hinted = false
		step = firstFastStep(0, l.step, best)
		l.good = 0
	case best > linkSlow && l.step < len(linkSteps)-1:
		// Straight to the first step predicted to be fast enough (or
		// the last): a 110 KiB frame on a 256 kbit/s link takes 3.5 s,
		// and a step at a time would take several of those.
		step = firstFastStep(l.step, l.step, best)
		l.good = 0
	case l.step > 0 && time.Duration(float64(best)*linkSteps[l.step-1].bytes/linkSteps[l.step].bytes) < linkFast:
		if l.good++; l.good >= linkUpAfter {
			step--
			l.good = 0
		}
	default:
		l.good = 0
	}
	l.set(step, best, "acks")
	return l.step
}

// firstFastStep is the first step from "from" on (or the last) whose frames
// are predicted to take at most linkSlow, when one of step cur took best.
func firstFastStep(from, cur int, best time.Duration) int {
	s := from
	for s < len(linkSteps)-1 && time.Duration(float64(best)*linkSteps[s].bytes/linkSteps[cur].bytes) > linkSlow {
		s++
	}
	return s
}

// set moves the link step, if step is another one, and holds the next
// decision until the transfer times reflect the new size.
func (l *linkGrade) set(step int, transfer time.Duration, why string) {
	was := l.step
	if step == was {
		return
	}
	l.step = step
	l.hold = l.seen + linkSettle
	switch {
	case was == 0:
		l.frames.linkGraded.Add(1)
	case step == 0:
		l.frames.linkGraded.Add(-1)
	}
	l.log.Debug().Int("step", step).Dur("transfer", transfer).Str("from", why).Msg("frames graded to the viewers' link")
}

// reset forgets the link grade: the last client left (the next ones may be
// on other links).
func (l *linkGrade) reset() {
	if l.step > 0 {
		l.frames.linkGraded.Add(-1)
	}
	l.step, l.good, l.hold, l.hinted = 0, 0, 0, false
	l.seen = l.acks.Load()
}
