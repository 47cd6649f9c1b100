package tiles

import (
	"bytes"
	"errors"
	"fmt"
	"math/bits"
	"slices"
)

// The coefficient path. A baseline JPEG (what Chromium's screencast sends)
// is entropy-decoded only, to its quantized DCT coefficients: no inverse
// DCT, no colour conversion, the most of a decode's cost. Two frames'
// blocks are equal exactly when their coefficients are (same quantization
// tables), and the changed tiles' blocks are written, as they are, into
// the atlas JPEG with the same quantization tables: no re-encoding loss,
// the tiles are Chromium's own pixels (what jpegtran does to crop).

// errUnsupported: not a JPEG the coefficient path takes (progressive,
// restart markers, not 3 components, unusual sampling); the pixel path
// takes it.
var errUnsupported = errors.New("tiles: JPEG not supported by the coefficient path")

type component struct {
	id, h, v, tq byte // sampling factors, quantization table
	td, ta       byte // Huffman tables (DC, AC)
}

// coefFrame is a decoded frame's coefficients.
type coefFrame struct {
	w, h         int
	comps        []component
	mcuW, mcuH   int // an MCU's pixels
	mcusX, mcusY int
	perMCU       int    // blocks per MCU
	dqt          []byte // the DQT segments, as they were
	// sums are a hash of each MCU's coefficients: what the next frame is
	// compared with. bsums are each block's (perMCU per MCU, in scan
	// order), flat whether it has no AC coefficient: a move by whole
	// blocks but not MCUs compares them (shift.go).
	sums  []uint64
	bsums []uint64
	flat  []bool
	// at is where each MCU starts in the scan: a changed one is decoded
	// again from there for the atlas, so no frame's coefficients are
	// kept (they would be 2.8 MB at 1280×720, 11 MB at twice that).
	at     []mcuStart
	scan   []byte
	dc, ac [4]*huffDec
}

// mcuStart is the scan reader's state and the DC predictions at an MCU.
type mcuStart struct {
	r    bitReader
	pred [3]int32
}

// mix adds x to the hash h (FNV-1a's step on a word, then a shift to
// spread the high bits).
func mix(h, x uint64) uint64 {
	h = (h ^ x) * 1099511628211
	return h ^ h>>29
}

// parseCoef entropy-decodes data into f (its buffers reused).
func parseCoef(data []byte, f *coefFrame) error {
	if len(data) < 4 || data[0] != 0xFF || data[1] != 0xD8 {
		return errors.New("tiles: not a JPEG")
	}
	f.comps, f.dqt = f.comps[:0], f.dqt[:0]
	f.dc, f.ac = [4]*huffDec{}, [4]*huffDec{}
	sof := false
	for i := 2; ; {
		if i+4 > len(data) || data[i] != 0xFF {
			return errors.New("tiles: bad JPEG marker")
		}
		m := data[i+1]
		if m == 0xFF { // fill byte
			i++
			continue
		}
		n := int(data[i+2])<<8 | int(data[i+3])
		if n < 2 || i+2+n > len(data) {
			return errors.New("tiles: bad JPEG segment")
		}
		seg := data[i+4 : i+2+n]
		switch {
		case m == 0xDB:
			f.dqt = append(f.dqt, data[i:i+2+n]...)
		case m == 0xC4:
			if err := parseDHT(seg, &f.dc, &f.ac); err != nil {
				return err
			}
		case m == 0xC0:
			if err := parseSOF(seg, f); err != nil {
				return err
			}
			sof = true
		case m >= 0xC1 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC:
			return errUnsupported // extended, progressive, lossless, arithmetic
		case m == 0xDD:
			if len(seg) >= 2 && (seg[0] != 0 || seg[1] != 0) {
				return errUnsupported // restart intervals
			}
		case m == 0xDA:
			if !sof {
				return errors.New("tiles: scan before frame header")
			}
			if err := parseSOS(seg, f); err != nil {
				return err
			}
			return f.decodeScan(data[i+2+n:])
		}
		i += 2 + n
	}
}

func parseSOF(seg []byte, f *coefFrame) error {
	if len(seg) < 6 || seg[0] != 8 {
		return errUnsupported
	}
	f.h, f.w = int(seg[1])<<8|int(seg[2]), int(seg[3])<<8|int(seg[4])
	nc := int(seg[5])
	if nc != 3 || len(seg) < 6+3*nc || f.w == 0 || f.h == 0 {
		return errUnsupported
	}
	for c := range nc {
		p := seg[6+3*c:]
		f.comps = append(f.comps, component{id: p[0], h: p[1] >> 4, v: p[1] & 15, tq: p[2]})
	}
	y := f.comps[0]
	if y.h < 1 || y.h > 2 || y.v < 1 || y.v > 2 {
		return errUnsupported
	}
	for _, c := range f.comps[1:] {
		if c.h != 1 || c.v != 1 {
			return errUnsupported
		}
	}
	f.mcuW, f.mcuH = 8*int(y.h), 8*int(y.v)
	f.mcusX, f.mcusY = (f.w+f.mcuW-1)/f.mcuW, (f.h+f.mcuH-1)/f.mcuH
	f.perMCU = int(y.h*y.v) + 2
	return nil
}

func parseSOS(seg []byte, f *coefFrame) error {
	if len(seg) < 1 || int(seg[0]) != len(f.comps) || len(seg) < 1+2*len(f.comps)+3 {
		return errUnsupported // a scan of some components only
	}
	for c := range f.comps {
		p := seg[1+2*c:]
		if p[0] != f.comps[c].id || p[1]>>4 > 3 || p[1]&15 > 3 {
			return errUnsupported
		}
		f.comps[c].td, f.comps[c].ta = p[1]>>4, p[1]&15
	}
	return nil
}

// huffDec decodes one Huffman table: codes up to lutBits long by look-up,
// longer ones canonically.
type huffDec struct {
	lut     [1 << lutBits]uint16 // length<<8 | value; 0: longer code
	maxcode [17]int32
	valptr  [17]int32
	mincode [17]int32
	vals    []byte
}

const lutBits = 9

func parseDHT(seg []byte, dc, ac *[4]*huffDec) error {
	for len(seg) > 0 {
		if len(seg) < 17 {
			return errors.New("tiles: bad DHT")
		}
		class, id := seg[0]>>4, seg[0]&15
		if class > 1 || id > 3 {
			return errors.New("tiles: bad DHT table")
		}
		total := 0
		for _, n := range seg[1:17] {
			total += int(n)
		}
		if len(seg) < 17+total {
			return errors.New("tiles: short DHT")
		}
		h := &huffDec{vals: seg[17 : 17+total]}
		code, k := int32(0), int32(0)
		for l := 1; l <= 16; l++ {
			n := int32(seg[l])
			h.valptr[l], h.mincode[l], h.maxcode[l] = k, code, -1
			for range n {
				if l <= lutBits {
					first := code << (lutBits - l)
					for x := range int32(1) << (lutBits - l) {
						h.lut[first+x] = uint16(l)<<8 | uint16(h.vals[k])
					}
				}
				k++
				code++
			}
			if n > 0 {
				h.maxcode[l] = code - 1
			}
			code <<= 1
		}
		if class == 0 {
			dc[id] = h
		} else {
			ac[id] = h
		}
		seg = seg[17+total:]
	}
	return nil
}

// bitReader reads entropy-coded bits, taking out stuffed zero bytes; at
// a marker it reads zeros.
type bitReader struct {
	data []byte
	pos  int
	acc  uint64 // next bits at the top
	n    uint
}

func (r *bitReader) fill() {
	for r.n <= 56 {
		var b byte
		if r.pos < len(r.data) {
			b = r.data[r.pos]
			if b == 0xFF {
				if r.pos+1 < len(r.data) && r.data[r.pos+1] == 0 {
					r.pos += 2
				} else {
					b = 0 // a marker: the scan ended
				}
			} else {
				r.pos++
			}
		}
		r.acc |= uint64(b) << (56 - r.n)
		r.n += 8
	}
}

func (r *bitReader) decode(h *huffDec) (byte, error) {
	if r.n < 16 {
		r.fill()
	}
	if e := h.lut[r.acc>>(64-lutBits)]; e != 0 {
		l := uint(e >> 8)
		r.acc <<= l
		r.n -= l
		return byte(e), nil
	}
	for l := lutBits + 1; l <= 16; l++ {
		code := int32(r.acc >> (64 - uint(l)))
		if code <= h.maxcode[l] {
			r.acc <<= uint(l)
			r.n -= uint(l)
			return h.vals[h.valptr[l]+code-h.mincode[l]], nil
		}
	}
	return 0, errors.New("tiles: bad Huffman code")
}

// receive reads an s-bit value and extends its sign (F.2.2.1).
func (r *bitReader) receive(s byte) int32 {
	if s == 0 {
		return 0
	}
	if r.n < uint(s) {
		r.fill()
	}
	v := int32(r.acc >> (64 - uint(s)))
	r.acc <<= uint(s)
	r.n -= uint(s)
	if v < 1<<(s-1) {
		v += -1<<s + 1
	}
	return v
}

// decodeScan reads the scan: each MCU's start and hash.
func (f *coefFrame) decodeScan(data []byte) error {
	for _, c := range f.comps {
		if f.dc[c.td] == nil || f.ac[c.ta] == nil {
			return errors.New("tiles: scan uses a missing Huffman table")
		}
	}
	mcus := f.mcusX * f.mcusY
	if cap(f.sums) < mcus || cap(f.bsums) < mcus*f.perMCU {
		f.sums, f.at = make([]uint64, mcus), make([]mcuStart, mcus)
		f.bsums, f.flat = make([]uint64, mcus*f.perMCU), make([]bool, mcus*f.perMCU)
	}
	f.sums, f.at, f.scan = f.sums[:mcus], f.at[:mcus], data
	f.bsums, f.flat = f.bsums[:mcus*f.perMCU], f.flat[:mcus*f.perMCU]
	var st mcuStart
	st.r.data = data
	var blk [64]int16
	for m := range mcus {
		f.at[m] = st
		o := m * f.perMCU
		sum, err := f.decodeMCUBlocks(&st, func(int) []int16 { clear(blk[:]); return blk[:] }, f.bsums[o:o+f.perMCU], f.flat[o:o+f.perMCU])
		if err != nil {
			return err
		}
		f.sums[m] = sum
	}
	return nil
}

// decodeMCU decodes the MCU at st (which it moves past it), each block
// into the slice block(i) gives, and returns the MCU's hash.
func (f *coefFrame) decodeMCU(st *mcuStart, block func(i int) []int16) (uint64, error) {
	return f.decodeMCUBlocks(st, block, nil, nil)
}

// decodeMCUBlocks is decodeMCU that also fills bs with each block's hash
// and flat with whether it has no AC coefficient (a uniform block), if
// they are not nil (perMCU long).
func (f *coefFrame) decodeMCUBlocks(st *mcuStart, block func(i int) []int16, bs []uint64, flat []bool) (uint64, error) {
	r := &st.r
	sum := uint64(14695981039346656037)
	i := 0
	for ci, c := range f.comps {
		hd, ha := f.dc[c.td], f.ac[c.ta]
		for range int(c.h) * int(c.v) {
			blk := block(i)
			t, err := r.decode(hd)
			if err != nil {
				return 0, fmt.Errorf("tiles: DC: %w", err)
			}
			if t > 11 {
				return 0, errors.New("tiles: bad DC category")
			}
			st.pred[ci] += r.receive(t)
			blk[0] = int16(st.pred[ci])
			bsum := mix(14695981039346656037, uint64(uint16(blk[0]))|1<<20) // a block's start
			uniform := true
			for k := 1; k < 64; {
				rs, err := r.decode(ha)
				if err != nil {
					return 0, err
				}
				run, s := int(rs>>4), rs&15
				if s == 0 {
					if run != 15 {
						break // end of block
					}
					k += 16
					continue
				}
				k += run
				if k > 63 {
					return 0, errors.New("tiles: coefficient past the block")
				}
				blk[k] = int16(r.receive(s))
				bsum = mix(bsum, uint64(k)<<16|uint64(uint16(blk[k])))
				uniform = false
				k++
			}
			if bs != nil {
				bs[i], flat[i] = bsum, uniform
			}
			sum = mix(sum, bsum)
			i++
		}
	}
	return sum, nil
}

// compatible: b's tiles can be compared with a's block for block.
func (a *coefFrame) compatible(b *coefFrame) bool {
	return a.w == b.w && a.h == b.h && a.mcuW == b.mcuW && a.mcuH == b.mcuH &&
		slices.Equal(a.comps, b.comps) && bytes.Equal(a.dqt, b.dqt)
}

// sameTile compares tile r's blocks in a and b (compatible), by their
// MCUs' hashes.
func (a *coefFrame) sameTile(b *coefFrame, r Rect) bool {
	x0, y0 := r.X/a.mcuW, r.Y/a.mcuH
	x1, y1 := min(a.mcusX, (r.X+r.W+a.mcuW-1)/a.mcuW), min(a.mcusY, (r.Y+r.H+a.mcuH-1)/a.mcuH)
	for my := y0; my < y1; my++ {
		lo, hi := my*a.mcusX+x0, my*a.mcusX+x1
		if !slices.Equal(a.sums[lo:hi], b.sums[lo:hi]) {
			return false
		}
	}
	return true
}

// atlas writes the tiles rs of f into one Size-wide JPEG, slot i = rs[i],
// with f's quantization tables and the standard Huffman tables (which
// code every value, whatever tables f came with). MCUs past the frame's
// edge are blank.
func (f *coefFrame) atlas(out *bytes.Buffer, rs []Rect) { f.atlasCoarse(out, rs, nil, nil) }

// atlasCoarse is atlas with the tiles rs[i] for which coarse[i] holds
// coarsened to tc's steps but written with f's own tables (coarsen): one
// atlas, one table per component, yet a busy tile costs ~0.6× its bytes.
func (f *coefFrame) atlasCoarse(out *bytes.Buffer, rs []Rect, coarse []bool, tc *tierCodec) {
	out.Reset()
	f.tierHeader(out, f.dqt, Size, len(rs)*Size)

	w := bitWriter{out: out}
	var pred [3]int32
	per := f.perMCU * 64
	blank, mcuBuf := make([]int16, per), make([]int16, per)
	for i, r := range rs {
		rough := tc != nil && i < len(coarse) && coarse[i]
		for my := range Size / f.mcuH {
			for mx := range Size / f.mcuW {
				sx, sy := r.X/f.mcuW+mx, r.Y/f.mcuH+my
				mcu, inside := blank, sx < f.mcusX && sy < f.mcusY
				if inside {
					// Decoded again: the scan read it without error once.
					clear(mcuBuf)
					st := f.at[sy*f.mcusX+sx]
					_, _ = f.decodeMCU(&st, func(i int) []int16 { return mcuBuf[i*64 : i*64+64] })
					mcu = mcuBuf
				}
				off := 0
				for ci, c := range f.comps {
					tab := &stdTables[min(ci, 1)]
					for range int(c.h) * int(c.v) {
						if rough && inside {
							tc.rq[ci].coarsen(mcu[off : off+64])
						}
						w.block(mcu[off:off+64], &pred[ci], tab)
						off += 64
					}
				}
			}
		}
	}
	w.flush()
	out.Write([]byte{0xFF, 0xD9})
}

// bitWriter writes entropy-coded bits, stuffing a zero after each 0xFF.
type bitWriter struct {
	out *bytes.Buffer
	acc uint64
	n   uint
}

func (w *bitWriter) write(code uint32, length uint8) {
	w.acc = w.acc<<length | uint64(code)
	w.n += uint(length)
	for w.n >= 8 {
		b := byte(w.acc >> (w.n - 8))
		w.out.WriteByte(b)
		if b == 0xFF {
			w.out.WriteByte(0)
		}
		w.n -= 8
	}
	w.acc &= 1<<w.n - 1
}

func (w *bitWriter) flush() {
	if w.n > 0 {
		w.write(1<<(8-w.n)-1, uint8(8-w.n)) // pad with ones
	}
}

// value writes v's category code then its bits (F.1.2.1).
func (w *bitWriter) value(t *huffEnc, sym byte, v int32, s uint8) {
	w.write(t.code[sym], t.len[sym])
	if s > 0 {
		if v < 0 {
			v--
		}
		w.write(uint32(v)&(1<<s-1), s)
	}
}

func (w *bitWriter) block(blk []int16, pred *int32, t *encTables) {
	d := int32(blk[0]) - *pred
	*pred = int32(blk[0])
	s := category(d)
	w.value(&t.dc, s, d, s)
	run := 0
	for k := 1; k < 64; k++ {
		v := int32(blk[k])
		if v == 0 {
			run++
			continue
		}
		for run > 15 {
			w.write(t.ac.code[0xF0], t.ac.len[0xF0]) // sixteen zeros
			run -= 16
		}
		s := category(v)
		w.value(&t.ac, byte(run)<<4|s, v, s)
		run = 0
	}
	if run > 0 {
		w.write(t.ac.code[0], t.ac.len[0]) // end of block
	}
}

func category(v int32) uint8 {
	if v < 0 {
		v = -v
	}
	return uint8(bits.Len32(uint32(v)))
}

type huffEnc struct {
	code [256]uint32
	len  [256]uint8
}

type encTables struct{ dc, ac huffEnc }

// The standard tables (JPEG K.3–K.6): luma, then chroma.
var stdSpecs = [4]struct {
	counts [16]byte
	vals   []byte
}{
	{[16]byte{0, 1, 5, 1, 1, 1, 1, 1, 1}, []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}},
	{[16]byte{0, 2, 1, 3, 3, 2, 4, 3, 5, 5, 4, 4, 0, 0, 1, 125}, []byte{
		0x01, 0x02, 0x03, 0x00, 0x04, 0x11, 0x05, 0x12, 0x21, 0x31, 0x41, 0x06, 0x13, 0x51, 0x61, 0x07,
		0x22, 0x71, 0x14, 0x32, 0x81, 0x91, 0xa1, 0x08, 0x23, 0x42, 0xb1, 0xc1, 0x15, 0x52, 0xd1, 0xf0,
		0x24, 0x33, 0x62, 0x72, 0x82, 0x09, 0x0a, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x25, 0x26, 0x27, 0x28,
		0x29, 0x2a, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49,
		0x4a, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69,
		0x6a, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89,
		0x8a, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9a, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7,
		0xa8, 0xa9, 0xaa, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xc2, 0xc3, 0xc4, 0xc5,
		0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9, 0xda, 0xe1, 0xe2,
		0xe3, 0xe4, 0xe5, 0xe6, 0xe7, 0xe8, 0xe9, 0xea, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8,
		0xf9, 0xfa}},
	{[16]byte{0, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1}, []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}},
	{[16]byte{0, 2, 1, 2, 4, 4, 3, 4, 7, 5, 4, 4, 0, 1, 2, 119}, []byte{
		0x00, 0x01, 0x02, 0x03, 0x11, 0x04, 0x05, 0x21, 0x31, 0x06, 0x12, 0x41, 0x51, 0x07, 0x61, 0x71,
		0x13, 0x22, 0x32, 0x81, 0x08, 0x14, 0x42, 0x91, 0xa1, 0xb1, 0xc1, 0x09, 0x23, 0x33, 0x52, 0xf0,
		0x15, 0x62, 0x72, 0xd1, 0x0a, 0x16, 0x24, 0x34, 0xe1, 0x25, 0xf1, 0x17, 0x18, 0x19, 0x1a, 0x26,
		0x27, 0x28, 0x29, 0x2a, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48,
		0x49, 0x4a, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68,
		0x69, 0x6a, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87,
		0x88, 0x89, 0x8a, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9a, 0xa2, 0xa3, 0xa4, 0xa5,
		0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xc2, 0xc3,
		0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9, 0xda,
		0xe2, 0xe3, 0xe4, 0xe5, 0xe6, 0xe7, 0xe8, 0xe9, 0xea, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8,
		0xf9, 0xfa}},
}

// stdTables are the standard tables' codes (luma, chroma); stdDHT their
// DHT segment (DC 0, AC 0, DC 1, AC 1).
var stdTables, stdDHT = func() ([2]encTables, []byte) {
	var t [2]encTables
	dht := []byte{0xFF, 0xC4, 0, 0}
	for i, s := range stdSpecs {
		e := &t[i/2].dc
		class := byte(0)
		if i%2 == 1 {
			e, class = &t[i/2].ac, 1
		}
		dht = append(append(append(dht, class<<4|byte(i/2)), s.counts[:]...), s.vals...)
		code, k := uint32(0), 0
		for l := 1; l <= 16; l++ {
			for range s.counts[l-1] {
				e.code[s.vals[k]], e.len[s.vals[k]] = code, uint8(l)
				code++
				k++
			}
			code <<= 1
		}
	}
	n := len(dht) - 2
	dht[2], dht[3] = byte(n>>8), byte(n)
	return t, dht
}()
