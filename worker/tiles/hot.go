package tiles

import "math/bits"

// Quality by how often a tile changes (issue 39; KasmVNC does the same
// per rectangle). A tile that changed in at least hotFrames of the last
// 8 frames (a video, an animation) is sent coarsened to TierLow's steps:
// each coefficient rounded to the coarser step and written back in the
// frame's own units, so the atlas keeps one quantization table (~0.6×
// the bytes of natural content, 0.85–0.9× of text). The tile is then
// near: once it stops changing, the next frame sends it exact, or
// Repair does when the page rests. Moves (a scroll) are not busy tiles:
// their history restarts.
const hotFrames = 4

// history shifts every tile's change history by a frame (cols*rows
// tiles; a new size or a keyframe starts it again).
func (e *Encoder) history(n int, reset bool) {
	if reset || len(e.hot) != n {
		e.hot = make([]uint8, n)
		return
	}
	for i := range e.hot {
		e.hot[i] <<= 1
	}
}

// busy reports whether tile i changed in hotFrames of the last 8
// frames, this one (which changed it) included.
func (e *Encoder) busy(i int) bool {
	return i < len(e.hot) && bits.OnesCount8(e.hot[i]) >= hotFrames
}

// coarsen rounds blk (zig-zag order) to r's coarser steps and back to
// its own: a coefficient c becomes round(round(c·from/to)·to/from).
func (r *requant) coarsen(blk []int16) {
	if r.same {
		return
	}
	orig := [64]int16(blk[:64])
	r.block(blk)
	for k, q := range blk[:64] {
		if q == 0 || orig[k] == 0 {
			continue
		}
		v, d := int64(q)*int64(r.to[k]), int64(r.from[k])
		if v >= 0 {
			v = (v + d/2) / d
		} else {
			v = -((-v + d/2) / d)
		}
		if k > 0 { // an AC value's category is at most 10 in baseline JPEG
			v = max(-1023, min(1023, v))
		}
		blk[k] = int16(v)
	}
}
