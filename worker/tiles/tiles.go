// Package tiles turns a stream of full JPEG frames into damage updates:
// the 64×64 tiles that changed since the previous frame, encoded once as
// one JPEG "atlas" (the tiles stacked in a column) that every viewer of
// the browser shares (issue 39, docs/client-engine.md "Tiles").
//
// Why pixel-exact comparison works on JPEG input: a JPEG block's decoded
// pixels depend on that block alone, and Chromium's encoder is
// deterministic, so a region that did not change decodes to the same
// bytes in the next frame. Tiles are 64 pixels, a multiple of the 16-pixel
// MCU of 4:2:0 JPEG, so a tile never shares a block with its neighbours.
// A tolerance still exists for inputs that are not bit-stable.
package tiles

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"slices"
)

// Size is a tile's side in pixels.
const Size = 64

// maxAtlasTiles: a JPEG is at most 65535 pixels high.
const maxAtlasTiles = 65535 / Size

// Rect is a changed tile: its place in the frame (X, Y, W, H in frame
// pixels; W, H are under Size only at the right and bottom edges). Its
// picture is slot i of the atlas (rows i*Size … i*Size+H-1, columns 0 … W-1)
// for the i-th Rect of an Update.
type Rect struct{ X, Y, W, H int }

// Update is what changed from the frame Base to the frame given to Encode.
type Update struct {
	// Key: send the whole frame (the first one, a new size, most tiles
	// changed, or the periodic keyframe); Tiles and Atlas are empty.
	Key bool
	// Tiles are the changed tiles, in raster order; none: the frame
	// equals the previous one.
	Tiles []Rect
	// Atlas is the changed tiles' JPEG (nil when Tiles is empty).
	Atlas []byte
	// Changed is the share of the frame's tiles that changed (0..1), also
	// for a keyframe that most tiles changing made one.
	Changed float64
	// Move is a scroll (EncodeMoved): before drawing the tiles, the screen
	// is copied so that its pixel (x, y) shows what (x+Move.X, y+Move.Y)
	// showed. Zero: no move.
	Move image.Point
	// Near counts the tiles the screen now shows only approximately: moved
	// content whose JPEG blocks did not line up with the frame's (Repair
	// sends them).
	Near int
}

// Encoder diffs successive frames of one screencast. It is not safe for
// concurrent use: a hub's screencast is one goroutine.
type Encoder struct {
	// Quality is the atlas' JPEG quality on the pixel path (1..100; 0 =
	// 80); the coefficient path keeps the frame's own.
	Quality int
	// KeyShare: more than this share of changed tiles makes a keyframe
	// (0 = 0.5): the frame as Chromium encoded it costs nothing to
	// encode, and a delta of most of the screen saves little.
	KeyShare float64
	// KeyEvery: every KeyEvery-th frame is a keyframe (0 = never), a
	// bound on how long a lost or misdrawn update could stay on a screen.
	KeyEvery int
	// Tolerance: on the pixel path, a tile whose luma differs by at most
	// this much at every pixel, and whose chroma does too, counts as
	// unchanged (0: exact).
	Tolerance uint8
	// PixelsOnly: decode whole frames and re-encode the tiles (the
	// pixel path) even for JPEGs the coefficient path takes (tests,
	// measurements).
	PixelsOnly bool

	prev *image.YCbCr // pixel path
	// The coefficient path: the previous frame (its hashes) and the
	// struct the next one is decoded into.
	prevC, spare *coefFrame
	// The previous frame's JPEG, and its pixels once a move decoded them
	// (shift.go).
	prevData []byte
	prevImg  *image.YCbCr
	// near marks the tiles (raster order) a screen shows approximately
	// since a move or a busy tile's coarse update; nearN counts them.
	near  []bool
	nearN int
	// hot is each tile's change history, a bit a frame (hot.go).
	hot       []uint8
	sinceKey  int
	atlasBuf  bytes.Buffer
	atlasImg  *image.YCbCr
	changedTs []Rect
	roughTs   []bool
}

// ErrFormat: the frame is not a colour JPEG this package can diff.
var ErrFormat = errors.New("tiles: frame is not a 4:2:0 or 4:4:4 colour JPEG")

// Reset forgets the previous frame, and the memory kept for the next:
// the next frame is a keyframe.
func (e *Encoder) Reset() {
	e.prev, e.prevC, e.spare, e.prevData, e.prevImg = nil, nil, nil, nil, nil
	e.clearNear()
}

// Encode returns what changed in frame (a JPEG) since the last frame
// given. On an error the encoder is reset and the caller sends the frame
// whole.
func (e *Encoder) Encode(frame []byte) (Update, error) {
	return e.EncodeMoved(frame, image.Point{})
}

// EncodeMoved is Encode of a frame that the page scrolled by mv frame
// pixels since the last one (the screencast's scroll offsets): the
// update moves the screen by mv, then draws the tiles that do not equal
// their moved-in content (shift.go).
func (e *Encoder) EncodeMoved(frame []byte, mv image.Point) (Update, error) {
	if !e.PixelsOnly {
		cur := e.spare
		if cur == nil {
			cur = &coefFrame{}
		}
		err := parseCoef(frame, cur)
		if err == nil {
			prev, prevData, prevImg := e.prevC, e.prevData, e.prevImg
			e.prevC, e.spare, e.prev, e.prevData, e.prevImg = cur, prev, nil, frame, nil
			fresh := prev == nil || !prev.compatible(cur)
			same := func(r Rect) match { return exactOr(prev.sameTile(cur, r)) }
			if mv != (image.Point{}) && !fresh {
				var err error
				if same, err = e.movedCoef(prev, cur, prevData, prevImg, frame, mv); err != nil {
					e.Reset()
					return Update{}, err
				}
			}
			return e.update(cur.w, cur.h, fresh, mv, same, true,
				func(rs []Rect, coarse []bool) ([]byte, error) {
					var tc *tierCodec
					if slices.Contains(coarse, true) {
						if t, ok := cur.tierOf(TierLow); ok {
							tc = &t
						}
					}
					cur.atlasCoarse(&e.atlasBuf, rs, coarse, tc)
					return bytes.Clone(e.atlasBuf.Bytes()), nil
				})
		}
		e.spare = cur
		if !errors.Is(err, errUnsupported) {
			e.Reset()
			return Update{}, err
		}
	}
	img, err := jpeg.Decode(bytes.NewReader(frame))
	if err != nil {
		e.Reset()
		return Update{}, fmt.Errorf("tiles: decode frame: %w", err)
	}
	cur, ok := img.(*image.YCbCr)
	if !ok || (cur.SubsampleRatio != image.YCbCrSubsampleRatio420 && cur.SubsampleRatio != image.YCbCrSubsampleRatio444) {
		e.Reset()
		return Update{}, ErrFormat
	}
	return e.EncodeImageMoved(cur, mv)
}

// EncodeImage is Encode of a decoded frame (the pixel path); the encoder
// keeps cur, which the caller must not change afterwards.
func (e *Encoder) EncodeImage(cur *image.YCbCr) (Update, error) {
	return e.EncodeImageMoved(cur, image.Point{})
}

// EncodeImageMoved is EncodeMoved of a decoded frame.
func (e *Encoder) EncodeImageMoved(cur *image.YCbCr, mv image.Point) (Update, error) {
	prev := e.prev
	e.prev, e.prevC, e.prevData, e.prevImg = cur, nil, nil, nil
	fresh := prev == nil || prev.Rect != cur.Rect || prev.SubsampleRatio != cur.SubsampleRatio
	same := func(r Rect) match { return exactOr(sameTile(prev, cur, r, e.Tolerance)) }
	if mv != (image.Point{}) && !fresh {
		same = func(r Rect) match { return movedTile(prev, cur, r, mv) }
	}
	return e.update(cur.Rect.Dx(), cur.Rect.Dy(), fresh, mv, same, false,
		func(rs []Rect, _ []bool) ([]byte, error) { return e.encodeAtlas(cur, rs) })
}

// Atlas encodes the tiles rs of the last frame Encode took, which the
// coefficient path read (ok false otherwise: the pixel path keeps no
// frame to encode from); a viewer that skipped updates gets the union of
// their tiles this way.
func (e *Encoder) Atlas(rs []Rect) (atlas []byte, ok bool) {
	if e.prevC == nil || len(rs) == 0 {
		return nil, false
	}
	var b bytes.Buffer
	e.prevC.atlas(&b, rs)
	return b.Bytes(), true
}

// update is the frame's update: a keyframe if fresh (nothing to compare
// with) or by KeyEvery and KeyShare, else the tiles same does not find
// exact or near (after the move mv), plus, on a frame without a move,
// the tiles a screen shows only approximately since an earlier update;
// encoded by atlas, busy tiles coarsened if coarse (hot.go).
func (e *Encoder) update(w, h int, fresh bool, mv image.Point, same func(Rect) match, coarse bool, atlas func([]Rect, []bool) ([]byte, error)) (Update, error) {
	e.sinceKey++
	cols, rows := (w+Size-1)/Size, (h+Size-1)/Size
	moved := mv != (image.Point{})
	e.history(cols*rows, fresh || moved)
	if fresh || (e.KeyEvery > 0 && e.sinceKey >= e.KeyEvery) {
		e.sinceKey = 0
		e.clearNear()
		return Update{Key: true, Changed: 1}, nil
	}
	var near []bool // the near set after this frame
	if moved {
		near = e.movedNear(w, h, cols, rows, mv)
	}
	changed, rough := e.changedTs[:0], e.roughTs[:0]
	for ty := range rows {
		for tx := range cols {
			r := Rect{X: tx * Size, Y: ty * Size, W: min(Size, w-tx*Size), H: min(Size, h-ty*Size)}
			i := ty*cols + tx
			switch m := same(r); {
			case m == matchChanged:
				e.hot[i] |= 1
				busy := coarse && !moved && e.busy(i)
				changed, rough = append(changed, r), append(rough, busy)
				if busy {
					if near == nil {
						near = make([]bool, cols*rows)
					}
					near[i] = true
				} else if near != nil {
					near[i] = false
				}
			case !moved && e.nearN > 0 && e.near[i]:
				// A repair, exact, with this frame's tile.
				changed, rough = append(changed, r), append(rough, false)
			case moved && (m == matchNear || near[i]):
				near[i] = true
			}
		}
	}
	e.changedTs, e.roughTs = changed, rough
	e.clearNear()
	share := float64(len(changed)) / float64(cols*rows)
	keyShare := e.KeyShare
	if keyShare <= 0 {
		keyShare = 0.5
	}
	if share > keyShare || len(changed) > maxAtlasTiles {
		e.sinceKey = 0
		return Update{Key: true, Changed: share}, nil
	}
	nearN := 0
	for _, n := range near {
		if n {
			nearN++
		}
	}
	if nearN > 0 {
		e.near, e.nearN = near, nearN
	}
	if len(changed) == 0 {
		return Update{Move: mv, Near: nearN}, nil
	}
	data, err := atlas(changed, rough)
	if err != nil {
		e.Reset()
		return Update{}, err
	}
	return Update{Tiles: append([]Rect(nil), changed...), Atlas: data, Changed: share, Move: mv, Near: nearN}, nil
}

// sameTile compares tile r of a and b (same bounds and subsampling).
func sameTile(a, b *image.YCbCr, r Rect, tol uint8) bool {
	x0, y0 := a.Rect.Min.X+r.X, a.Rect.Min.Y+r.Y
	for y := y0; y < y0+r.H; y++ {
		ia, ib := a.YOffset(x0, y), b.YOffset(x0, y)
		if !near(a.Y[ia:ia+r.W], b.Y[ib:ib+r.W], tol) {
			return false
		}
	}
	// Chroma: the tile's share of the subsampled planes.
	cx0, cy0, cw, ch := x0, y0, r.W, r.H
	if a.SubsampleRatio == image.YCbCrSubsampleRatio420 {
		cx0, cy0 = x0/2, y0/2
		cw, ch = (x0+r.W+1)/2-cx0, (y0+r.H+1)/2-cy0
	}
	for y := cy0; y < cy0+ch; y++ {
		ia := (y-a.Rect.Min.Y/chromaDiv(a))*a.CStride + cx0 - a.Rect.Min.X/chromaDiv(a)
		ib := (y-b.Rect.Min.Y/chromaDiv(b))*b.CStride + cx0 - b.Rect.Min.X/chromaDiv(b)
		if !near(a.Cb[ia:ia+cw], b.Cb[ib:ib+cw], tol) || !near(a.Cr[ia:ia+cw], b.Cr[ib:ib+cw], tol) {
			return false
		}
	}
	return true
}

func chromaDiv(m *image.YCbCr) int {
	if m.SubsampleRatio == image.YCbCrSubsampleRatio420 {
		return 2
	}
	return 1
}

// near reports whether a and b differ by at most tol at every byte.
func near(a, b []byte, tol uint8) bool {
	if bytes.Equal(a, b) {
		return true
	}
	if tol == 0 {
		return false
	}
	for i := range a {
		d := int(a[i]) - int(b[i])
		if d > int(tol) || -d > int(tol) {
			return false
		}
	}
	return true
}

// encodeAtlas stacks the tiles of cur named by rs in one Size-wide column
// (slot i = rs[i]) and encodes it. A partial tile's slot is padded by
// repeating its last column and row, so no sharp edge rings into it.
func (e *Encoder) encodeAtlas(cur *image.YCbCr, rs []Rect) ([]byte, error) {
	h := len(rs) * Size
	if e.atlasImg == nil || e.atlasImg.Rect.Dy() != h || e.atlasImg.SubsampleRatio != cur.SubsampleRatio {
		e.atlasImg = image.NewYCbCr(image.Rect(0, 0, Size, h), cur.SubsampleRatio)
	}
	at := e.atlasImg
	div := chromaDiv(cur)
	for i, r := range rs {
		x0, y0 := cur.Rect.Min.X+r.X, cur.Rect.Min.Y+r.Y
		for row := range Size {
			sy := y0 + min(row, r.H-1)
			copyPad(at.Y[(i*Size+row)*at.YStride:][:Size], cur.Y[cur.YOffset(x0, sy):][:r.W])
		}
		cs, cw, ch := Size/div, (r.W+div-1)/div, (r.H+div-1)/div
		cx := (x0 - cur.Rect.Min.X) / div
		for row := range cs {
			sy := (y0-cur.Rect.Min.Y)/div + min(row, ch-1)
			dst := (i*cs + row) * at.CStride
			copyPad(at.Cb[dst:][:cs], cur.Cb[sy*cur.CStride+cx:][:cw])
			copyPad(at.Cr[dst:][:cs], cur.Cr[sy*cur.CStride+cx:][:cw])
		}
	}
	e.atlasBuf.Reset()
	q := e.Quality
	if q <= 0 || q > 100 {
		q = 80
	}
	if err := jpeg.Encode(&e.atlasBuf, at, &jpeg.Options{Quality: q}); err != nil {
		return nil, fmt.Errorf("tiles: encode atlas: %w", err)
	}
	return bytes.Clone(e.atlasBuf.Bytes()), nil
}

// copyPad copies src to the start of dst and fills the rest of dst with
// src's last byte.
func copyPad(dst, src []byte) {
	n := copy(dst, src)
	if n == 0 {
		return
	}
	last := dst[n-1]
	for i := n; i < len(dst); i++ {
		dst[i] = last
	}
}
