package engine

import (
	"sync"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
)

// Frame pacing. Latest-frame-wins keeps a slow client from slowing the
// browser, but the frames a client cannot take yet still pile up in the
// socket buffers on the way, each one older than the last: a viewer on a
// slow link sees the page late, and typing echoes late. A client engine that
// acknowledges frames ({"t":"ack","seq":n} once frame n is drawn; skipped
// older frames are covered) gets at most maxInFlight frames it has not
// acknowledged; the newest frame waits in its slot for the next ack. The
// frame rate thus follows what the viewer draws. A client that never
// acknowledges is not paced (older engines), and one that stops for
// ackWait gets frames again, so a lost ack cannot freeze a screen.
const (
	maxInFlight = 2
	ackWait     = 2 * time.Second
	maxPending  = 64 // unacknowledged frames remembered (a client that stopped acking)
)

type pacer struct {
	wait    time.Duration // 0 = ackWait (tests shorten it)
	clk     clock.Clock   // nil = clock.Real (tests set one)
	mu      sync.Mutex
	on      bool   // the client acknowledges frames
	pending []sent // sent and not acknowledged, ascending (at most maxPending)
	// givenUp is how many of the oldest pending frames no longer count as
	// in flight: their acks were overdue (ackWait). They stay in pending
	// so that an ack which does come still times the link.
	givenUp int
	stall   *time.Timer
	stopped bool

	// xfer is the last acknowledged frame's time from its write (or the
	// ack before, if later: the link was busy until then) to its ack: what
	// the viewer's link and screen took for it (0 = no ack yet). samples
	// counts the acks timed.
	lastAck time.Time
	xfer    time.Duration
	samples uint64
}

type sent struct {
	seq uint64
	at  time.Time
}

// mayWrite reports whether a frame may be sent now. When it may not, wake
// is called after ackWait unless an ack comes first.
func (p *pacer) mayWrite(wake func()) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.on || len(p.pending)-p.givenUp < maxInFlight {
		return true
	}
	if p.stall == nil && !p.stopped {
		wait := p.wait
		if wait == 0 {
			wait = ackWait
		}
		p.stall = time.AfterFunc(wait, func() {
			p.mu.Lock()
			p.givenUp = len(p.pending) // stop waiting for those acks
			p.stall = nil
			p.mu.Unlock()
			wake()
		})
	}
	return false
}

// wrote records a frame sent. Frames are recorded before the client's
// first ack too (they do not pace it until then): the first ack times the
// first frame, which decides a hinted link step (grade.go).
func (p *pacer) wrote(seq uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.pending) == maxPending { // forget the oldest, a given-up one
		p.pending = append(p.pending[:0], p.pending[1:]...)
		p.givenUp = max(0, p.givenUp-1)
	}
	p.pending = append(p.pending, sent{seq, p.clock()})
}

// acked records the client's acknowledgement of every frame up to seq.
func (p *pacer) acked(seq uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.on = true
	i := 0
	for i < len(p.pending) && p.pending[i].seq <= seq {
		i++
	}
	now := p.clock()
	if i > 0 {
		// The newest frame acknowledged: its own transfer began when it
		// was written or when the link freed up, whichever came later.
		begin := p.pending[i-1].at
		if p.lastAck.After(begin) {
			begin = p.lastAck
		}
		p.xfer = now.Sub(begin)
		p.samples++
	}
	p.lastAck = now
	p.pending = append(p.pending[:0], p.pending[i:]...)
	p.givenUp = max(0, p.givenUp-i)
	if p.stall != nil {
		p.stall.Stop()
		p.stall = nil
	}
}

func (p *pacer) clock() time.Time {
	if p.clk != nil {
		return p.clk.Now()
	}
	return time.Now()
}

// transfer is the client's last time per frame and how many acks were
// timed (0, 0: none yet, or a client that does not acknowledge).
func (p *pacer) transfer() (time.Duration, uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.xfer, p.samples
}

// stop ends a stall timer for good (the client left).
func (p *pacer) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	if p.stall != nil {
		p.stall.Stop()
		p.stall = nil
	}
}
