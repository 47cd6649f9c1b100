package engine

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
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
}

// tileStep is one frame's change: its tiles, or key (no update: a new
// size, most tiles, the periodic keyframe, an error).
type tileStep struct {
	seq   uint64
	key   bool
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
}

// addTiles makes msg carry f's update from the previous frame, if any
// client takes tiles and the update is smaller than the frame.
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
	msg.hdr = headerOf(f)
	start := time.Now()
	u, err := t.enc.Encode(f.Data)
	t.encodeNs.Add(int64(time.Since(start)))
	t.encoded.Add(1)
	base := t.base
	t.base = f.Seq
	if err != nil {
		t.base = 0
		t.note(tileStep{seq: f.Seq, key: true})
		return
	}
	t.note(tileStep{seq: f.Seq, key: u.Key || base == 0, tiles: u.Tiles})
	if u.Key || base == 0 {
		return
	}
	hdr := tileHeader{frameHeader: headerOf(f), Base: base, Tiles: make([][4]int, len(u.Tiles))}
	for i, r := range u.Tiles {
		hdr.Tiles[i] = [4]int{r.X, r.Y, r.W, r.H}
	}
	b := packFrame(hdr, u.Atlas)
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
	if !c.tiles.Load() || prev == 0 {
		return f.b
	}
	if f.delta != nil && prev == f.base {
		return f.delta
	}
	if u := unionTiles(c.tileSrc, prev, f); u != nil {
		return u
	}
	return f.b
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
		if st.key {
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
		hdr := tileHeader{frameHeader: f.hdr, Base: from, Tiles: make([][4]int, len(rs))}
		for i, r := range rs {
			hdr.Tiles[i] = [4]int{r.X, r.Y, r.W, r.H}
		}
		if b := packFrame(hdr, atlas); len(b) < len(f.b) {
			out = b
			t.deltas.Add(1)
		}
	}
	t.unions[from] = out
	return out
}

// TileStats are a hub's tile encoder's totals: frames diffed, the time it
// took, and the updates made (the rest went whole).
type TileStats struct {
	Encoded, Deltas int64
	EncodeTime      time.Duration
}

// HubTileStats reads h's tile totals (zero without Config.Tiles).
func HubTileStats(h *Hub) TileStats {
	if h.tiles == nil {
		return TileStats{}
	}
	return TileStats{Encoded: h.tiles.encoded.Load(), Deltas: h.tiles.deltas.Load(), EncodeTime: time.Duration(h.tiles.encodeNs.Load())}
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
