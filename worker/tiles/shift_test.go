package tiles

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"testing"
)

// window is the part of a tall page a viewport at scroll (x, y) shows,
// with a fixed element (a bar that does not scroll) drawn over it.
func window(pg *image.RGBA, x, y, w, h int, fixed bool) *image.RGBA {
	m := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(m, m.Bounds(), pg, image.Pt(x, y), draw.Src)
	if fixed {
		draw.Draw(m, image.Rect(20, 40, 320, 80), image.NewUniform(color.RGBA{30, 60, 140, 255}), image.Point{}, draw.Src)
	}
	return m
}

// move moves screen as an engine does for u.Move: (x, y) shows what
// (x+Move.X, y+Move.Y) showed; what comes from outside stays (the update's
// tiles cover it).
func move(screen *image.RGBA, mv image.Point) {
	if mv == (image.Point{}) {
		return
	}
	old := image.NewRGBA(screen.Rect)
	copy(old.Pix, screen.Pix)
	draw.Draw(screen, screen.Rect, old, mv, draw.Src)
	_ = old
}

func TestEncodeMoved(t *testing.T) {
	tests := []struct {
		name   string
		steps  []image.Point // scroll offsets after the first frame
		pixels bool
		fixed  bool
	}{
		{"mcu-aligned", []image.Point{{0, 16}, {0, 64}, {0, 160}, {0, 96}}, false, false},
		{"mouse notches", []image.Point{{0, 120}, {0, 240}, {0, 360}, {0, 240}}, false, false},
		{"mouse notches, fixed bar", []image.Point{{0, 120}, {0, 240}, {0, 360}, {0, 240}}, false, true},
		// Luma blocks that do not line up differ by more than nearSAD at
		// the synthetic glyphs' hard edges: keyframes, still correct.
		{"odd", []image.Point{{0, 37}, {0, 74}, {0, 3}}, false, false},
		{"sideways", []image.Point{{24, 0}, {48, 40}, {8, 40}}, false, false},
		{"pixel path", []image.Point{{0, 120}, {0, 240}, {0, 200}}, true, true},
	}
	const w, h = 960, 540
	pg := page(1100, 1600, 7)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := Encoder{PixelsOnly: tc.pixels}
			first := jpegOf(t, window(pg, 0, 0, w, h, tc.fixed), 80)
			if u, _ := e.Encode(first); !u.Key {
				t.Fatal("first frame not a keyframe")
			}
			screen := toRGBA(t, first)
			at, whole, sent := image.Point{}, 0, 0
			var data []byte
			for i, to := range tc.steps {
				data = jpegOf(t, window(pg, to.X, to.Y, w, h, tc.fixed), 80)
				mv := to.Sub(at)
				at = to
				u, err := e.EncodeMoved(data, mv)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				whole += len(data)
				if u.Key && tc.name == "odd" {
					screen = toRGBA(t, data)
					sent += len(data)
					continue
				}
				if u.Key {
					t.Fatalf("step %d: a keyframe (%.2f changed)", i, u.Changed)
				}
				if u.Move != mv {
					t.Fatalf("step %d: move %v, want %v", i, u.Move, mv)
				}
				move(screen, u.Move)
				apply(t, screen, u)
				sent += len(u.Atlas)
				// The strip scrolled in is sent: the screen is right there.
				if d := maxDiff(screen.SubImage(exposed(mv, w, h)), toRGBA(t, data).SubImage(exposed(mv, w, h))); d > tolerance(tc.pixels) {
					t.Fatalf("step %d: the exposed strip differs by %d", i, d)
				}
			}
			if sent*2 > whole && tc.name != "odd" {
				t.Errorf("moves sent %d bytes, the whole frames are %d", sent, whole)
			}
			// Near tiles: repaired; then the screen is the last frame.
			if u, ok, err := e.Repair(); err != nil {
				t.Fatal(err)
			} else if ok {
				apply(t, screen, u)
				if _, again, _ := e.Repair(); again {
					t.Fatal("a second repair")
				}
			}
			if d := maxDiff(screen, toRGBA(t, data)); d > tolerance(tc.pixels) {
				t.Fatalf("after the moves and the repair the screen differs by %d", d)
			}
			t.Logf("%d of %d bytes", sent, whole)
		})
	}
}

// exposed is the part of the screen a move by mv brings into view.
func exposed(mv image.Point, w, h int) image.Rectangle {
	switch {
	case mv.Y > 0:
		return image.Rect(0, h-mv.Y, w, h)
	case mv.Y < 0:
		return image.Rect(0, 0, w, -mv.Y)
	case mv.X > 0:
		return image.Rect(w-mv.X, 0, w, h)
	default:
		return image.Rect(0, 0, -mv.X, h)
	}
}

// TestMovedChanges: a change inside moved content is sent, not taken
// for the moved tile; a move by more than the screen is a keyframe.
func TestMovedChanges(t *testing.T) {
	const w, h = 960, 540
	pg := page(1100, 1600, 9)
	for _, mvY := range []int{120, 128} {
		t.Run(fmt.Sprint(mvY), func(t *testing.T) {
			var e Encoder
			if _, err := e.Encode(jpegOf(t, window(pg, 0, 0, w, h, false), 80)); err != nil {
				t.Fatal(err)
			}
			next := window(pg, 0, mvY, w, h, false)
			next = paint(next, image.Rect(200, 100, 201, 116), color.RGBA{0, 0, 0, 255}) // a caret
			u, err := e.EncodeMoved(jpegOf(t, next, 80), image.Pt(0, mvY))
			if err != nil || u.Key {
				t.Fatalf("key %v (%.2f changed), %v", u.Key, u.Changed, err)
			}
			found := false
			for _, r := range u.Tiles {
				found = found || (r.X <= 200 && 200 < r.X+r.W && r.Y <= 100 && 100 < r.Y+r.H)
			}
			if !found {
				t.Fatalf("the caret's tile not sent: %v", u.Tiles)
			}
			u, err = e.EncodeMoved(jpegOf(t, window(pg, 0, mvY+h, w, h, false), 80), image.Pt(0, h))
			if err != nil || !u.Key {
				t.Fatalf("a move by the screen's height: key %v, %v", u.Key, err)
			}
		})
	}
}

// TestRepairWithNextFrame: near tiles go with the next frame that does
// not move, and no repair is left after it.
func TestRepairWithNextFrame(t *testing.T) {
	const w, h = 960, 540
	// Grey text, a coloured line every 400 pixels: only those tiles'
	// chroma misaligns (a few near tiles, as on a real page).
	pg := page(1100, 1600, 11)
	for y := range pg.Rect.Dy() {
		if y%400 < 20 {
			continue
		}
		for x := range pg.Rect.Dx() {
			o := pg.PixOffset(x, y)
			g := uint8((int(pg.Pix[o]) + int(pg.Pix[o+1]) + int(pg.Pix[o+2])) / 3)
			pg.Pix[o], pg.Pix[o+1], pg.Pix[o+2] = g, g, g
		}
	}
	var e Encoder
	if _, err := e.Encode(jpegOf(t, window(pg, 0, 0, w, h, false), 80)); err != nil {
		t.Fatal(err)
	}
	u, err := e.EncodeMoved(jpegOf(t, window(pg, 0, 120, w, h, false), 80), image.Pt(0, 120))
	if err != nil || u.Near == 0 {
		t.Fatalf("a move by a mouse notch left no near tile (%d), %v", u.Near, err)
	}
	u2, err := e.Encode(jpegOf(t, window(pg, 0, 120, w, h, false), 80))
	if err != nil || len(u2.Tiles) != u.Near {
		t.Fatalf("the next frame sent %d tiles, %d were near: %v", len(u2.Tiles), u.Near, err)
	}
	if _, ok, _ := e.Repair(); ok {
		t.Fatal("a repair after the next frame repaired")
	}
}

// BenchmarkMove is the worker's CPU per frame of a scroll by a mouse
// notch (pixels decoded) and by whole MCUs (hashes only).
func BenchmarkMove(b *testing.B) {
	pg := page(1280, 2400, 1)
	for _, step := range []int{120, 128} {
		b.Run(fmt.Sprint(step), func(b *testing.B) {
			frames := make([][]byte, 8)
			for i := range frames {
				frames[i] = jpegOf(b, window(pg, 0, i*step, 1280, 720, true), 80)
			}
			var e Encoder
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				mv := image.Pt(0, step)
				if i%len(frames) == 0 {
					mv = image.Pt(0, -step*(len(frames)-1))
				}
				if _, err := e.EncodeMoved(frames[i%len(frames)], mv); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
