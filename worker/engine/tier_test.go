package engine

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"image"
	"image/color"
	"image/draw"
	"image/jpeg"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// inkFrame is a 320×400 frame of coloured glyphs (content a coarser
// quantization shrinks) with a caret at x = caret.
func inkFrame(t *testing.T, seq uint64, caret int) browser.Frame {
	t.Helper()
	m := image.NewRGBA(image.Rect(0, 0, 320, 400))
	draw.Draw(m, m.Bounds(), image.NewUniform(color.RGBA{250, 250, 248, 255}), image.Point{}, draw.Src)
	for py := 8; py < 390; py += 20 {
		for px := 8; px+6 < 320; px += 9 {
			ink := color.RGBA{uint8(px % 60), uint8(py % 50), uint8(60 + (px*py)%120), 255}
			draw.Draw(m, image.Rect(px, py, px+5, py+12), image.NewUniform(ink), image.Point{}, draw.Src)
		}
	}
	draw.Draw(m, image.Rect(caret, 100, caret+2, 130), image.NewUniform(color.RGBA{0, 0, 0, 255}), image.Point{}, draw.Src)
	var b bytes.Buffer
	if err := jpeg.Encode(&b, m, &jpeg.Options{Quality: 80}); err != nil {
		t.Fatal(err)
	}
	return browser.Frame{Seq: seq, Data: b.Bytes(), Width: 320, Height: 400, DeviceWidth: 320, DeviceHeight: 400, Timestamp: time.Now()}
}

// dcStep is a JPEG's first quantization table's DC step: 6 for the
// frames above (quality 80), coarser for a tier.
func dcStep(t *testing.T, img []byte) int {
	t.Helper()
	i := bytes.Index(img, []byte{0xFF, 0xDB})
	if i < 0 || len(img) < i+6 {
		t.Fatal("no quantization table")
	}
	return int(img[i+5])
}

// TestViewerTiers: of two viewers composing tiles, the one whose acks
// come late gets its frames requantized, the other's stay as Chromium
// sent them; once the slow one's acks are fast again, it is back on the
// frames' own quality, starting with a whole frame; and slow again, it
// gets the last frame sharp once the page rests.
func TestViewerTiers(t *testing.T) {
	f := newHubFixture(t, func(c *Config) { c.Tiles = true })
	fast, _ := f.dial(t, AccessOwner)
	slow, _ := f.dial(t, AccessRead)
	for _, conn := range []interface{ WriteJSON(any) error }{fast, slow} {
		_ = conn.WriteJSON(map[string]any{"t": "caps", "tiles": true})
	}
	type got struct {
		seq, base uint64
		dc        int
	}
	var mu sync.Mutex
	var slowGot []got
	var slowDelay atomic.Int64
	slowDelay.Store(int64(400 * time.Millisecond))
	read := func(conn interface {
		ReadMessage() (int, []byte, error)
		WriteJSON(any) error
	}, record func(got), delay func() time.Duration) {
		for {
			typ, data, err := conn.ReadMessage()
			if err != nil {
				return
			}
			if typ != 2 { // binary
				continue
			}
			n := binary.BigEndian.Uint32(data)
			var hdr tileHeader
			if err := json.Unmarshal(data[4:4+n], &hdr); err != nil {
				t.Error(err)
				return
			}
			record(got{hdr.Seq, hdr.Base, dcStep(t, data[4+n:])})
			time.Sleep(delay())
			_ = conn.WriteJSON(map[string]any{"t": "ack", "seq": hdr.Seq})
		}
	}
	var fastDC atomic.Int64
	go read(fast, func(g got) { fastDC.Store(int64(g.dc)) }, func() time.Duration { return 0 })
	go read(slow, func(g got) { mu.Lock(); slowGot = append(slowGot, g); mu.Unlock() }, func() time.Duration { return time.Duration(slowDelay.Load()) })

	var seq atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // a typing user: a frame every 100 ms
		defer close(done)
		for {
			s := seq.Add(1)
			select {
			case f.fb.Frames <- inkFrame(t, s, 10+int(s%20)*12):
			case <-stop:
				return
			}
			select {
			case <-time.After(100 * time.Millisecond):
			case <-stop:
				return
			}
		}
	}()
	var stopOnce sync.Once
	stopTyping := func() { stopOnce.Do(func() { close(stop); <-done }) }
	defer stopTyping()

	last := func() got {
		mu.Lock()
		defer mu.Unlock()
		if len(slowGot) == 0 {
			return got{}
		}
		return slowGot[len(slowGot)-1]
	}
	testutil.Eventually(t, 30*time.Second, testutil.Cond("the slow viewer's frames requantized", func() bool { return last().dc > 6 }))
	if dc := fastDC.Load(); dc != 6 {
		t.Fatalf("the fast viewer's frames have a DC step of %d, want the frame's own 6", dc)
	}
	mu.Lock()
	switched := len(slowGot)
	mu.Unlock()
	slowDelay.Store(0)
	testutil.Eventually(t, 30*time.Second, testutil.Cond("the slow viewer back on the frames' quality", func() bool { return last().dc == 6 }))
	mu.Lock()
	for _, g := range slowGot[switched:] {
		if g.dc == 6 {
			if g.base != 0 {
				t.Fatalf("the first frame back on the frames' quality is an update on %d, not whole", g.base)
			}
			break
		}
	}
	mu.Unlock()

	// Slow again, then the page rests: the slow viewer's last frame comes
	// again at the frame's own quality, whole.
	slowDelay.Store(int64(400 * time.Millisecond))
	testutil.Eventually(t, 30*time.Second, testutil.Cond("the slow viewer's frames requantized again", func() bool { return last().dc > 6 }))
	stopTyping()
	testutil.Eventually(t, 30*time.Second, testutil.Cond("a sharp whole frame once the page rests", func() bool {
		g := last()
		return g.dc == 6 && g.base == 0
	}))
}
