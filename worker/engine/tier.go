package engine

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/worker/tiles"
)

// Per-viewer quality (issue 39). The hub grades its frames to its
// best-connected viewer's link (grade.go), and a slower viewer gets
// fewer of them (pace.go). With tiles, it also gets coarser ones: each
// client has a tier, and what its writer sends (whole frame, update,
// union) is requantized to that tier (tiles.Requantize: no pixel
// decoded; 0.66× and 0.48× the bytes), once per frame, form and tier,
// shared by every viewer on that tier.
//
// A client's tier follows its own acks: one step coarser when its last
// frame took longer than linkSlow while another viewer's took less (the
// hub's grade follows that one, so it would not help this one); one
// step finer after linkUpAfter acks that predict the finer tier under
// linkFast, or at once when it is the best-connected viewer (the hub's
// grade is then its own). Going finer sends the last frame again, whole,
// so the coarse tiles do not stay, also on a page at rest.

// viewerTier is a client's tier and what decides it.
type viewerTier struct {
	level atomic.Int32
	mu    sync.Mutex
	seen  uint64 // the pacer's samples at the last decision
	hold  uint64 // no decision before samples reach this
	good  int
}

// tierBytes is each tier's bytes relative to tier 0 (tiles.TierLow's
// and TierLowest's measured costs).
var tierBytes = [tiles.Tiers]float64{1, 0.66, 0.48}

// decideTier moves c's tier after an ack, from its transfer time and the
// other clients'.
func decideTier(h *Hub, c *client) {
	if h.tiles == nil || !c.tiles.Load() {
		return
	}
	x, n := c.pace.transfer()
	t := &c.tier
	t.mu.Lock()
	defer t.mu.Unlock()
	if n == 0 || n == t.seen || n < t.hold {
		return
	}
	t.seen = n
	best := time.Duration(0) // the fastest other client's
	h.mu.Lock()
	for o := range h.clients {
		if ox, on := o.pace.transfer(); o != c && on > 0 && (best == 0 || ox < best) {
			best = ox
		}
	}
	h.mu.Unlock()
	lvl := int(t.level.Load())
	switch {
	case best == 0 || x <= best:
		t.good = 0
		if lvl > 0 {
			t.set(h, c, 0, n) // the hub's grade is this viewer's own
		}
	case x > linkSlow && best < linkSlow && lvl < tiles.Tiers-1:
		t.good = 0
		t.set(h, c, lvl+1, n)
	case lvl > 0 && time.Duration(float64(x)*tierBytes[lvl-1]/tierBytes[lvl]) < linkFast:
		if t.good++; t.good >= linkUpAfter {
			t.good = 0
			t.set(h, c, lvl-1, n)
		}
	default:
		t.good = 0
	}
}

// set moves the tier (under t.mu); finer sends the last frame again,
// whole (on a page at rest no next frame would come).
func (t *viewerTier) set(h *Hub, c *client, lvl int, samples uint64) {
	was := int(t.level.Swap(int32(lvl)))
	t.hold = samples + linkSettle
	if lvl < was {
		h.refreshFrame(c)
	}
	c.log.Debug().Int("tier", lvl).Int("was", was).Msg("viewer's frames requantized for its link")
}

// tierCache holds a frame message's forms requantized, per form and
// tier.
type tierCache struct {
	mu sync.Mutex
	m  map[tierKey][]byte
}

type tierKey struct {
	form *byte // the form's first byte: f.b, f.delta, or a union
	tier int
}

// tiered is b, one of f's forms (a packed frame message), at tier lvl:
// its JPEG requantized under the same header. b itself if that fails
// (not a JPEG the coefficient path reads).
func tiered(f *frameMsg, b []byte, lvl int) []byte {
	if lvl <= 0 || len(b) < 4 {
		return b
	}
	k := tierKey{&b[0], lvl}
	f.tiers.mu.Lock()
	defer f.tiers.mu.Unlock()
	if out, ok := f.tiers.m[k]; ok {
		return out
	}
	out := b
	if n := int(binary.BigEndian.Uint32(b)); 4+n < len(b) {
		if img, err := tiles.Requantize(b[4+n:], lvl); err == nil && len(img) < len(b)-4-n {
			out = make([]byte, 0, 4+n+len(img))
			out = append(append(out, b[:4+n]...), img...)
		}
	}
	if f.tiers.m == nil {
		f.tiers.m = map[tierKey][]byte{}
	}
	f.tiers.m[k] = out
	return out
}

// tierSharpenAfter: once no frame came for this long (after any repair,
// tileRepairAfter), a viewer on a coarser tier gets the last frame at
// the frame's own quality, whole: a page at rest is sharp on every
// screen, as graded frames are sharpened at rest (grade.go).
const tierSharpenAfter = tileRepairAfter + 250*time.Millisecond

// sharpenTiers sends frame seq, unrequantized, to the clients on a
// coarser tier, if it is still the hub's last frame.
func sharpenTiers(h *Hub, seq uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.last == nil || h.last.seq != seq {
		return
	}
	var msg *frameMsg
	for c := range h.clients {
		if !c.tiles.Load() || c.tier.level.Load() == 0 {
			continue
		}
		if msg == nil {
			msg = &frameMsg{seq: seq, b: h.last.b, hdr: h.last.hdr, sharp: true}
		}
		c.sentSeq.Store(0) // whole
		c.frame.Store(msg)
		c.signalFrame()
	}
}
