package engine

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"image"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/tiles"
)

// Damage updates (issue 39, docs/client-engine.md "Tiles"). With
// Config.Tiles, each screencast frame is diffed against the previous one
// (package tiles) and the changed 64×64 tiles are encoded once, for every
// viewer whose engine said it composes them ({"t":"caps","tiles":true}).
// A frame message then carries both forms: the whole frame and the
// update from the frame before (its base). A client's writer sends the
// update only if the last frame it sent that client is the base;
// otherwise (its first frame, a frame its pacing skipped, a refresh) the
// whole frame goes, a keyframe, so a screen is never torn.

// tileKeyEvery: a keyframe at least every this many frames, so the
// re-encoding's small losses do not stay on screen; a typing user makes
// ~5 frames a second.
const tileKeyEvery = 50

// tileRepairAfter: a scroll's update may leave tiles near (moved content
// whose JPEG blocks did not line up, package tiles); when no frame came
// for this long, the page rests and those tiles go again, exact. Longer
// than the 200 ms between a mouse wheel's notches, so a scroll is
// repaired once, at its end.
const tileRepairAfter = 350 * time.Millisecond

// hubTiles is a hub's tile encoder; the screencast's sink (one goroutine)
// uses it, mu makes that explicit.
type hubTiles struct {
	mu   sync.Mutex
	enc  tiles.Encoder
	base uint64 // seq of the frame enc holds (0 = none)
	// users counts the connected clients that take tiles: no diff is
	// made for nobody.
	users atomic.Int32
	// encodeNs and encoded time the diffs (Stats: CPU per frame).
	encodeNs, encoded, deltas atomic.Int64
	// hist is what the last frames changed, oldest first, for a viewer
	// whose pacing skipped some: it gets the union of their tiles
	// (unionTiles), made once per frame and base and shared (unions).
	hist   []tileStep
	unions map[uint64][]byte
	// The base frame's scroll offsets and scale: the next frame's move.
	scroll         [2]float64
	width          int
	deviceWidth    float64
	repair         *time.Timer
	rested         func(seq uint64) // repairTiles, set by NewHub
	repairs, moves atomic.Int64
	// sharpen is sharpenTiers, set by NewHub, armed on every frame.
	sharpen   func(seq uint64)
	sharpenAt *time.Timer
}

// tileStep is one frame's change: its tiles, or key (no update: a new
// size, most tiles, the periodic keyframe, an error).
type tileStep struct {
	seq   uint64
	key   bool
	moved bool // a scroll: no union of tiles spans it
	tiles []tiles.Rect
}

// histLen bounds hist: a viewer more frames behind gets the whole frame.
const histLen = 32

// note adds a frame's step to hist; under t.mu.
func (t *hubTiles) note(st tileStep) {
	if len(t.hist) == histLen {
		t.hist = append(t.hist[:0], t.hist[1:]...)
	}
	t.hist = append(t.hist, st)
	clear(t.unions)
}

func newHubTiles(quality int) *hubTiles {
	return &hubTiles{enc: tiles.Encoder{Quality: quality, KeyEvery: tileKeyEvery}}
}

// tileHeader is a tile update's header: the frame's, plus the base frame's
// seq and the changed tiles as [x, y, w, h] in frame pixels; tile i is
// rows i*64… of the atlas JPEG that follows.
type tileHeader struct {
	frameHeader
	Base  uint64   `json:"base"`
	Tiles [][4]int `json:"tiles"`
	// Mv: first copy the screen so that (x, y) shows what (x+mv[0],
	// y+mv[1]) showed (a scroll).
	Mv *[2]int `json:"mv,omitempty"`
	// Near: how many tiles the screen shows only approximately after this
	// update (a repair follows once the page rests).
	Near int `json:"near,omitempty"`
}

// tileHeaderOf is the header of u, an update of f from base.
func tileHeaderOf(hdr frameHeader, base uint64, u tiles.Update) tileHeader {
	th := tileHeader{frameHeader: hdr, Base: base, Tiles: make([][4]int, len(u.Tiles)), Near: u.Near}
	for i, r := range u.Tiles {
		th.Tiles[i] = [4]int{r.X, r.Y, r.W, r.H}
	}
	if u.Move != (image.Point{}) {
		th.Mv = &[2]int{u.Move.X, u.Move.Y}
	}
	return th
}

// moveOf is f's scroll since the base frame in frame pixels (zero: none,
// or not a whole number of pixels, or the frame's scale changed).
func (t *hubTiles) moveOf(f browser.Frame) image.Point {
	if t.base == 0 || f.Width != t.width || f.DeviceWidth != t.deviceWidth || f.DeviceWidth <= 0 {
		return image.Point{}
	}
	scale := float64(f.Width) / f.DeviceWidth
	px := func(d float64) (int, bool) {
		v := d * scale
		r := math.Round(v)
		return int(r), math.Abs(v-r) < 0.01
	}
	dx, okX := px(f.ScrollX - t.scroll[0])
	dy, okY := px(f.ScrollY - t.scroll[1])
	if !okX || !okY {
		return image.Point{}
	}
	return image.Pt(dx, dy)
}

// addTiles makes msg carry f's update from the previous frame, if any
// client takes tiles and the update is smaller than the frame. msg.hdr is
// f's header already (fanOut).
func addTiles(t *hubTiles, f browser.Frame, msg *frameMsg) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.users.Load() == 0 {
		t.enc.Reset() // nobody composes: no CPU for a diff
		t.base, t.hist = 0, nil
		return
	}
	mv := t.moveOf(f)
	start := time.Now()
	u, err := t.enc.EncodeMoved(f.Data, mv)
	t.encodeNs.Add(int64(time.Since(start)))
	t.encoded.Add(1)
	base := t.base
	t.base, t.scroll, t.width, t.deviceWidth = f.Seq, [2]float64{f.ScrollX, f.ScrollY}, f.Width, f.DeviceWidth
	if err != nil {
		t.base = 0
		t.note(tileStep{seq: f.Seq, key: true})
		return
	}
	t.note(tileStep{seq: f.Seq, key: u.Key || base == 0, moved: u.Move != (image.Point{}), tiles: u.Tiles})
	if u.Near > 0 && t.rested != nil {
		seq := f.Seq
		if t.repair != nil {
			t.repair.Stop()
		}
		t.repair = time.AfterFunc(tileRepairAfter, func() { t.rested(seq) })
	}
	if t.sharpen != nil {
		seq := f.Seq
		if t.sharpenAt != nil {
			t.sharpenAt.Stop()
		}
		t.sharpenAt = time.AfterFunc(tierSharpenAfter, func() { t.sharpen(seq) })
	}
	if u.Key || base == 0 {
		return
	}
	if u.Move != (image.Point{}) {
		t.moves.Add(1)
	}
	b := packFrame(tileHeaderOf(headerOf(f), base, u), u.Atlas)
	if len(b) >= len(msg.b) {
		return // the whole frame is no larger: send it
	}
	t.deltas.Add(1)
	msg.delta, msg.base = b, base
}

// frameBytes is what c's writer sends of f: the update if c composes
// tiles and has f's base, the union of the updates since c's last frame
// if c's pacing skipped some, else the whole frame; it records f as c's
// last.
func frameBytes(c *client, f *frameMsg) []byte {
	prev := c.sentSeq.Swap(f.seq)
	if !c.tiles.Load() {
		return f.b
	}
	lvl := int(c.tier.level.Load())
	if f.sharp {
		lvl = 0
	}
	if prev == 0 {
		return tiered(f, f.b, lvl)
	}
	if f.delta != nil && prev == f.base {
		return tiered(f, f.delta, lvl)
	}
	if u := unionTiles(c.tileSrc, prev, f); u != nil {
		return tiered(f, u, lvl)
	}
	return tiered(f, f.b, lvl)
}

// unionTiles is f as an update from frame from: the tiles changed by
// every frame after from up to f, encoded from f (nil: f is no longer the
// newest frame, a frame between changed size or most tiles, from is too
// far back, or the update would be no smaller than f).
func unionTiles(t *hubTiles, from uint64, f *frameMsg) []byte {
	if t == nil || from >= f.seq {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.base != f.seq {
		return nil // the encoder holds a newer frame: f's slot will have it
	}
	if b, ok := t.unions[from]; ok {
		return b
	}
	i := slices.IndexFunc(t.hist, func(st tileStep) bool { return st.seq == from })
	if i < 0 {
		return nil
	}
	seen := map[tiles.Rect]bool{}
	var rs []tiles.Rect
	for _, st := range t.hist[i+1:] {
		if st.key || st.moved {
			return nil
		}
		for _, r := range st.tiles {
			if !seen[r] {
				seen[r] = true
				rs = append(rs, r)
			}
		}
	}
	if t.unions == nil {
		t.unions = map[uint64][]byte{}
	}
	slices.SortFunc(rs, func(a, b tiles.Rect) int { return cmp.Or(a.Y-b.Y, a.X-b.X) })
	var out []byte // nil: cached as "whole"
	if atlas, ok := t.enc.Atlas(rs); ok || len(rs) == 0 {
		if b := packFrame(tileHeaderOf(f.hdr, from, tiles.Update{Tiles: rs}), atlas); len(b) < len(f.b) {
			out = b
			t.deltas.Add(1)
		}
	}
	t.unions[from] = out
	return out
}

// repairTiles sends the tiles that moves left near, from frame seq, once
// no frame followed it for tileRepairAfter: to each client composing
// tiles, as an update of seq on seq itself if seq is what it shows, else
// (its writer has not sent seq yet, or sent something else) frame seq
// whole. The hub's lock is taken before the encoder's, as nowhere the
// other way round.
func repairTiles(h *Hub, seq uint64) {
	t := h.tiles
	h.mu.Lock()
	defer h.mu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if h.closed || h.last == nil || h.last.seq != seq || t.base != seq {
		return // a newer frame came: it carried the repair, or will
	}
	u, ok, err := t.enc.Repair()
	if err != nil || !ok {
		return
	}
	t.repairs.Add(1)
	msg := &frameMsg{seq: seq, b: h.last.b, hdr: h.last.hdr, base: seq}
	if b := packFrame(tileHeaderOf(h.last.hdr, seq, u), u.Atlas); len(b) < len(msg.b) {
		msg.delta = b
	}
	for c := range h.clients {
		if c.tiles.Load() {
			c.frame.Store(msg)
			c.signalFrame()
		}
	}
}

// TileStats are a hub's tile encoder's totals: frames diffed, the time it
// took, and the updates made (the rest went whole).
type TileStats struct {
	Encoded, Deltas int64
	EncodeTime      time.Duration
	// Moves: updates that moved the screen (a scroll); Repairs: updates
	// that made moved tiles exact once the page rested.
	Moves, Repairs int64
}

// HubTileStats reads h's tile totals (zero without Config.Tiles).
func HubTileStats(h *Hub) TileStats {
	if h.tiles == nil {
		return TileStats{}
	}
	t := h.tiles
	return TileStats{Encoded: t.encoded.Load(), Deltas: t.deltas.Load(), EncodeTime: time.Duration(t.encodeNs.Load()),
		Moves: t.moves.Load(), Repairs: t.repairs.Load()}
}

// takeCaps notes what c's engine can do ({"t":"caps"}).
func takeCaps(h *Hub, c *client, m *clientEnvelope) {
	if h.tiles == nil || !m.Tiles || c.tiles.Swap(true) {
		return
	}
	h.tiles.users.Add(1)
}

// dropCaps undoes takeCaps when c leaves.
func dropCaps(h *Hub, c *client) {
	if h.tiles != nil && c.tiles.Swap(false) {
		h.tiles.users.Add(-1)
	}
}

// packFrame is a binary frame message: the header's length, the header,
// the image.
func packFrame(hdr any, img []byte) []byte {
	hb, _ := json.Marshal(hdr)
	out := make([]byte, 4+len(hb)+len(img))
	binary.BigEndian.PutUint32(out, uint32(len(hb)))
	copy(out[4:], hb)
	copy(out[4+len(hb):], img)
	return out
}

func headerOf(f browser.Frame) frameHeader {
	return frameHeader{Seq: f.Seq, W: f.Width, H: f.Height, DW: f.DeviceWidth, DH: f.DeviceHeight,
		OT: f.OffsetTop, SX: f.ScrollX, SY: f.ScrollY, TS: f.Timestamp.UnixMilli()}
}
