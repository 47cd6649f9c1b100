package tiles

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/jpeg"
	"math/rand/v2"
	"slices"
	"testing"
)

// page is a text-like picture: a light background, dark glyph-ish
// strokes in rows, deterministic for a seed.
func page(w, h int, seed uint64) *image.RGBA {
	m := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(m, m.Bounds(), image.NewUniform(color.RGBA{250, 250, 248, 255}), image.Point{}, draw.Src)
	r := rand.New(rand.NewPCG(seed, 1))
	for y := 8; y+12 < h; y += 20 {
		for x := 8; x+6 < w; x += 9 {
			if r.IntN(5) == 0 {
				continue
			}
			ink := color.RGBA{uint8(r.IntN(60)), uint8(r.IntN(60)), uint8(40 + r.IntN(120)), 255}
			draw.Draw(m, image.Rect(x, y+r.IntN(4), x+5, y+12), image.NewUniform(ink), image.Point{}, draw.Src)
		}
	}
	return m
}

// paint fills r of m with c (a change on the page).
func paint(m *image.RGBA, r image.Rectangle, c color.RGBA) *image.RGBA {
	out := image.NewRGBA(m.Bounds())
	copy(out.Pix, m.Pix)
	draw.Draw(out, r, image.NewUniform(c), image.Point{}, draw.Src)
	return out
}

func jpegOf(t testing.TB, m image.Image, q int) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := jpeg.Encode(&b, m, &jpeg.Options{Quality: q}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// apply composes u onto screen as a client engine does: each tile's slot
// of the atlas drawn at its place.
func apply(t *testing.T, screen *image.RGBA, u Update) {
	t.Helper()
	if len(u.Tiles) == 0 {
		return
	}
	atlas, err := jpeg.Decode(bytes.NewReader(u.Atlas))
	if err != nil {
		t.Fatalf("atlas: %v", err)
	}
	if got, want := atlas.Bounds().Dy(), len(u.Tiles)*Size; got != want || atlas.Bounds().Dx() != Size {
		t.Fatalf("atlas is %v, want %dx%d", atlas.Bounds(), Size, want)
	}
	for i, r := range u.Tiles {
		draw.Draw(screen, image.Rect(r.X, r.Y, r.X+r.W, r.Y+r.H), atlas, image.Pt(0, i*Size), draw.Src)
	}
}

// maxDiff is the largest per-channel difference between a and b.
func maxDiff(a, b image.Image) int {
	worst := 0
	bd := a.Bounds()
	for y := bd.Min.Y; y < bd.Max.Y; y++ {
		for x := bd.Min.X; x < bd.Max.X; x++ {
			r1, g1, b1, _ := a.At(x, y).RGBA()
			r2, g2, b2, _ := b.At(x, y).RGBA()
			for _, d := range []int{int(r1>>8) - int(r2>>8), int(g1>>8) - int(g2>>8), int(b1>>8) - int(b2>>8)} {
				worst = max(worst, d, -d)
			}
		}
	}
	return worst
}

func toRGBA(t *testing.T, data []byte) *image.RGBA {
	t.Helper()
	m, err := jpeg.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	out := image.NewRGBA(m.Bounds())
	draw.Draw(out, out.Bounds(), m, m.Bounds().Min, draw.Src)
	return out
}

func TestEncode(t *testing.T) {
	base := page(1280, 720, 1)
	red := color.RGBA{200, 30, 30, 255}
	tests := []struct {
		name    string
		next    image.Image // the second frame
		key     bool
		tiles   []Rect
		encoder Encoder
	}{
		{name: "unchanged page", next: base},
		{name: "a caret inside one tile", next: paint(base, image.Rect(100, 70, 102, 90), red),
			tiles: []Rect{{X: 64, Y: 64, W: 64, H: 64}}},
		{name: "a glyph across four tiles", next: paint(base, image.Rect(120, 120, 136, 136), red),
			tiles: []Rect{{64, 64, 64, 64}, {128, 64, 64, 64}, {64, 128, 64, 64}, {128, 128, 64, 64}}},
		{name: "the bottom edge's partial tiles", next: paint(base, image.Rect(1270, 710, 1280, 720), red),
			tiles: []Rect{{1216, 704, 64, 16}}},
		{name: "most of the screen (scrolling): a keyframe", next: page(1280, 720, 2), key: true},
		{name: "a new size: a keyframe", next: page(1000, 720, 1), key: true},
		{name: "the periodic keyframe", next: paint(base, image.Rect(0, 0, 4, 4), red), key: true, encoder: Encoder{KeyEvery: 1}},
		{name: "a share above KeyShare", next: paint(base, image.Rect(0, 0, 1280, 200), red), key: true, encoder: Encoder{KeyShare: 0.2}},
		{name: "the same share under the default", next: paint(base, image.Rect(0, 0, 1280, 60), red),
			tiles: func() (rs []Rect) {
				for x := 0; x < 1280; x += 64 {
					rs = append(rs, Rect{x, 0, 64, 64})
				}
				return rs
			}()},
	}
	for _, tc := range tests {
		for _, pixels := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/pixels=%v", tc.name, pixels), func(t *testing.T) {
				e := tc.encoder
				e.PixelsOnly = pixels
				first, second := jpegOf(t, base, 80), jpegOf(t, tc.next, 80)
				u, err := e.Encode(first)
				if err != nil || !u.Key {
					t.Fatalf("first frame: %+v, %v; want a keyframe", u, err)
				}
				u, err = e.Encode(second)
				if err != nil {
					t.Fatal(err)
				}
				if u.Key != tc.key {
					t.Fatalf("key = %v, want %v (changed %.2f)", u.Key, tc.key, u.Changed)
				}
				if tc.key {
					return
				}
				if !slices.Equal(u.Tiles, tc.tiles) {
					t.Fatalf("tiles = %v, want %v", u.Tiles, tc.tiles)
				}
				if len(u.Tiles) == 0 {
					if u.Atlas != nil {
						t.Fatal("an atlas for no tiles")
					}
					return
				}
				// Composed onto the first frame, the update shows the second:
				// exactly from the coefficients (the frame's own blocks),
				// within the re-encoding's loss from pixels.
				screen := toRGBA(t, first)
				apply(t, screen, u)
				if d := maxDiff(screen, toRGBA(t, second)); d > tolerance(pixels) {
					t.Fatalf("composed screen differs from the frame by %d", d)
				}
				if len(u.Atlas) >= len(second)/5 && len(u.Tiles) < 4 {
					t.Fatalf("a %d-tile update of %d bytes, the full frame %d", len(u.Tiles), len(u.Atlas), len(second))
				}
			})
		}
	}
}

// tolerance is the largest difference a composed screen may have: none
// from the coefficient path.
func tolerance(pixels bool) int {
	if pixels {
		return 48
	}
	return 0
}

// TestEncodeSequence: a run of updates composed onto the first frame
// tracks the frames, and the tolerance hides small noise.
func TestEncodeSequence(t *testing.T) {
	tests := []struct {
		w, h    int
		quality int
		pixels  bool
	}{
		{640, 360, 80, false},
		{640, 360, 80, true},
		{1001, 701, 80, false}, // MCUs past the edge
		{1001, 701, 80, true},
		{640, 360, 100, false},
		{640, 360, 30, false},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%dx%d/q%d/pixels=%v", tc.w, tc.h, tc.quality, tc.pixels), func(t *testing.T) {
			e := Encoder{PixelsOnly: tc.pixels}
			frame := page(tc.w, tc.h, 3)
			data := jpegOf(t, frame, tc.quality)
			if u, _ := e.Encode(data); !u.Key {
				t.Fatal("first frame not a keyframe")
			}
			screen := toRGBA(t, data)
			for i := range 10 {
				x, y := (20+i*97)%(tc.w-20), (40+i*61)%(tc.h-12)
				frame = paint(frame, image.Rect(x, y, x+20, y+12), color.RGBA{uint8(i * 20), 90, 20, 255})
				data = jpegOf(t, frame, tc.quality)
				u, err := e.Encode(data)
				if err != nil || u.Key {
					t.Fatalf("step %d: %+v %v", i, u.Key, err)
				}
				apply(t, screen, u)
			}
			// The edge tiles too: the screen's last column and row.
			frame = paint(frame, image.Rect(tc.w-3, tc.h-3, tc.w, tc.h), color.RGBA{10, 200, 10, 255})
			data = jpegOf(t, frame, tc.quality)
			u, err := e.Encode(data)
			if err != nil || len(u.Tiles) != 1 {
				t.Fatalf("edge: %+v %v", u.Tiles, err)
			}
			apply(t, screen, u)
			if d := maxDiff(screen, toRGBA(t, data)); d > tolerance(tc.pixels) {
				t.Fatalf("after 11 updates the screen differs by %d", d)
			}
		})
	}
}

func TestTolerance(t *testing.T) {
	a := image.NewYCbCr(image.Rect(0, 0, 128, 64), image.YCbCrSubsampleRatio420)
	b := image.NewYCbCr(a.Rect, a.SubsampleRatio)
	b.Y[5] = 3 // noise in the first tile
	tests := []struct {
		tol  uint8
		want int
	}{{0, 1}, {2, 1}, {3, 0}}
	for _, tc := range tests {
		e := Encoder{Tolerance: tc.tol}
		if _, err := e.EncodeImage(a); err != nil {
			t.Fatal(err)
		}
		u, err := e.EncodeImage(b)
		if err != nil {
			t.Fatal(err)
		}
		if len(u.Tiles) != tc.want {
			t.Errorf("tolerance %d: %d tiles changed, want %d", tc.tol, len(u.Tiles), tc.want)
		}
	}
}

func TestEncodeRejects(t *testing.T) {
	var e Encoder
	if _, err := e.Encode([]byte("not a jpeg")); err == nil {
		t.Fatal("no error for a non-JPEG")
	}
	gray := image.NewGray(image.Rect(0, 0, 64, 64))
	if _, err := e.Encode(jpegOf(t, gray, 80)); err == nil {
		t.Fatal("no error for a grey JPEG")
	}
}

// BenchmarkFrame is the worker's CPU per screencast frame for a typing
// viewer: decode a 1280×720 frame, diff it, encode the changed tiles
// (a word typed: 2 tiles), on either path.
func BenchmarkFrame(b *testing.B) {
	base := page(1280, 720, 1)
	frames := [][]byte{jpegOf(b, base, 80), jpegOf(b, paint(base, image.Rect(100, 70, 140, 90), color.RGBA{200, 30, 30, 255}), 80)}
	for _, pixels := range []bool{false, true} {
		b.Run(fmt.Sprintf("pixels=%v", pixels), func(b *testing.B) {
			e := Encoder{PixelsOnly: pixels}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := e.Encode(frames[i%2]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecode is the decode alone, the floor of BenchmarkFrame.
func BenchmarkDecode(b *testing.B) {
	data := jpegOf(b, page(1280, 720, 1), 80)
	for b.Loop() {
		if _, err := jpeg.Decode(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
}
