package tiles

import (
	"bytes"
	"fmt"
	"image"
	"image/jpeg"
	"slices"
)

// Moves: a scroll shifts most of the screen by the scroll offset, which
// a plain diff sees as every tile changed (a keyframe). With the offset
// known (the screencast reports the page's scroll), the screen is moved
// by it and a tile is sent only if it does not equal its moved-in
// content: the strip scrolled into view, fixed elements, whatever the
// page changed meanwhile.
//
// A move by whole MCUs (16 pixels in 4:2:0) lines the blocks up, and the
// MCU hashes decide exactly. Any other move (a mouse notch is 120
// pixels) decodes the two frames and compares pixels: JPEG blocks that do
// not line up decode to slightly different pixels for the same content,
// so a tile within a small block error counts as near, not changed. Near
// tiles are kept (Encoder.near) and sent again from a later frame: with
// the next frame that does not move, or by Repair once the page rests.

// match is how a tile of a frame compares with what a screen shows there.
type match uint8

const (
	matchChanged match = iota
	matchExact
	// matchNear: equal within nearSAD per 8×8 block, not exactly.
	matchNear
)

func exactOr(same bool) match {
	if same {
		return matchExact
	}
	return matchChanged
}

// nearSAD is the largest sum of absolute differences over an 8×8 block
// (luma, or each chroma plane) that still counts as the same content
// moved: a mean of 3 levels. Realignment noise of a q80 text page is
// mostly 0, at most 1–2 on average at glyph edges; a caret (a 1-pixel
// stroke of 8 rows) is ~1600, a new period ~800. A smaller change is
// left for Repair.
const nearSAD = 3 * 64

// nearChromaSAD is nearSAD for a chroma plane, looser: a chroma block
// spans 16 pixels, so a move by 8 (120 pixels, a mouse notch) lines luma
// up but not chroma, and coloured glyphs then differ by a mean of up to
// ~10 after quantization. A change of colour alone, under it, is rare
// and left for Repair; real changes move luma.
const nearChromaSAD = 12 * 64

// movedCoef is the comparison for a move mv from prev to cur (compatible
// coefficient frames): by MCU hashes if mv lines the MCUs up, else by
// the pixels of both frames (prevImg if a move decoded it already, else
// prevData), decoded here; cur's pixels are kept for the next move.
func (e *Encoder) movedCoef(prev, cur *coefFrame, prevData []byte, prevImg *image.YCbCr, frame []byte, mv image.Point) (func(Rect) match, error) {
	if mv.X%cur.mcuW == 0 && mv.Y%cur.mcuH == 0 {
		return func(r Rect) match { return exactOr(prev.sameTileMoved(cur, r, mv)) }, nil
	}
	if mv.X%8 == 0 && mv.Y%8 == 0 && cur.is420() {
		return func(r Rect) match { return prev.blocksMoved(cur, r, mv) }, nil
	}
	var err error
	if prevImg == nil {
		if prevImg, err = decodeYCbCr(prevData); err != nil {
			return nil, err
		}
	}
	curImg, err := decodeYCbCr(frame)
	if err != nil {
		return nil, err
	}
	e.prevImg = curImg
	return func(r Rect) match { return movedTile(prevImg, curImg, r, mv) }, nil
}

func decodeYCbCr(data []byte) (*image.YCbCr, error) {
	img, err := jpeg.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("tiles: decode frame: %w", err)
	}
	m, ok := img.(*image.YCbCr)
	if !ok {
		return nil, ErrFormat
	}
	return m, nil
}

// sameTileMoved compares tile r of b with a's pixels at r moved by mv
// (whole MCUs), by MCU hashes: false if any of it comes from outside a's
// picture (an edge MCU's padding is not on a screen).
func (a *coefFrame) sameTileMoved(b *coefFrame, r Rect, mv image.Point) bool {
	if r.X+mv.X < 0 || r.Y+mv.Y < 0 || r.X+r.W+mv.X > a.w || r.Y+r.H+mv.Y > a.h {
		return false
	}
	dx, dy := mv.X/a.mcuW, mv.Y/a.mcuH
	x0, y0 := r.X/a.mcuW, r.Y/a.mcuH
	x1, y1 := min(a.mcusX, (r.X+r.W+a.mcuW-1)/a.mcuW), min(a.mcusY, (r.Y+r.H+a.mcuH-1)/a.mcuH)
	for my := y0; my < y1; my++ {
		lo, hi := my*a.mcusX+x0, my*a.mcusX+x1
		src := (my+dy)*a.mcusX + x0 + dx
		if !slices.Equal(b.sums[lo:hi], a.sums[src:src+hi-lo]) {
			return false
		}
	}
	return true
}

// is420: 4:2:0, luma first, blocks in the MCU as blocksMoved reads them.
func (f *coefFrame) is420() bool {
	return len(f.comps) == 3 && f.perMCU == 6 && f.comps[0].h == 2 && f.comps[0].v == 2 &&
		f.comps[1].h == 1 && f.comps[1].v == 1 && f.comps[2].h == 1 && f.comps[2].v == 1
}

// blocksMoved compares tile r of b with a's pixels at r moved by mv
// (whole 8×8 blocks, not whole MCUs: a mouse notch of 120 pixels) by
// block hashes, a 4:2:0 frame. Luma blocks line up: any that differs is
// a change. Chroma blocks (16 pixels) do not: each new one straddles two
// or four old ones, and is known equal only when all are uniform with
// the same value (most of a text page); else the tile is near, for
// Repair, as chroma rarely changes without luma.
func (a *coefFrame) blocksMoved(b *coefFrame, r Rect, mv image.Point) match {
	if r.X+mv.X < 0 || r.Y+mv.Y < 0 || r.X+r.W+mv.X > a.w || r.Y+r.H+mv.Y > a.h {
		return matchChanged
	}
	luma := func(bx, by int) int { return ((by/2)*a.mcusX+bx/2)*6 + (by%2)*2 + bx%2 }
	for by := r.Y / 8; by < (r.Y+r.H+7)/8; by++ {
		for bx := r.X / 8; bx < (r.X+r.W+7)/8; bx++ {
			if b.bsums[luma(bx, by)] != a.bsums[luma(bx+mv.X/8, by+mv.Y/8)] {
				return matchChanged
			}
		}
	}
	// Chroma: block (cx, cy) shows chroma pixels from (cx*8, cy*8); its
	// content came from mv/2 chroma pixels further, over the old blocks
	// from floor(that/8) to floor((that+7)/8).
	for comp := 4; comp < 6; comp++ {
		for cy := r.Y / 16; cy < (r.Y+r.H+15)/16; cy++ {
			for cx := r.X / 16; cx < (r.X+r.W+15)/16; cx++ {
				i := (cy*b.mcusX+cx)*6 + comp
				if !b.flat[i] {
					return matchNear
				}
				sx, sy := cx*8+mv.X/2, cy*8+mv.Y/2
				for oy := floorDiv(sy, 8); oy <= floorDiv(sy+7, 8); oy++ {
					for ox := floorDiv(sx, 8); ox <= floorDiv(sx+7, 8); ox++ {
						if ox < 0 || oy < 0 || ox >= a.mcusX || oy >= a.mcusY {
							return matchNear
						}
						j := (oy*a.mcusX+ox)*6 + comp
						if !a.flat[j] || a.bsums[j] != b.bsums[i] {
							return matchNear
						}
					}
				}
			}
		}
	}
	return matchExact
}

// movedTile compares tile r of cur with prev's pixels at r moved by mv
// (same bounds and subsampling): changed if any of it comes from outside
// prev or any 8×8 block differs by more than nearSAD.
func movedTile(prev, cur *image.YCbCr, r Rect, mv image.Point) match {
	b := prev.Rect
	sx, sy := cur.Rect.Min.X+r.X+mv.X, cur.Rect.Min.Y+r.Y+mv.Y
	if sx < b.Min.X || sy < b.Min.Y || sx+r.W > b.Max.X || sy+r.H > b.Max.Y {
		return matchChanged
	}
	x0, y0 := cur.Rect.Min.X+r.X, cur.Rect.Min.Y+r.Y
	m := comparePlane(cur.Y, cur.YStride, cur.YOffset(x0, y0), prev.Y, prev.YStride, prev.YOffset(sx, sy), r.W, r.H, nearSAD)
	if m == matchChanged {
		return m
	}
	// Chroma: the tile's share of the subsampled planes, moved by mv
	// halved (rounded down: an odd move is off by half a chroma sample,
	// within nearSAD for the smooth chroma of most pages).
	div := chromaDiv(cur)
	cw, ch := (r.W+div-1)/div, (r.H+div-1)/div
	// Inside prev's chroma planes: floor(sx/2)+ceil(W/2) <= ceil((sx+W)/2).
	co, po := cur.COffset(x0, y0), prev.COffset(sx, sy)
	for _, p := range [2][2][]byte{{cur.Cb, prev.Cb}, {cur.Cr, prev.Cr}} {
		switch comparePlane(p[0], cur.CStride, co, p[1], prev.CStride, po, cw, ch, nearChromaSAD) {
		case matchChanged:
			return matchChanged
		case matchNear:
			m = matchNear
		}
	}
	return m
}

func floorDiv(a, b int) int {
	if a < 0 {
		return -((-a + b - 1) / b)
	}
	return a / b
}

// comparePlane compares a w×h region of two planes at offsets ao and bo:
// exact, near (every 8×8 block's sum of differences within maxSAD), or
// changed.
func comparePlane(a []byte, as, ao int, b []byte, bs, bo, w, h, maxSAD int) match {
	m := matchExact
	for by := 0; by < h; by += 8 {
		bh := min(8, h-by)
		rowsEqual := true
		for y := by; y < by+bh; y++ {
			if !bytes.Equal(a[ao+y*as:][:w], b[bo+y*bs:][:w]) {
				rowsEqual = false
				break
			}
		}
		if rowsEqual {
			continue
		}
		for bx := 0; bx < w; bx += 8 {
			bw := min(8, w-bx)
			sad := 0
			for y := by; y < by+bh; y++ {
				ra, rb := a[ao+y*as+bx:][:bw], b[bo+y*bs+bx:][:bw]
				for i := range ra {
					d := int(ra[i]) - int(rb[i])
					sad += max(d, -d)
				}
			}
			if sad > maxSAD {
				return matchChanged
			}
			if sad > 0 {
				m = matchNear
			}
		}
	}
	return m
}

// movedNear is the near set after a move: the tiles whose moved-in
// content overlaps a tile that was near before (its inexact pixels moved
// with it).
func (e *Encoder) movedNear(w, h, cols, rows int, mv image.Point) []bool {
	near := make([]bool, cols*rows)
	if e.nearN == 0 || len(e.near) != cols*rows {
		return near
	}
	for i, was := range e.near {
		if !was {
			continue
		}
		// The old tile's pixels now sit at its place minus mv.
		x0, y0 := (i%cols)*Size-mv.X, (i/cols)*Size-mv.Y
		x1, y1 := x0+Size, y0+Size
		for ty := max(0, floorDiv(y0, Size)); ty < rows && ty*Size < min(y1, h); ty++ {
			for tx := max(0, floorDiv(x0, Size)); tx < cols && tx*Size < min(x1, w); tx++ {
				near[ty*cols+tx] = true
			}
		}
	}
	return near
}

func (e *Encoder) clearNear() { e.near, e.nearN = nil, 0 }

// Repair is the update that makes a screen exact again after moves left
// tiles near (ok false: none are): those tiles of the last frame, on
// itself. The caller sends it once the page rests; the tiles are no
// longer near afterwards.
func (e *Encoder) Repair() (u Update, ok bool, err error) {
	if e.nearN == 0 {
		return Update{}, false, nil
	}
	var rs []Rect
	var w, h int
	switch {
	case e.prevC != nil:
		w, h = e.prevC.w, e.prevC.h
	case e.prev != nil:
		w, h = e.prev.Rect.Dx(), e.prev.Rect.Dy()
	default:
		e.clearNear()
		return Update{}, false, nil
	}
	cols := (w + Size - 1) / Size
	for i, n := range e.near {
		if n {
			tx, ty := i%cols, i/cols
			rs = append(rs, Rect{X: tx * Size, Y: ty * Size, W: min(Size, w-tx*Size), H: min(Size, h-ty*Size)})
		}
	}
	share := float64(len(rs)) / float64(len(e.near))
	e.clearNear()
	var data []byte
	if e.prevC != nil {
		e.prevC.atlas(&e.atlasBuf, rs)
		data = bytes.Clone(e.atlasBuf.Bytes())
	} else if data, err = e.encodeAtlas(e.prev, rs); err != nil {
		return Update{}, false, err
	}
	return Update{Tiles: rs, Atlas: data, Changed: share}, true, nil
}
