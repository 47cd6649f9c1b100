package tiles

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"math"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium"
)

// tierFrame is a frame the tier tests take.
type tierFrame struct {
	name string
	data func(testing.TB) []byte
	// text: a text-like page, where each tier must cost fewer bytes
	// than the one before.
	text bool
	// asIs: the frame is as coarse as the tiers up to this one already:
	// FrameTier sends the frame, AtlasTier is Atlas.
	asIs int
}

func tierFrames() []tierFrame {
	return []tierFrame{
		{name: "4:2:0 q80 1280x720", data: func(t testing.TB) []byte { return jpegOf(t, page(1280, 720, 1), 80) }, text: true},
		{name: "4:2:0 q80 1001x701 (partial MCUs and tiles)", data: func(t testing.TB) []byte { return jpegOf(t, page(1001, 701, 2), 80) }, text: true},
		{name: "4:2:0 q95", data: func(t testing.TB) []byte { return jpegOf(t, page(640, 360, 3), 95) }, text: true},
		{name: "4:2:0 q40 (coarser than tier 1)", data: func(t testing.TB) []byte { return jpegOf(t, page(640, 360, 4), 40) }, asIs: TierLow},
		{name: "4:2:0 q20 (coarser than every tier)", data: func(t testing.TB) []byte { return jpegOf(t, page(640, 360, 5), 20) }, asIs: TierLowest},
		{name: "4:4:4 q80 333x201", data: func(t testing.TB) []byte { return jpeg444(t, page(333, 201, 6), 80, false) }, text: true},
		{name: "4:4:4 q80 own Huffman tables", data: func(t testing.TB) []byte { return jpeg444(t, page(640, 360, 7), 80, true) }, text: true},
	}
}

// coefEncoder is an Encoder that read data on the coefficient path.
func coefEncoder(t testing.TB, data []byte) *Encoder {
	t.Helper()
	e := &Encoder{}
	if _, err := e.Encode(data); err != nil {
		t.Fatal(err)
	}
	if e.prevC == nil {
		t.Fatal("the frame did not take the coefficient path")
	}
	return e
}

// TestFrameTier: a frame's tiers decode to its size, close to its picture
// (no further from it than encoding its pixels at the tier's quality
// would be), with tables no finer than its own nor than libjpeg's at the
// tier's quality, and on a text page each tier costs fewer bytes.
func TestFrameTier(t *testing.T) {
	for _, tc := range tierFrames() {
		t.Run(tc.name, func(t *testing.T) {
			data := tc.data(t)
			e := coefEncoder(t, data)
			if _, ok := e.FrameTier(TierFrame); ok {
				t.Error("FrameTier(TierFrame): the caller has the frame")
			}
			want := toRGBA(t, data)
			own, _ := parseDQT(e.prevC.dqt)
			sizes := []int{len(data)}
			for tier := TierFrame + 1; tier < Tiers; tier++ {
				got, ok := e.FrameTier(tier)
				if tier <= tc.asIs {
					if ok {
						t.Fatalf("tier %d of a frame as coarse: %d bytes, not the frame", tier, len(got))
					}
					sizes = append(sizes, len(data))
					continue
				}
				if !ok {
					t.Fatalf("tier %d: not ok", tier)
				}
				sizes = append(sizes, len(got))
				m := toRGBA(t, got)
				if m.Bounds() != want.Bounds() {
					t.Fatalf("tier %d is %v, the frame %v", tier, m.Bounds(), want.Bounds())
				}
				checkTierTables(t, got, own, e.prevC, tier)
				mad := meanAbsDiff(m, want)
				px := meanAbsDiff(toRGBA(t, jpegOf(t, want, tierQuality[tier])), want)
				t.Logf("tier %d: %d bytes (%.2f of the frame's), mean abs diff %.2f (the pixels re-encoded at Q%d: %.2f)",
					tier, len(got), float64(len(got))/float64(len(data)), mad, tierQuality[tier], px)
				if mad > tierErrorBound(px) {
					t.Errorf("tier %d: mean abs diff %.2f, re-encoding the pixels loses %.2f", tier, mad, px)
				}
			}
			if tc.text && !(sizes[2] < sizes[1] && sizes[1] < sizes[0]) {
				t.Errorf("bytes by tier %v, want each smaller than the one before", sizes)
			}
		})
	}
}

// tierErrorBound is how far (mean absolute difference per RGB channel)
// a tier's picture may be from the frame's, given px, how far the pixel
// path's tier is: the frame's decoded picture encoded by image/jpeg at
// the tier's quality. Requantizing is that same quantization, to the
// same steps (TestTierTablesAreLibjpegs), of the same coefficients (the
// frame's, coef × step, are its picture's exact DCT), without the pixel
// round trip (decoded samples rounded and clamped to 0..255, 4:2:0 chroma
// upsampled then subsampled again): about px, and measured 0.72..1.06 ×
// px on text pages (the Chromium frame's tier 1 the most). Ties rounded
// the other way and clamping are what the margin of a quarter and 0.25
// level are for.
func tierErrorBound(px float64) float64 { return 1.25*px + 0.25 }

// checkTierTables: the tier's quantization tables are the frame's, each step
// raised to libjpeg's at the tier's quality where that is coarser.
func checkTierTables(t *testing.T, tierJPEG []byte, own quantTables, f *coefFrame, tier int) {
	t.Helper()
	var g coefFrame
	if err := parseCoef(tierJPEG, &g); err != nil {
		t.Fatalf("tier %d: %v", tier, err)
	}
	got, ok := parseDQT(g.dqt)
	if !ok {
		t.Fatalf("tier %d: bad DQT", tier)
	}
	for ci, c := range f.comps {
		for k := range 64 {
			want := max(own.q[c.tq][k], libjpegStep(annexK[min(ci, 1)][k], tierQuality[tier]))
			if got.q[c.tq][k] != want {
				t.Fatalf("tier %d, component %d, step %d = %d, want %d", tier, ci, k, got.q[c.tq][k], want)
			}
		}
	}
}

// TestTierTablesAreLibjpegs: from a standard frame (image/jpeg's Q80,
// Annex K tables as Chromium's libjpeg-turbo uses them), a tier's tables
// are exactly what image/jpeg writes at the tier's quality.
func TestTierTablesAreLibjpegs(t *testing.T) {
	e := coefEncoder(t, jpegOf(t, page(256, 128, 1), 80))
	for tier := TierFrame + 1; tier < Tiers; tier++ {
		got, _ := e.FrameTier(tier)
		var a, b coefFrame
		if err := parseCoef(got, &a); err != nil {
			t.Fatal(err)
		}
		if err := parseCoef(jpegOf(t, page(16, 16, 1), tierQuality[tier]), &b); err != nil {
			t.Fatal(err)
		}
		ta, _ := parseDQT(a.dqt)
		tb, _ := parseDQT(b.dqt)
		if ta != tb {
			t.Errorf("tier %d's tables are not image/jpeg's at Q%d:\n%v\n%v", tier, tierQuality[tier], ta.q[:2], tb.q[:2])
		}
	}
}

// TestAtlasTier: a tier's atlas holds, slot for slot, exactly the tiles of
// the frame's tier (the same requantized blocks), also partial edge
// tiles; tier 0 is Atlas; on a text page each tier costs fewer bytes.
func TestAtlasTier(t *testing.T) {
	for _, tc := range tierFrames() {
		t.Run(tc.name, func(t *testing.T) {
			data := tc.data(t)
			e := coefEncoder(t, data)
			w, h := e.prevC.w, e.prevC.h
			last := func(n int) int { return (n - 1) / Size * Size }
			rs := []Rect{
				{X: 0, Y: 0, W: Size, H: Size},
				{X: Size, Y: Size, W: Size, H: Size},
				{X: last(w), Y: 0, W: w - last(w), H: Size},                 // the right edge
				{X: 2 * Size, Y: last(h), W: Size, H: h - last(h)},          // the bottom edge
				{X: last(w), Y: last(h), W: w - last(w), H: h - last(h)},    // the corner
				{X: 3 * Size, Y: 2 * Size, W: min(Size, w-3*Size), H: Size}, // text
				{X: 4 * Size, Y: 2 * Size, W: min(Size, w-4*Size), H: Size}, // text
				{X: 0, Y: 0, W: Size, H: Size},                              // a tile twice
			}
			at0, ok := e.Atlas(rs)
			if !ok {
				t.Fatal("no atlas")
			}
			if got, _ := e.AtlasTier(rs, TierFrame); !bytes.Equal(got, at0) {
				t.Error("AtlasTier(TierFrame) is not Atlas")
			}
			sizes := []int{len(at0)}
			for tier := TierFrame + 1; tier < Tiers; tier++ {
				at, ok := e.AtlasTier(rs, tier)
				if !ok {
					t.Fatalf("tier %d: not ok", tier)
				}
				sizes = append(sizes, len(at))
				frame, ok := e.FrameTier(tier)
				if tier <= tc.asIs {
					if ok || !bytes.Equal(at, at0) {
						t.Fatalf("tier %d of a frame as coarse: a frame tier (%v) or an atlas not Atlas's", tier, ok)
					}
					continue
				}
				full, atlas := toRGBA(t, frame), toRGBA(t, at)
				if atlas.Bounds() != image.Rect(0, 0, Size, len(rs)*Size) {
					t.Fatalf("tier %d: atlas is %v", tier, atlas.Bounds())
				}
				for i, r := range rs {
					slot := atlas.SubImage(image.Rect(0, i*Size, r.W, i*Size+r.H))
					tile := full.SubImage(image.Rect(r.X, r.Y, r.X+r.W, r.Y+r.H))
					if d := maxDiffAt(slot, tile); d != 0 {
						t.Fatalf("tier %d: slot %d (%v) differs from the frame's tier by %d", tier, i, r, d)
					}
				}
			}
			if tc.text && !(sizes[2] < sizes[1] && sizes[1] < sizes[0]) {
				t.Errorf("bytes by tier %v, want each smaller than the one before", sizes)
			}
		})
	}
}

// TestTierSequence: a slow viewer who gets a keyframe's tier and then each
// update's atlas at the same tier sees, after any run of updates, exactly
// the last frame's tier: tiers compose like the frames they come from.
func TestTierSequence(t *testing.T) {
	for _, tier := range []int{TierLow, TierLowest} {
		t.Run(fmt.Sprint("tier ", tier), func(t *testing.T) {
			w, h := 521, 333 // partial tiles and MCUs at the right and bottom
			frame := page(w, h, 8)
			var e Encoder
			if u, _ := e.Encode(jpegOf(t, frame, 80)); !u.Key {
				t.Fatal("first frame not a keyframe")
			}
			key, ok := e.FrameTier(tier)
			if !ok {
				t.Fatal("no keyframe tier")
			}
			screen := toRGBA(t, key)
			for i := range 8 {
				x, y := (30+i*131)%(w-20), (50+i*83)%(h-12)
				if i == 7 {
					x, y = w-10, h-6 // the corner tile
				}
				frame = paint(frame, image.Rect(x, y, x+20, y+12), color.RGBA{uint8(i * 30), 40, 160, 255})
				u, err := e.Encode(jpegOf(t, frame, 80))
				if err != nil || u.Key || len(u.Tiles) == 0 {
					t.Fatalf("step %d: %+v %v", i, u.Tiles, err)
				}
				at, ok := e.AtlasTier(u.Tiles, tier)
				if !ok {
					t.Fatalf("step %d: no atlas", i)
				}
				u.Atlas = at
				apply(t, screen, u)
			}
			want, _ := e.FrameTier(tier)
			if m := toRGBA(t, want); !bytes.Equal(screen.Pix, m.Pix) {
				t.Fatalf("the composed screen differs from the last frame's tier by %d", maxDiff(screen, m))
			}
		})
	}
}

// TestRequantize: Requantize of a frame is its FrameTier, of a tier-0
// atlas that atlas' AtlasTier, byte for byte (the same blocks, tables and
// headers); it refuses what is not a coefficient-path JPEG or a tier.
func TestRequantize(t *testing.T) {
	data := jpegOf(t, page(1001, 701, 9), 80)
	e := coefEncoder(t, data)
	rs := []Rect{{X: 0, Y: 0, W: Size, H: Size}, {X: 960, Y: 640, W: 41, H: 61}}
	at0, _ := e.Atlas(rs)
	for tier := TierFrame + 1; tier < Tiers; tier++ {
		want, _ := e.FrameTier(tier)
		if got, err := Requantize(data, tier); err != nil || !bytes.Equal(got, want) {
			t.Errorf("tier %d: Requantize of the frame (%v) is not FrameTier", tier, err)
		}
		want, _ = e.AtlasTier(rs, tier)
		if got, err := Requantize(at0, tier); err != nil || !bytes.Equal(got, want) {
			t.Errorf("tier %d: Requantize of the atlas (%v) is not AtlasTier", tier, err)
		}
	}
	for _, tier := range []int{TierFrame, Tiers} {
		if _, err := Requantize(data, tier); err == nil {
			t.Errorf("tier %d: no error", tier)
		}
	}
	if _, err := Requantize([]byte("not a jpeg"), TierLow); err == nil {
		t.Error("not a JPEG: no error")
	}
}

func TestTierRejects(t *testing.T) {
	data := jpegOf(t, page(300, 200, 1), 80)
	tile := []Rect{{X: 0, Y: 0, W: Size, H: Size}}
	tests := []struct {
		name  string
		e     func() *Encoder
		rs    []Rect
		tier  int
		frame bool // FrameTier's answer too
	}{
		{name: "no frame yet", e: func() *Encoder { return &Encoder{} }, rs: tile, tier: TierLow},
		{name: "the pixel path", e: func() *Encoder {
			e := &Encoder{PixelsOnly: true}
			_, _ = e.Encode(data)
			return e
		}, rs: tile, tier: TierLow},
		{name: "after Reset", e: func() *Encoder { e := coefEncoder(t, data); e.Reset(); return e }, rs: tile, tier: TierLow},
		{name: "a tier below 0", e: func() *Encoder { return coefEncoder(t, data) }, rs: tile, tier: -1},
		{name: "a tier past the last", e: func() *Encoder { return coefEncoder(t, data) }, rs: tile, tier: Tiers},
		{name: "no tiles", e: func() *Encoder { return coefEncoder(t, data) }, tier: TierLow, frame: true},
		{name: "a tile off the MCU grid", e: func() *Encoder { return coefEncoder(t, data) }, rs: []Rect{{X: 8, Y: 0, W: Size, H: Size}}, tier: TierLow, frame: true},
		{name: "a tile past the frame", e: func() *Encoder { return coefEncoder(t, data) }, rs: []Rect{{X: 320, Y: 0, W: Size, H: Size}}, tier: TierLow, frame: true},
		{name: "a tile before it", e: func() *Encoder { return coefEncoder(t, data) }, rs: []Rect{{X: -64, Y: 0, W: Size, H: Size}}, tier: TierLow, frame: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := tc.e()
			if at, ok := e.AtlasTier(tc.rs, tc.tier); ok || at != nil {
				t.Errorf("AtlasTier: %d bytes, ok %v", len(at), ok)
			}
			if _, ok := e.FrameTier(tc.tier); ok != tc.frame {
				t.Errorf("FrameTier ok = %v, want %v", ok, tc.frame)
			}
		})
	}
}

// TestDQT: tables are read from the segments a frame keeps (16-bit
// steps too, a later table replacing an earlier one) and written back
// as read; a malformed segment is refused.
func TestDQT(t *testing.T) {
	var tabs quantTables
	tabs.set[0], tabs.set[2] = true, true
	for k := range 64 {
		tabs.q[0][k], tabs.q[2][k] = uint16(k+1), uint16(200+k*10) // 16-bit from k = 6
	}
	seg := tabs.appendDQT(nil)
	if got, ok := parseDQT(seg); !ok || got != tabs {
		t.Fatalf("round trip: %v %v", ok, got)
	}
	var later quantTables
	later.set[0] = true
	for k := range 64 {
		later.q[0][k] = 7
	}
	want := tabs
	want.q[0] = later.q[0]
	if got, ok := parseDQT(later.appendDQT(seg)); !ok || got != want {
		t.Fatalf("a later table: %v %v", ok, got)
	}
	for _, bad := range []struct {
		name string
		dqt  []byte
	}{
		{"not a DQT marker", append([]byte{0xFF, 0xC4}, seg[2:]...)},
		{"short", seg[:len(seg)-1]},
		{"a zero step", func() []byte { b := bytes.Clone(seg); b[5] = 0; return b }()},
		{"precision 2", func() []byte { b := bytes.Clone(seg); b[4] = 0x20; return b }()},
		{"table id 4", func() []byte { b := bytes.Clone(seg); b[4] = 0x04; return b }()},
	} {
		if _, ok := parseDQT(bad.dqt); ok {
			t.Errorf("%s: read", bad.name)
		}
	}
}

// TestTierSharedTable: a frame whose components share one table gets the
// luma's target for it (the finer), and a frame whose component names a
// table it lacks has no tier.
func TestTierSharedTable(t *testing.T) {
	var own quantTables
	own.set[0] = true
	for k := range 64 {
		own.q[0][k] = libjpegStep(annexK[0][k], 80)
	}
	f := &coefFrame{dqt: own.appendDQT(nil), comps: []component{{id: 1, h: 2, v: 2}, {id: 2, h: 1, v: 1}, {id: 3, h: 1, v: 1}}}
	tr, ok := f.tierOf(TierLow)
	if !ok {
		t.Fatal("no tier")
	}
	for ci := range 3 {
		for k := range 64 {
			if want := int32(annexK[0][k]); tr.rq[ci].to[k] != want {
				t.Fatalf("component %d step %d = %d, want the luma's %d", ci, k, tr.rq[ci].to[k], want)
			}
		}
	}
	f.comps[2].tq = 1
	if _, ok := f.tierOf(TierLow); ok {
		t.Error("a tier with a missing table")
	}
}

// TestRequantRounding: round half away from zero of coef × from / to,
// the division by multiplication exact for every coefficient and step.
func TestRequantRounding(t *testing.T) {
	var r requant
	var from, to [64]int32
	for k := range 64 {
		from[k], to[k] = 4, 8
	}
	to[1], to[2] = 12, 4 // 1/3 and the same
	r.set(from, to)
	blk := make([]int16, 64)
	copy(blk, []int16{3, -3, 5, 1, -1, 2047, -2047})
	r.block(blk)
	want := []int16{2, -1, 5, 1, -1, 1024, -1024} // 1.5→2, -1, 5, 0.5→1, -0.5→-1, 1023.5→1024
	for k, w := range want {
		if blk[k] != w {
			t.Errorf("coefficient %d = %d, want %d", k, blk[k], w)
		}
	}

	var coefs []int16
	for c := -2048; c <= 2048; c++ {
		coefs = append(coefs, int16(c))
	}
	coefs = append(coefs, math.MaxInt16, -math.MaxInt16, math.MinInt16)
	steps := []int32{256, 1000, 4097, 65535}
	for d := range int32(255) {
		steps = append(steps, d+1)
	}
	for _, d := range steps {
		for _, f := range []int32{1, max(1, d/3), d} {
			for k := range 64 {
				from[k], to[k] = f, d
			}
			r.set(from, to)
			for _, c := range coefs {
				blk[0] = c
				r.block(blk)
				n := int64(c) * int64(f)
				q := (max(n, -n) + int64(d/2)) / int64(d)
				if n < 0 {
					q = -q
				}
				if blk[0] != int16(q) {
					t.Fatalf("%d × %d / %d = %d, want %d", c, f, d, blk[0], q)
				}
			}
		}
	}
}

// TestTierBytesChromium measures the tiers on what they are for: a real
// Chromium screencast frame of a text page, 1280×720 at the screencast's
// default quality 80. The figures are the tier constants' comments.
func TestTierBytesChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	data := chromiumTextFrame(t)
	e := coefEncoder(t, data)
	if e.prevC.w != 1280 || e.prevC.h != 720 {
		t.Fatalf("frame is %dx%d", e.prevC.w, e.prevC.h)
	}
	want := toRGBA(t, data)
	// An atlas of 20 tiles of text: the paragraphs' columns 2..11, rows
	// 3 and 4.
	var rs []Rect
	for ty := 3; ty <= 4; ty++ {
		for tx := 2; tx < 12; tx++ {
			rs = append(rs, Rect{X: tx * Size, Y: ty * Size, W: Size, H: Size})
		}
	}
	at0, _ := e.Atlas(rs)
	t.Logf("the frame: %d bytes, tables %v; 20 tiles' atlas %d bytes", len(data), e.prevC.dqt[5:13], len(at0))
	prevF, prevA := len(data), len(at0)
	for tier := TierFrame + 1; tier < Tiers; tier++ {
		frame, _ := e.FrameTier(tier)
		at, _ := e.AtlasTier(rs, tier)
		mad := meanAbsDiff(toRGBA(t, frame), want)
		px := meanAbsDiff(toRGBA(t, jpegOf(t, want, tierQuality[tier])), want)
		t.Logf("tier %d (Q%d): frame %d bytes = %.2f×, atlas %d bytes = %.2f×; mean abs diff %.2f (pixels re-encoded: %.2f)",
			tier, tierQuality[tier], len(frame), float64(len(frame))/float64(len(data)), len(at), float64(len(at))/float64(len(at0)), mad, px)
		if len(frame) >= prevF || len(at) >= prevA {
			t.Errorf("tier %d costs no less than tier %d", tier, tier-1)
		}
		if mad > tierErrorBound(px) {
			t.Errorf("tier %d: mean abs diff %.2f, re-encoding the pixels loses %.2f", tier, mad, px)
		}
		prevF, prevA = len(frame), len(at)
	}
}

// textPage is a page of text as a reader sees one: headings, paragraphs,
// a link colour, a grey sidebar.
func textPage() string {
	words := strings.Fields(`the worker streams each browser as frames of what changed and a viewer on
	a slow link gets the same tiles with coarser steps so that typing stays quick while the page keeps
	its layout fonts and colours readable at every tier of the quality ladder`)
	var b strings.Builder
	b.WriteString(`<!doctype html><style>body{margin:0;font:16px/1.5 sans-serif;color:#222;display:flex}
	nav{width:220px;background:#f1f3f5;padding:16px;height:720px}main{padding:8px 32px;flex:1}
	a{color:#0645ad}h1{font:28px serif;border-bottom:1px solid #aaa}</style><nav>`)
	for i := range 20 {
		fmt.Fprintf(&b, "<div><a href=#>Section %d %s</a></div>", i+1, words[i%len(words)])
	}
	b.WriteString("</nav><main><h1>Frames that cost what changed</h1>")
	for p := range 8 {
		b.WriteString("<p>")
		for i := range 70 {
			w := words[(p*31+i*7)%len(words)]
			if i%17 == 5 {
				w = "<a href=#>" + w + "</a>"
			}
			b.WriteString(w + " ")
		}
		b.WriteString("</p>")
	}
	b.WriteString("</main>")
	return "data:text/html," + url.PathEscape(b.String())
}

var chromiumFrame struct {
	once sync.Once
	data []byte
	err  error
}

// chromiumTextFrame is Chromium's screencast frame of textPage at
// 1280×720 once it rests (the last frame), taken once per test binary.
func chromiumTextFrame(t testing.TB) []byte {
	t.Helper()
	testutil.NeedChromium(t)
	chromiumFrame.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		rt, err := chromium.New(ctx, chromium.Config{Logger: zerolog.Nop()})
		if err != nil {
			chromiumFrame.err = err
			return
		}
		defer rt.Close()
		b, err := rt.NewBrowser(ctx, browser.Options{URL: textPage(), Width: 1280, Height: 720})
		if err != nil {
			chromiumFrame.err = err
			return
		}
		defer b.Close(context.Background())
		for {
			var state string
			if err := b.Evaluate(ctx, "document.readyState", &state); err != nil || state == "complete" {
				chromiumFrame.err = err
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		// The frames until a quiet second: the last is the page at rest.
		frames := make(chan []byte, 64)
		cctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = b.Screencast(cctx, browser.ScreencastOptions{}, func(f browser.Frame) {
				select {
				case frames <- f.Data:
				default:
				}
			})
		}()
		for quiet := false; !quiet; {
			select {
			case d := <-frames:
				chromiumFrame.data = d
			case <-time.After(time.Second):
				quiet = chromiumFrame.data != nil
			case <-ctx.Done():
				quiet = true
			}
		}
		stop()
		<-done
		if chromiumFrame.data == nil && chromiumFrame.err == nil {
			chromiumFrame.err = fmt.Errorf("no frame: %w", ctx.Err())
		}
	})
	if chromiumFrame.err != nil {
		t.Fatal(chromiumFrame.err)
	}
	return chromiumFrame.data
}

// BenchmarkTier is the worker's CPU for the tiers, per 1280×720 frame
// (a text-like page at Q80): the whole frame at each tier, and an atlas
// of 20 text tiles at each, against the existing atlas path (Atlas, tier
// 0), Encode (a frame's decode and hashes, what every frame costs) and
// the pixel path's alternative to FrameTier (decode the frame, encode it
// at Q50). The sub-benchmarks time each alone; "ratios" runs them in
// turn in each iteration and reports each one's time over Atlas's (and
// FrameTier's over Encode's), figures a loaded machine changes less.
func BenchmarkTier(b *testing.B) {
	data := jpegOf(b, page(1280, 720, 1), 80)
	var rs []Rect
	for ty := 3; ty <= 4; ty++ {
		for tx := 2; tx < 12; tx++ {
			rs = append(rs, Rect{X: tx * Size, Y: ty * Size, W: Size, H: Size})
		}
	}
	e := coefEncoder(b, data)
	var fresh Encoder
	var out bytes.Buffer
	steps := []struct {
		name string
		run  func() bool
	}{
		{"atlas20/tier=0", func() bool { _, ok := e.AtlasTier(rs, 0); return ok }},
		{"atlas20/tier=1", func() bool { _, ok := e.AtlasTier(rs, 1); return ok }},
		{"atlas20/tier=2", func() bool { _, ok := e.AtlasTier(rs, 2); return ok }},
		{"frame/tier=1", func() bool { _, ok := e.FrameTier(1); return ok }},
		{"frame/tier=2", func() bool { _, ok := e.FrameTier(2); return ok }},
		{"encode", func() bool {
			fresh.Reset() // a keyframe each time: the decode and hashes only
			_, err := fresh.Encode(data)
			return err == nil
		}},
		{"frame/pixels-q50", func() bool {
			m, err := jpeg.Decode(bytes.NewReader(data))
			out.Reset()
			return err == nil && jpeg.Encode(&out, m, &jpeg.Options{Quality: 50}) == nil
		}},
	}
	for _, s := range steps {
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !s.run() {
					b.Fatal("failed")
				}
			}
		})
	}
	b.Run("ratios", func(b *testing.B) {
		took := make([]time.Duration, len(steps))
		for b.Loop() {
			for i, s := range steps {
				t0 := time.Now()
				if !s.run() {
					b.Fatal(s.name, " failed")
				}
				took[i] += time.Since(t0)
			}
		}
		for i, s := range steps[1:] {
			b.ReportMetric(float64(took[i+1])/float64(took[0]), s.name+"/atlas")
		}
		for i, s := range steps[3:5] {
			b.ReportMetric(float64(took[i+3])/float64(took[5]), s.name+"/encode")
		}
	})
}

// meanAbsDiff is the mean absolute difference of a and b's RGB channels
// (same bounds).
func meanAbsDiff(a, b *image.RGBA) float64 {
	sum, n := 0, 0
	for i := 0; i < len(a.Pix); i += 4 {
		for c := range 3 {
			d := int(a.Pix[i+c]) - int(b.Pix[i+c])
			sum += max(d, -d)
		}
		n += 3
	}
	return float64(sum) / float64(n)
}

// maxDiffAt is maxDiff of two same-size images at different origins.
func maxDiffAt(a, b image.Image) int {
	ab, bb := a.Bounds(), b.Bounds()
	worst := 0
	for y := range ab.Dy() {
		for x := range ab.Dx() {
			r1, g1, b1, _ := a.At(ab.Min.X+x, ab.Min.Y+y).RGBA()
			r2, g2, b2, _ := b.At(bb.Min.X+x, bb.Min.Y+y).RGBA()
			for _, d := range []int{int(r1>>8) - int(r2>>8), int(g1>>8) - int(g2>>8), int(b1>>8) - int(b2>>8)} {
				worst = max(worst, d, -d)
			}
		}
	}
	return worst
}

// jpeg444 encodes m as a 4:4:4 baseline JPEG at libjpeg's quality q
// (image/jpeg writes only 4:2:0): a float forward DCT, the Annex K
// tables, and the standard Huffman tables, or with own, the frame's own
// ones: luma's and chroma's swapped (both code every symbol), so the
// coefficient path must read them from the frame.
func jpeg444(t testing.TB, m image.Image, q int, own bool) []byte {
	t.Helper()
	bd := m.Bounds()
	w, h := bd.Dx(), bd.Dy()
	var planes [3][]float64
	for c := range planes {
		planes[c] = make([]float64, w*h)
	}
	for y := range h {
		for x := range w {
			r, g, b, _ := m.At(bd.Min.X+x, bd.Min.Y+y).RGBA()
			yy, cb, cr := color.RGBToYCbCr(uint8(r>>8), uint8(g>>8), uint8(b>>8))
			planes[0][y*w+x], planes[1][y*w+x], planes[2][y*w+x] = float64(yy), float64(cb), float64(cr)
		}
	}
	var tabs quantTables
	for id := range 2 {
		tabs.set[id] = true
		for k := range 64 {
			tabs.q[id][k] = libjpegStep(annexK[id][k], q)
		}
	}
	var out bytes.Buffer
	out.Write([]byte{0xFF, 0xD8})
	out.Write(tabs.appendDQT(nil))
	out.Write([]byte{0xFF, 0xC0, 0, 17, 8, byte(h >> 8), byte(h), byte(w >> 8), byte(w), 3, 1, 0x11, 0, 2, 0x11, 1, 3, 0x11, 1})
	enc := [3]*encTables{&stdTables[0], &stdTables[1], &stdTables[1]}
	if own {
		dht := []byte{0xFF, 0xC4, 0, 0}
		for i, s := range stdSpecs {
			dht = append(append(append(dht, byte(i%2)<<4|byte(1-i/2)), s.counts[:]...), s.vals...)
		}
		dht[2], dht[3] = byte((len(dht)-2)>>8), byte(len(dht)-2)
		out.Write(dht)
		enc = [3]*encTables{&stdTables[1], &stdTables[0], &stdTables[0]}
	} else {
		out.Write(stdDHT)
	}
	out.Write([]byte{0xFF, 0xDA, 0, 12, 3, 1, 0x00, 2, 0x11, 3, 0x11, 0, 63, 0})
	bw := bitWriter{out: &out}
	var pred [3]int32
	blk := make([]int16, 64)
	for by := 0; by < h; by += 8 {
		for bx := 0; bx < w; bx += 8 {
			for c := range 3 {
				var px [64]float64
				for y := range 8 {
					for x := range 8 {
						px[y*8+x] = planes[c][min(by+y, h-1)*w+min(bx+x, w-1)] - 128
					}
				}
				coef := fdct(&px)
				for k := range 64 {
					blk[k] = int16(math.Round(coef[rqUnzig[k]] / float64(tabs.q[min(c, 1)][k])))
				}
				bw.block(blk, &pred[c], enc[c])
			}
		}
	}
	bw.flush()
	out.Write([]byte{0xFF, 0xD9})
	return out.Bytes()
}

// fdct is the 8×8 forward DCT (A.3.3) of px, natural order.
func fdct(px *[64]float64) (out [64]float64) {
	var tmp [64]float64
	for y := range 8 {
		for u := range 8 {
			s := 0.0
			for x := range 8 {
				s += px[y*8+x] * dctBasis[u][x]
			}
			tmp[y*8+u] = s / 2
		}
	}
	for v := range 8 {
		for u := range 8 {
			s := 0.0
			for y := range 8 {
				s += tmp[y*8+u] * dctBasis[v][y]
			}
			out[v*8+u] = s / 2
		}
	}
	return out
}

// dctBasis[u][x] is C(u) cos((2x+1)uπ/16).
var dctBasis = func() (b [8][8]float64) {
	for u := range 8 {
		for x := range 8 {
			b[u][x] = math.Cos(float64(2*x+1) * float64(u) * math.Pi / 16)
			if u == 0 {
				b[u][x] /= math.Sqrt2
			}
		}
	}
	return b
}()

// rqUnzig maps zig-zag order to natural order.
var rqUnzig = [64]int{
	0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5,
	12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6, 7, 14, 21, 28,
	35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51,
	58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
}
