package engine

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"image"
	"image/color"
	"image/draw"
	"image/jpeg"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// TestFrameBytes: a client gets a frame's tile update only if it composes
// tiles and the last frame it was sent is the update's base; else the
// whole frame (a keyframe), so its screen is never torn.
func TestFrameBytes(t *testing.T) {
	whole, delta := []byte("whole"), []byte("delta")
	tests := []struct {
		name  string
		tiles bool
		sent  uint64 // the last frame sent to the client
		f     *frameMsg
		want  []byte
	}{
		{"an engine without tiles", false, 4, &frameMsg{seq: 5, b: whole, delta: delta, base: 4}, whole},
		{"the next frame", true, 4, &frameMsg{seq: 5, b: whole, delta: delta, base: 4}, delta},
		{"after skipped frames, no history to make their union", true, 3, &frameMsg{seq: 5, b: whole, delta: delta, base: 4}, whole},
		{"the first frame, or after a refresh", true, 0, &frameMsg{seq: 5, b: whole, delta: delta, base: 4}, whole},
		{"a keyframe", true, 4, &frameMsg{seq: 5, b: whole}, whole},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &client{}
			c.tiles.Store(tc.tiles)
			c.sentSeq.Store(tc.sent)
			if got := frameBytes(c, tc.f); !bytes.Equal(got, tc.want) {
				t.Fatalf("sent %q, want %q", got, tc.want)
			}
			if c.sentSeq.Load() != tc.f.seq {
				t.Fatalf("last sent %d, want %d", c.sentSeq.Load(), tc.f.seq)
			}
		})
	}
}

// TestAddTiles: frames get a tile update from the frame before only while
// some client composes tiles; its header names the base and the tiles.
func TestAddTiles(t *testing.T) {
	frame := func(seq uint64, caret int) (browser.Frame, *frameMsg) {
		f := caretFrame(t, seq, caret)
		return f, &frameMsg{seq: seq, b: encodeFrame(f), hdr: headerOf(f)}
	}
	ht := newHubTiles(0)
	steps := []struct {
		users     int32
		caret     int
		wantDelta bool
		wantTiles [][4]int
	}{
		{0, 10, false, nil}, // nobody composes tiles
		{1, 10, false, nil}, // the first frame diffed: nothing to diff against
		{1, 100, true, [][4]int{{0, 64, 64, 64}, {64, 64, 64, 64}}}, // the caret moved
		{1, 100, true, [][4]int{}},                                  // a repaint of the same pixels
		{0, 150, false, nil},                                        // the last tile client left
		{1, 150, false, nil},                                        // back: a keyframe first
	}
	var prev uint64
	for i, st := range steps {
		ht.users.Store(st.users)
		seq := uint64(i + 1)
		f, msg := frame(seq, st.caret)
		addTiles(ht, f, msg)
		if (msg.delta != nil) != st.wantDelta {
			t.Fatalf("step %d: delta %v, want %v", i, msg.delta != nil, st.wantDelta)
		}
		if msg.delta != nil {
			n := binary.BigEndian.Uint32(msg.delta)
			var hdr tileHeader
			if err := json.Unmarshal(msg.delta[4:4+n], &hdr); err != nil {
				t.Fatal(err)
			}
			if hdr.Seq != seq || hdr.Base != prev || msg.base != prev || len(hdr.Tiles) != len(st.wantTiles) {
				t.Fatalf("step %d: header %+v (base %d), want seq %d base %d tiles %v", i, hdr, msg.base, seq, prev, st.wantTiles)
			}
			for j := range hdr.Tiles {
				if hdr.Tiles[j] != st.wantTiles[j] {
					t.Fatalf("step %d: tiles %v, want %v", i, hdr.Tiles, st.wantTiles)
				}
			}
			if _, err := jpeg.Decode(bytes.NewReader(msg.delta[4+n:])); len(hdr.Tiles) > 0 && err != nil {
				t.Fatalf("step %d: atlas: %v", i, err)
			}
			if len(msg.delta) >= len(msg.b) {
				t.Fatalf("step %d: an update of %d bytes for a frame of %d", i, len(msg.delta), len(msg.b))
			}
		}
		prev = seq
	}
}

// caretFrame is a 320×200 frame with a caret at x = caret, y 70..90.
func caretFrame(t *testing.T, seq uint64, caret int) browser.Frame {
	t.Helper()
	m := image.NewRGBA(image.Rect(0, 0, 320, 200))
	draw.Draw(m, m.Bounds(), image.NewUniform(color.RGBA{240, 240, 240, 255}), image.Point{}, draw.Src)
	draw.Draw(m, image.Rect(caret, 70, caret+2, 90), image.NewUniform(color.RGBA{0, 0, 0, 255}), image.Point{}, draw.Src)
	var b bytes.Buffer
	if err := jpeg.Encode(&b, m, &jpeg.Options{Quality: 80}); err != nil {
		t.Fatal(err)
	}
	return browser.Frame{Seq: seq, Data: b.Bytes(), Width: 320, Height: 200, DeviceWidth: 320, DeviceHeight: 200, Timestamp: time.Now()}
}

// TestHubTileUpdates: through a hub's sockets, an engine that said it
// composes tiles gets a frame whole, then the next as a tile update on
// it, and whole again after a refresh; an engine that did not say gets
// every frame whole.
func TestHubTileUpdates(t *testing.T) {
	f := newHubFixture(t, func(c *Config) { c.Tiles = true })
	tiled, _ := f.dial(t, AccessOwner)
	plain, _ := f.dial(t, AccessRead)
	_ = tiled.WriteJSON(map[string]any{"t": "caps", "tiles": true})
	_ = tiled.WriteJSON(map[string]any{"t": "ping", "seq": 1}) // answered once caps is taken
	if m, err := nextText(t, tiled); err != nil || m["t"] != "pong" {
		t.Fatalf("pong: %v %v", m, err)
	}
	next := func(conn *websocket.Conn) (seq, base uint64) {
		h := nextHeader(t, conn)
		return h.Seq, h.Base
	}
	steps := []struct {
		seq       uint64
		caret     int
		refresh   bool
		tiledBase uint64 // the tiled engine's update base (0: whole)
	}{
		{seq: 1, caret: 10},
		{seq: 2, caret: 100, tiledBase: 1},
		{seq: 3, caret: 200, tiledBase: 2},
		{seq: 3, refresh: true}, // the last frame again, whole
		{seq: 4, caret: 10, tiledBase: 3},
	}
	for i, st := range steps {
		if st.refresh {
			_ = tiled.WriteJSON(map[string]any{"t": "refresh"})
		} else {
			f.fb.Frames <- caretFrame(t, st.seq, st.caret)
			if seq, base := next(plain); seq != st.seq || base != 0 {
				t.Fatalf("step %d: the plain engine got frame %d on base %d, want %d whole", i, seq, base, st.seq)
			}
		}
		if seq, base := next(tiled); seq != st.seq || base != st.tiledBase {
			t.Fatalf("step %d: the tiled engine got frame %d on base %d, want %d on %d", i, seq, base, st.seq, st.tiledBase)
		}
	}
	if s := HubTileStats(f.h); s.Encoded != 4 || s.Deltas != 3 {
		t.Fatalf("tile stats %+v, want 4 frames diffed, 3 updates", s)
	}
}

// TestUnionTiles: a viewer whose pacing skipped frames gets the newest
// frame as one update from the last frame it got: the union of the
// skipped frames' tiles; the whole frame if that cannot be made.
func TestUnionTiles(t *testing.T) {
	ht := newHubTiles(0)
	ht.users.Store(1)
	msgs := map[uint64]*frameMsg{}
	feed := func(seq uint64, caret, width int) {
		f := caretFrame(t, seq, caret)
		if width != 320 { // a resize
			f = resized(t, f, width)
		}
		msgs[seq] = &frameMsg{seq: seq, b: encodeFrame(f), hdr: headerOf(f)}
		addTiles(ht, f, msgs[seq])
	}
	// Frames 1..4: the caret at 10, 100, 200, 250 (tiles 0, 1, 3, 3).
	for i, caret := range []int{10, 100, 200, 250} {
		feed(uint64(i+1), caret, 320)
	}
	tests := []struct {
		name  string
		sent  uint64 // the viewer's last frame
		f     uint64
		tiles [][4]int // nil: the whole frame
	}{
		{"one frame skipped", 2, 4, [][4]int{{64, 64, 64, 64}, {192, 64, 64, 64}}},
		{"two frames skipped", 1, 4, [][4]int{{0, 64, 64, 64}, {64, 64, 64, 64}, {192, 64, 64, 64}}},
		{"the viewer's frame unknown", 9, 4, nil},
		{"not the newest frame", 1, 3, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &client{tileSrc: ht}
			c.tiles.Store(true)
			c.sentSeq.Store(tc.sent)
			got := frameBytes(c, msgs[tc.f])
			if tc.tiles == nil {
				if !bytes.Equal(got, msgs[tc.f].b) {
					t.Fatal("not the whole frame")
				}
				return
			}
			n := binary.BigEndian.Uint32(got)
			var hdr tileHeader
			if err := json.Unmarshal(got[4:4+n], &hdr); err != nil {
				t.Fatal(err)
			}
			if hdr.Seq != tc.f || hdr.Base != tc.sent || len(hdr.Tiles) != len(tc.tiles) {
				t.Fatalf("header seq %d base %d tiles %v, want %d, %d, %v", hdr.Seq, hdr.Base, hdr.Tiles, tc.f, tc.sent, tc.tiles)
			}
			for i := range hdr.Tiles {
				if hdr.Tiles[i] != tc.tiles[i] {
					t.Fatalf("tiles %v, want %v", hdr.Tiles, tc.tiles)
				}
			}
			atlas, err := jpeg.Decode(bytes.NewReader(got[4+n:]))
			if err != nil || atlas.Bounds().Dy() != 64*len(tc.tiles) {
				t.Fatalf("atlas: %v %v", atlas, err)
			}
		})
	}
	// A resize between: no union across it.
	feed(5, 250, 300)
	feed(6, 10, 300)
	c := &client{tileSrc: ht}
	c.tiles.Store(true)
	c.sentSeq.Store(4)
	if got := frameBytes(c, msgs[6]); !bytes.Equal(got, msgs[6].b) {
		t.Fatal("a union across a resize")
	}
}

// resized is f's picture cropped to width.
func resized(t *testing.T, f browser.Frame, width int) browser.Frame {
	t.Helper()
	m, err := jpeg.Decode(bytes.NewReader(f.Data))
	if err != nil {
		t.Fatal(err)
	}
	out := image.NewRGBA(image.Rect(0, 0, width, f.Height))
	draw.Draw(out, out.Bounds(), m, image.Point{}, draw.Src)
	var b bytes.Buffer
	if err := jpeg.Encode(&b, out, &jpeg.Options{Quality: 80}); err != nil {
		t.Fatal(err)
	}
	f.Data, f.Width, f.DeviceWidth = b.Bytes(), width, float64(width)
	return f
}

// scrollFrame is a 320×400 viewport at scroll y of a tall page of
// coloured glyphs (their chroma blocks do not line up after a move by
// 120: the move leaves near tiles).
func scrollFrame(t *testing.T, seq uint64, y int) browser.Frame {
	t.Helper()
	m := image.NewRGBA(image.Rect(0, 0, 320, 400))
	draw.Draw(m, m.Bounds(), image.NewUniform(color.RGBA{250, 250, 248, 255}), image.Point{}, draw.Src)
	for py := 8; py < 2000; py += 20 {
		for px := 8; px+6 < 320; px += 9 {
			if (px*7+py*3)%5 == 0 || py-y < -20 || py-y > 420 {
				continue
			}
			ink := color.RGBA{uint8(px % 60), uint8(py % 50), uint8(60 + (px*py)%120), 255}
			draw.Draw(m, image.Rect(px, py-y, px+5, py-y+12), image.NewUniform(ink), image.Point{}, draw.Src)
		}
	}
	var b bytes.Buffer
	if err := jpeg.Encode(&b, m, &jpeg.Options{Quality: 80}); err != nil {
		t.Fatal(err)
	}
	return browser.Frame{Seq: seq, Data: b.Bytes(), Width: 320, Height: 400, DeviceWidth: 320, DeviceHeight: 400, ScrollY: float64(y), Timestamp: time.Now()}
}

// TestHubScrollMoves: a frame scrolled since the last is an update that
// moves the screen ("mv") and carries fewer tiles than the frame has;
// the tiles the move left near are repaired once no frame follows, as
// an update of that frame on itself; an engine without tiles gets whole
// frames only.
func TestHubScrollMoves(t *testing.T) {
	f := newHubFixture(t, func(c *Config) { c.Tiles = true })
	tiled, _ := f.dial(t, AccessOwner)
	plain, _ := f.dial(t, AccessRead)
	_ = tiled.WriteJSON(map[string]any{"t": "caps", "tiles": true})
	_ = tiled.WriteJSON(map[string]any{"t": "ping", "seq": 1})
	if m, err := nextText(t, tiled); err != nil || m["t"] != "pong" {
		t.Fatalf("pong: %v %v", m, err)
	}
	next := func(conn *websocket.Conn) tileHeader { return nextHeader(t, conn) }
	f.fb.Frames <- scrollFrame(t, 1, 0)
	if h := next(tiled); h.Base != 0 {
		t.Fatalf("the first frame is an update: %+v", h)
	}
	next(plain)
	f.fb.Frames <- scrollFrame(t, 2, 120)
	h := next(tiled)
	if h.Base != 1 || h.Mv == nil || *h.Mv != [2]int{0, 120} {
		t.Fatalf("the scrolled frame: base %d move %v, want a move by 120 on 1", h.Base, h.Mv)
	}
	if len(h.Tiles) == 0 || len(h.Tiles) >= 35/2 || h.Near == 0 {
		t.Fatalf("the move sent %d of 35 tiles and left %d near; want a few, and some near", len(h.Tiles), h.Near)
	}
	if p := next(plain); p.Base != 0 || p.Mv != nil {
		t.Fatalf("the plain engine got an update: %+v", p)
	}
	// No frame follows: the repair comes, on frame 2 itself.
	r := next(tiled)
	if r.Seq != 2 || r.Base != 2 || r.Mv != nil || r.Near != 0 || len(r.Tiles) != h.Near {
		t.Fatalf("the repair: seq %d base %d move %v near %d, %d tiles; want %d tiles on 2", r.Seq, r.Base, r.Mv, r.Near, len(r.Tiles), h.Near)
	}
	if s := HubTileStats(f.h); s.Moves != 1 || s.Repairs != 1 {
		t.Fatalf("tile stats %+v, want a move and a repair", s)
	}
	// The plain engine got nothing more: its frame 2 was whole.
	f.fb.Frames <- scrollFrame(t, 3, 120)
	if p := next(plain); p.Seq != 3 {
		t.Fatalf("the plain engine's next frame is %d, want 3", p.Seq)
	}
}

// nextHeader reads conn's next frame message, acknowledges it and returns
// its header (base 0: a whole frame).
func nextHeader(t *testing.T, conn *websocket.Conn) tileHeader {
	t.Helper()
	for {
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		typ, data, err := conn.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		if typ != websocket.BinaryMessage {
			continue
		}
		n := binary.BigEndian.Uint32(data)
		var hdr tileHeader
		if err := json.Unmarshal(data[4:4+n], &hdr); err != nil {
			t.Fatal(err)
		}
		if (hdr.Tiles != nil) != (hdr.Base != 0) {
			t.Fatalf("header %s: tiles and base go together", data[4:4+n])
		}
		_ = conn.WriteJSON(map[string]any{"t": "ack", "seq": hdr.Seq})
		return hdr
	}
}
