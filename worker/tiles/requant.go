package tiles

import (
	"bytes"
	"math/bits"
)

// Coarser tiers, in the coefficient domain (issue 39, "bandwidth
// adaptation per viewer"). A viewer on a slow link gets the same tiles
// (or the same frame) with coarser quantization: each block's quantized
// coefficients are requantized, newCoef = round(coef × oldStep / newStep)
// per position, and entropy-coded again with the standard Huffman tables.
// No inverse DCT, no pixel work: a tier's atlas costs 0.5–0.9× the CPU
// of Atlas's (fewer bits to write), a whole frame's tier 2–2.6× what
// Encode spends reading the frame, 0.3–0.45× decoding it and encoding
// its pixels again (BenchmarkTier, 1280×720). Each is encoded once per
// update for every viewer on that tier.
//
// The coarser steps: for each table position, the larger of the frame's
// own step and the step libjpeg's quality tierQuality[tier] gives there
// (jpeg_set_quality: the Annex K tables scaled by 5000/Q below 50, 200-2Q
// from 50, rounded, clamped to 1..255). Not the frame's steps times a
// factor k, because:
//   - a tier means one picture quality whatever the frame came with: the
//     screencast's grade already lowers the frames' quality when a worker
//     is short of CPU, and a factor would compound with it (a Q50 frame
//     ×4 is about Q12, unreadable text), while a frame already coarser
//     than the tier just goes as it is;
//   - the Annex K tables' shape (chroma and high frequencies coarser than
//     the luma's low ones) is where a lower quality loses least to the
//     eye; a factor keeps whatever shape the frame's tables have (flat
//     at Q100: ×4 everywhere would still spend bits on the finest detail);
//   - never finer than the frame (the max): a finer step adds bits and no
//     information. The error against the frame's picture is then at most
//     half the tier's step at each coefficient, what encoding the frame's
//     picture at the tier's quality loses (requant_test.go measures
//     both).
//
// Chromium's screencast JPEGs are libjpeg-turbo's at the screencast's
// quality (80 by default) with the Annex K tables, so there the tier's
// tables are exactly libjpeg's at its quality. Their Huffman tables are
// optimized, the tiers' the standard ones: 3.6% more bytes at the same
// quantization; optimized tables (a second pass) would save at most 4%
// of tier 1's bytes and 6% of tier 2's (the symbols' entropy), measured
// on the frame below.

// The tiers: what AtlasTier and FrameTier take. The costs are in bytes
// relative to tier 0's (the frame as Chromium sent it; Atlas's tiles),
// measured on a Chromium frame of a text page, 1280×720 at the
// screencast's quality 80 (TestTierBytesChromium: the frame 201 kB, an
// atlas of 20 text tiles 22 kB), and the error is the mean absolute
// difference from the frame's picture per RGB channel (0..255), with
// what the pixel path's re-encoding at the tier's quality loses.
const (
	// TierFrame: the frame's own quantization (Atlas, or the frame
	// Chromium sent).
	TierFrame = 0
	// TierLow: at most libjpeg quality 50 (the Annex K tables): 0.66×
	// the frame's bytes, 0.65× the atlas'; error 4.2 (re-encoding 3.9).
	// Text looks as sharp at 1:1.
	TierLow = 1
	// TierLowest: at most libjpeg quality 25 (twice the Annex K steps):
	// 0.48× the frame's bytes, 0.47× the atlas'; error 5.2 (re-encoding
	// 5.5). Text readable, ringing around glyphs.
	TierLowest = 2
	// Tiers is how many tiers there are.
	Tiers = 3
)

// tierQuality is each tier's libjpeg quality (0: the frame's own).
var tierQuality = [Tiers]int{0, 50, 25}

// annexK are JPEG Annex K's luma and chroma quantization tables, in
// zig-zag order (as image/jpeg's writer keeps them).
var annexK = [2][64]byte{
	{
		16, 11, 12, 14, 12, 10, 16, 14, 13, 14, 18, 17, 16, 19, 24, 40,
		26, 24, 22, 22, 24, 49, 35, 37, 29, 40, 58, 51, 61, 60, 57, 51,
		56, 55, 64, 72, 92, 78, 64, 68, 87, 69, 55, 56, 80, 109, 81, 87,
		95, 98, 103, 104, 103, 62, 77, 113, 121, 112, 100, 120, 92, 101, 103, 99,
	},
	{
		17, 18, 18, 24, 21, 24, 47, 26, 26, 47, 99, 66, 56, 66, 99, 99,
		99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99,
		99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99,
		99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99,
	},
}

// libjpegStep is the step libjpeg's quality q (1..100) makes of the
// Annex K step base (jpeg_quality_scaling, jpeg_add_quant_table with
// force_baseline).
func libjpegStep(base byte, q int) uint16 {
	scale := 200 - 2*q
	if q < 50 {
		scale = 5000 / q
	}
	return uint16(min(max((int(base)*scale+50)/100, 1), 255))
}

// quantTables are a frame's quantization tables by id, in zig-zag order.
type quantTables struct {
	q   [4][64]uint16
	set [4]bool
}

// parseDQT reads DQT segments as coefFrame.dqt keeps them (markers and
// lengths included); a later table of an id replaces an earlier one.
func parseDQT(dqt []byte) (t quantTables, ok bool) {
	for len(dqt) > 0 {
		if len(dqt) < 4 || dqt[0] != 0xFF || dqt[1] != 0xDB {
			return t, false
		}
		n := int(dqt[2])<<8 | int(dqt[3])
		if n < 2 || len(dqt) < 2+n {
			return t, false
		}
		seg := dqt[4 : 2+n]
		for len(seg) > 0 {
			pq, id := seg[0]>>4, seg[0]&15
			size := 1 + 64<<pq
			if pq > 1 || id > 3 || len(seg) < size {
				return t, false
			}
			for k := range 64 {
				if pq == 0 {
					t.q[id][k] = uint16(seg[1+k])
				} else {
					t.q[id][k] = uint16(seg[1+2*k])<<8 | uint16(seg[2+2*k])
				}
				if t.q[id][k] == 0 {
					return t, false
				}
			}
			t.set[id] = true
			seg = seg[size:]
		}
		dqt = dqt[2+n:]
	}
	return t, true
}

// appendDQT appends one DQT segment with the tables t has set (16-bit
// entries for a table with a step over 255).
func (t *quantTables) appendDQT(b []byte) []byte {
	start := len(b)
	b = append(b, 0xFF, 0xDB, 0, 0)
	for id := range t.set {
		if !t.set[id] {
			continue
		}
		wide := byte(0)
		for _, s := range t.q[id] {
			if s > 255 {
				wide = 1
			}
		}
		b = append(b, wide<<4|byte(id))
		for _, s := range t.q[id] {
			if wide == 1 {
				b = append(b, byte(s>>8))
			}
			b = append(b, byte(s))
		}
	}
	n := len(b) - start - 2
	b[start+2], b[start+3] = byte(n>>8), byte(n)
	return b
}

// requant maps one component's coefficients from the frame's steps to
// the tier's.
type requant struct {
	from, to [64]int32
	// mul and shift divide by to without a division: x/to is
	// x*mul>>shift for every x < 1<<requantBits (Granlund and
	// Montgomery's round-up method, mul = ⌈2^shift/to⌉, shift =
	// requantBits + ⌈log2 to⌉; mul < 2^(requantBits+1), so x*mul < 2^63).
	mul   [64]uint64
	shift [64]uint8
	same  bool // to == from: nothing to do
}

// requantBits bounds |coef|×from + to/2: a coefficient is an int16 (at
// most 2047 in a valid frame), a step at most 65535.
const requantBits = 31

func (r *requant) set(from, to [64]int32) {
	r.from, r.to, r.same = from, to, from == to
	for k, d := range to {
		l := bits.Len32(uint32(d - 1)) // ⌈log2 d⌉
		r.shift[k] = uint8(requantBits + l)
		r.mul[k] = (1<<r.shift[k] + uint64(d) - 1) / uint64(d)
	}
}

// block requantizes blk (zig-zag order) in place: round half away from
// zero of coef × from / to. to ≥ from, so no value grows out of its
// category's range.
func (r *requant) block(blk []int16) {
	if r.same {
		return
	}
	blk = blk[:64]
	for k, c := range blk {
		if c == 0 {
			continue
		}
		n := int64(c)
		if n < 0 {
			n = -n
		}
		x := uint64(n*int64(r.from[k]) + int64(r.to[k]/2))
		q := int16(x * r.mul[k] >> r.shift[k])
		if c < 0 {
			q = -q
		}
		blk[k] = q
	}
}

// tierCodec is what writing f at a tier needs: the tier's DQT segment and each
// component's requantization.
type tierCodec struct {
	dqt []byte
	rq  [3]requant
}

// asIs: the tier changes no step, f is as coarse already.
func (tr *tierCodec) asIs() bool { return tr.rq[0].same && tr.rq[1].same && tr.rq[2].same }

// tierOf makes f's tier t (1..Tiers-1); ok false if f's tables are not
// readable or a component's table is missing.
func (f *coefFrame) tierOf(t int) (tr tierCodec, ok bool) {
	own, ok := parseDQT(f.dqt)
	if !ok || t <= 0 || t >= Tiers || len(f.comps) != 3 {
		return tr, false
	}
	// Each table's target: the Annex K table of its components' kind,
	// the luma's if one table serves luma and chroma (the finer).
	var target [4]*[64]byte
	for ci, c := range f.comps {
		if c.tq > 3 || !own.set[c.tq] {
			return tr, false
		}
		if ci == 0 || target[c.tq] == nil {
			target[c.tq] = &annexK[min(ci, 1)]
		}
	}
	out := quantTables{}
	for id, base := range target {
		if base == nil {
			continue
		}
		out.set[id] = true
		for k := range 64 {
			out.q[id][k] = max(own.q[id][k], libjpegStep(base[k], tierQuality[t]))
		}
	}
	for ci, c := range f.comps {
		var from, to [64]int32
		for k := range 64 {
			from[k], to[k] = int32(own.q[c.tq][k]), int32(out.q[c.tq][k])
		}
		tr.rq[ci].set(from, to)
	}
	tr.dqt = out.appendDQT(nil)
	return tr, true
}

// tierHeader writes a baseline JPEG's markers up to its scan's data: SOI,
// dqt, a w×h frame with f's components and sampling, the standard
// Huffman tables, the scan header (as coefFrame.atlas writes them).
func (f *coefFrame) tierHeader(out *bytes.Buffer, dqt []byte, w, h int) {
	out.Write([]byte{0xFF, 0xD8})
	out.Write(dqt)
	nc := len(f.comps)
	out.Write([]byte{0xFF, 0xC0, 0, byte(8 + 3*nc), 8, byte(h >> 8), byte(h), byte(w >> 8), byte(w), byte(nc)})
	for _, c := range f.comps {
		out.Write([]byte{c.id, c.h<<4 | c.v, c.tq})
	}
	out.Write(stdDHT)
	out.Write([]byte{0xFF, 0xDA, 0, byte(6 + 2*nc), byte(nc)})
	for i, c := range f.comps {
		t := byte(0x00)
		if i > 0 {
			t = 0x11
		}
		out.Write([]byte{c.id, t})
	}
	out.Write([]byte{0, 63, 0})
}

// tierWriter entropy-codes requantized MCUs.
type tierWriter struct {
	f    *coefFrame
	tr   *tierCodec
	w    bitWriter
	pred [3]int32
}

// mcu requantizes and writes one MCU's blocks (f.perMCU × 64, in scan
// order), which it changes.
func (tw *tierWriter) mcu(blks []int16) {
	off := 0
	for ci, c := range tw.f.comps {
		tab, rq := &stdTables[min(ci, 1)], &tw.tr.rq[ci]
		for range int(c.h) * int(c.v) {
			b := blks[off : off+64]
			rq.block(b)
			tw.w.block(b, &tw.pred[ci], tab)
			off += 64
		}
	}
}

// tilesOK: rs are tiles of f an atlas can hold (some, not too many, each
// starting on an MCU within the frame).
func (f *coefFrame) tilesOK(rs []Rect) bool {
	if len(rs) == 0 || len(rs) > maxAtlasTiles {
		return false
	}
	for _, r := range rs {
		if r.X < 0 || r.Y < 0 || r.X >= f.w || r.Y >= f.h || r.X%f.mcuW != 0 || r.Y%f.mcuH != 0 {
			return false
		}
	}
	return true
}

// atlasTier is coefFrame.atlas at the tier tr: the tiles rs (tilesOK) in
// one Size-wide column, slot i = rs[i], MCUs past the frame's edge blank.
func (f *coefFrame) atlasTier(out *bytes.Buffer, rs []Rect, tr *tierCodec) {
	out.Reset()
	// About the frame's bytes per MCU (a tier is smaller).
	out.Grow(len(rs) * (Size / f.mcuW) * (Size / f.mcuH) * len(f.scan) / len(f.at))
	f.tierHeader(out, tr.dqt, Size, len(rs)*Size)
	tw := tierWriter{f: f, tr: tr, w: bitWriter{out: out}}
	per := f.perMCU * 64
	mcuBuf := make([]int16, per)
	block := func(i int) []int16 { return mcuBuf[i*64 : i*64+64] }
	for _, r := range rs {
		for my := range Size / f.mcuH {
			for mx := range Size / f.mcuW {
				sx, sy := r.X/f.mcuW+mx, r.Y/f.mcuH+my
				clear(mcuBuf)
				if sx < f.mcusX && sy < f.mcusY {
					// Decoded again: the scan read it without error once.
					st := f.at[sy*f.mcusX+sx]
					_, _ = f.decodeMCU(&st, block)
				}
				tw.mcu(mcuBuf)
			}
		}
	}
	tw.w.flush()
	out.Write([]byte{0xFF, 0xD9})
}

// frameTier writes the whole of f at tier t: f's size and sampling, its
// MCUs in raster order (its scan read once more from the start); also
// if the tier is f as it is (tierOf(t).asIs(): the same picture).
func (f *coefFrame) frameTier(out *bytes.Buffer, t int) bool {
	tr, ok := f.tierOf(t)
	if !ok || len(f.at) == 0 {
		return false
	}
	out.Reset()
	out.Grow(len(f.scan)) // a tier is smaller than the frame
	f.tierHeader(out, tr.dqt, f.w, f.h)
	tw := tierWriter{f: f, tr: &tr, w: bitWriter{out: out}}
	mcuBuf := make([]int16, f.perMCU*64)
	block := func(i int) []int16 { return mcuBuf[i*64 : i*64+64] }
	st := f.at[0]
	for range f.mcusX * f.mcusY {
		clear(mcuBuf)
		if _, err := f.decodeMCU(&st, block); err != nil {
			return false // the scan read it without error once
		}
		tw.mcu(mcuBuf)
	}
	tw.w.flush()
	out.Write([]byte{0xFF, 0xD9})
	return true
}

// AtlasTier is Atlas at a tier: the tiles rs of the last frame Encode
// read, each block requantized to the tier's coarser steps (TierFrame,
// or a frame as coarse as the tier already: Atlas itself). Encoded once,
// it serves every viewer on that tier. ok false: no frame on the
// coefficient path (see Atlas), no tiles, an unknown tier, or a Rect
// that is not a tile of the frame.
func (e *Encoder) AtlasTier(rs []Rect, tier int) (atlas []byte, ok bool) {
	if tier == TierFrame {
		return e.Atlas(rs)
	}
	f := e.prevC
	if f == nil || !f.tilesOK(rs) {
		return nil, false
	}
	tr, ok := f.tierOf(tier)
	if !ok {
		return nil, false
	}
	if tr.asIs() {
		return e.Atlas(rs)
	}
	var b bytes.Buffer
	f.atlasTier(&b, rs, &tr)
	return b.Bytes(), true
}

// FrameTier is the whole last frame Encode read at a coarser tier: a
// full-size JPEG (a keyframe for a slow viewer). ok false: send the
// frame as it is: TierFrame, a frame as coarse as the tier already (the
// same picture, in no more bytes), an unknown
// tier, or no frame on the coefficient path (the pixel path keeps none).
func (e *Encoder) FrameTier(tier int) (frame []byte, ok bool) {
	if e.prevC == nil || tier == TierFrame {
		return nil, false
	}
	if tr, ok := e.prevC.tierOf(tier); !ok || tr.asIs() {
		return nil, false
	}
	var b bytes.Buffer
	if !e.prevC.frameTier(&b, tier) {
		return nil, false
	}
	return b.Bytes(), true
}
