package worker

import (
	"sync"
	"time"
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
)

type pacer struct {
	wait    time.Duration // 0 = ackWait (tests shorten it)
	mu      sync.Mutex
	on      bool     // the client acknowledges frames
	pending []uint64 // sent and not acknowledged, ascending
	stall   *time.Timer
	stopped bool
}

// mayWrite reports whether a frame may be sent now. When it may not, wake
// is called after ackWait unless an ack comes first.
func (p *pacer) mayWrite(wake func()) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.on || len(p.pending) < maxInFlight {
		return true
	}
	if p.stall == nil && !p.stopped {
		wait := p.wait
		if wait == 0 {
			wait = ackWait
		}
		p.stall = time.AfterFunc(wait, func() {
			p.mu.Lock()
			p.pending = p.pending[:0] // give up on those acks
			p.stall = nil
			p.mu.Unlock()
			wake()
		})
	}
	return false
}

// wrote records a frame sent.
func (p *pacer) wrote(seq uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.on {
		p.pending = append(p.pending, seq)
	}
}

// acked records the client's acknowledgement of every frame up to seq.
func (p *pacer) acked(seq uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.on = true
	i := 0
	for i < len(p.pending) && p.pending[i] <= seq {
		i++
	}
	p.pending = append(p.pending[:0], p.pending[i:]...)
	if p.stall != nil {
		p.stall.Stop()
		p.stall = nil
	}
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
