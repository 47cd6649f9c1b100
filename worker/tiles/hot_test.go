package tiles

import (
	"image"
	"image/color"
	"math/rand/v2"
	"testing"
)

// video paints a "video" over r of m: smooth colour with noise, new for
// every frame n.
func video(m *image.RGBA, r image.Rectangle, n int) *image.RGBA {
	out := image.NewRGBA(m.Bounds())
	copy(out.Pix, m.Pix)
	rnd := rand.New(rand.NewPCG(uint64(n), 3))
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			out.SetRGBA(x, y, color.RGBA{uint8(x*2 + n*9), uint8(y*3 - n*5), uint8((x+y)/2 + rnd.IntN(40)), 255})
		}
	}
	return out
}

// TestBusyTiles: tiles that change in most frames (a video) are sent
// coarsened, smaller than exact, and left near; when they stop, the next
// frame sends them exact and the screen equals the frame again.
func TestBusyTiles(t *testing.T) {
	base := page(640, 360, 5)
	area := image.Rect(64, 64, 256, 192) // 3×2 tiles
	var e Encoder
	first := jpegOf(t, video(base, area, 0), 80)
	if _, err := e.Encode(first); err != nil {
		t.Fatal(err)
	}
	screen := toRGBA(t, first)
	coarse, coarseBytes, exactBytes := 0, 0, 0
	var last []byte
	for n := 1; n <= 8; n++ {
		last = jpegOf(t, video(base, area, n), 80)
		u, err := e.Encode(last)
		if err != nil || u.Key || len(u.Tiles) != 6 {
			t.Fatalf("frame %d: key %v, %d tiles, %v", n, u.Key, len(u.Tiles), err)
		}
		exact, _ := e.Atlas(u.Tiles)
		switch {
		case n < hotFrames && (u.Near != 0 || len(u.Atlas) != len(exact)):
			t.Fatalf("frame %d: coarse before the tiles were busy (near %d)", n, u.Near)
		case n >= hotFrames:
			if u.Near != 6 || len(u.Atlas) >= len(exact) {
				t.Fatalf("frame %d: near %d, %d bytes vs %d exact: busy tiles not coarsened", n, u.Near, len(u.Atlas), len(exact))
			}
			coarse++
			coarseBytes += len(u.Atlas)
			exactBytes += len(exact)
		}
		apply(t, screen, u)
	}
	if d := maxDiff(screen, toRGBA(t, last)); d <= tolerance(false) {
		t.Fatalf("coarse tiles equal the frame (%d): nothing was coarsened", d)
	}
	// The video stops: the same frame again repairs the busy tiles.
	u, err := e.Encode(last)
	if err != nil || len(u.Tiles) != 6 || u.Near != 0 {
		t.Fatalf("the still frame: %d tiles, near %d, %v", len(u.Tiles), u.Near, err)
	}
	apply(t, screen, u)
	if d := maxDiff(screen, toRGBA(t, last)); d > tolerance(false) {
		t.Fatalf("after the repair the screen differs by %d", d)
	}
	t.Logf("%d coarse updates: %.2f× the exact atlases' bytes", coarse, float64(coarseBytes)/float64(exactBytes))
}

// TestBusyTilesRepair: a busy tile's coarse update is repaired by Repair
// when no frame follows.
func TestBusyTilesRepair(t *testing.T) {
	base := page(640, 360, 6)
	area := image.Rect(0, 0, 128, 64)
	var e Encoder
	first := jpegOf(t, video(base, area, 0), 80)
	if _, err := e.Encode(first); err != nil {
		t.Fatal(err)
	}
	screen := toRGBA(t, first)
	var last []byte
	for n := 1; n <= hotFrames; n++ {
		last = jpegOf(t, video(base, area, n), 80)
		u, err := e.Encode(last)
		if err != nil {
			t.Fatal(err)
		}
		apply(t, screen, u)
	}
	u, ok, err := e.Repair()
	if err != nil || !ok || len(u.Tiles) != 2 {
		t.Fatalf("repair: ok %v, %d tiles, %v", ok, len(u.Tiles), err)
	}
	apply(t, screen, u)
	if d := maxDiff(screen, toRGBA(t, last)); d > tolerance(false) {
		t.Fatalf("after the repair the screen differs by %d", d)
	}
}
