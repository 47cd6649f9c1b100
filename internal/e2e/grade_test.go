package e2e

import (
	"context"
	bin "encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
)

// gradedWorker makes every typed key count as slow, so typing grades the
// frames down at once (worker/grade); the frames recover after 3 calm
// seconds per step.
var gradedWorker = []string{"--frame-latency-high", "1ms", "--frame-latency-low", "500us", "--frame-sharpen", "300ms"}

// TestFramesGradedUnderLoad: on a worker whose input→frame latency is over
// its limit, a typing viewer gets smaller frames (half size at most), then
// one full-size frame when the page rests and nothing after it; when the
// latency is low again, frames are full size again.
func TestFramesGradedUnderLoad(t *testing.T) {
	c := appsCluster(t, gradedWorker...)
	scale := func() float64 { return c.workerMetric(t, "cloudbrowser_screencast_frame_scale") }
	u := newUser(t, "http://"+c.public)
	path := lastHop(t, u.open("/typing"))
	fs := watchFrames(t, dialSocket(t, u, "ws://"+c.public+path+"/ws"))
	next, settle, input := fs.next, fs.settle, fs.input
	first, ok := next(30 * time.Second)
	if !ok {
		t.Fatal("no first frame")
	}
	full := settle("first frames", first)
	if full.W == 0 || float64(full.W) != full.DW {
		t.Fatalf("at rest: frame %dx%d for a %vx%v page, want full size", full.W, full.H, full.DW, full.DH)
	}
	input(map[string]any{"type": "mousedown", "x": 100, "y": 60, "button": "left", "buttons": 1, "clickCount": 1})
	input(map[string]any{"type": "mouseup", "x": 100, "y": 60, "button": "left", "clickCount": 1})
	settle("focus", full)

	// Type 10 keys a second until a half-size frame comes.
	var small frameHeader
	testutil.Eventually(t, 60*time.Second, func() error {
		for i := range 10 {
			key := string(rune('a' + i))
			input(map[string]any{"type": "keydown", "key": key})
			input(map[string]any{"type": "keyup", "key": key})
			time.Sleep(100 * time.Millisecond)
		}
		for {
			f, ok := next(0)
			if !ok {
				return fmt.Errorf("no half-size frame yet (scale %v)", scale())
			}
			if f.W*2 == int(f.DW) {
				small = f
				return nil
			}
		}
	})
	if got := scale(); got != 0.5 {
		t.Errorf("scale metric %v while typing on a slow worker, want 0.5", got)
	}
	// The page rests: the last frame is a sharp one, and none follows.
	last := settle("after typing", small)
	if float64(last.W) != last.DW || last.Seq <= small.Seq {
		t.Fatalf("page at rest after typing: last frame %dx%d (seq %d) for a %vx%v page, want full size after seq %d",
			last.W, last.H, last.Seq, last.DW, last.DH, small.Seq)
	}
	if f, ok := next(3 * time.Second); ok {
		t.Fatalf("a frame (%dx%d) after the sharp one, for a page at rest", f.W, f.H)
	}
	// Calm again: full size, and typing paints full-size frames.
	testutil.Eventually(t, 30*time.Second, func() error {
		if s := scale(); s != 1 {
			return fmt.Errorf("scale %v", s)
		}
		return nil
	})
	// A new scale takes effect at the next frame (the screencast restarts
	// at that size): the key after that paints a full-size frame.
	for _, key := range []string{"y", "z"} {
		input(map[string]any{"type": "keydown", "key": key})
		input(map[string]any{"type": "keyup", "key": key})
		f, ok := next(30 * time.Second)
		if !ok {
			t.Fatalf("no frame for key %q", key)
		}
		if f = settle("key "+key, f); float64(f.W) != f.DW {
			t.Fatalf("a key on a calm worker: last frame %+v, want full size", f)
		}
	}
	input(map[string]any{"type": "keydown", "key": "x"})
	input(map[string]any{"type": "keyup", "key": "x"})
	if f, ok := next(30 * time.Second); !ok || float64(f.W) != f.DW {
		t.Fatalf("a key on a calm worker: frame %+v (%v), want full size", f, ok)
	}
}

// TestGradedFramesKeepInputWhereTheUserPoints: a real user types and
// clicks through the client engine while the frames are half size; the
// engine draws them at the page's size, so the click lands on the button
// the user sees.
func TestGradedFramesKeepInputWhereTheUserPoints(t *testing.T) {
	c := appsCluster(t, "--frame-latency-high", "1ms", "--frame-latency-low", "500us", "--frame-sharpen", "1h")
	users := userBrowsers(t)
	alice := open(t, users, "http://"+c.public+"/typing")
	eventually(t, alice, "the engine connects", "document.body.dataset.status", "live")
	eventually(t, alice, "frames", "Number(document.body.dataset.frames || 0) > 0", "true")
	x0, y0 := canvasOrigin(t, alice)
	click(t, alice, x0+60, y0+60)
	testutil.Eventually(t, 60*time.Second, func() error {
		typeText(t, alice, "abcdefghij")
		if s := c.workerMetric(t, "cloudbrowser_screencast_frame_scale"); s != 0.5 {
			return fmt.Errorf("scale %v", s)
		}
		return nil
	})
	// The canvas shows half-size frames at full size (sharpening is off
	// here): the button is where the page has it, 20+60 by 120+20.
	eventually(t, alice, "the canvas is drawn at the page's size", "document.querySelector('canvas').clientWidth > 600", "true")
	click(t, alice, x0+80, y0+140)
	eventually(t, alice, "the click reached the button", "document.title.includes('|clicks:1')", "true")
}

// frameHeader is what a test reads of a frame message.
type frameHeader struct {
	Seq    uint64
	W, H   int
	DW, DH float64
	Bytes  int // of the JPEG
}

// frameSocket reads a client engine socket's frames, acknowledging each as
// the engine does, and sends input.
type frameSocket struct {
	t      *testing.T
	frames chan frameHeader
	wmu    sync.Mutex // one writer at a time: acks and input
	conn   *websocket.Conn
}

func watchFrames(t *testing.T, conn *websocket.Conn) *frameSocket {
	fs := &frameSocket{t: t, frames: make(chan frameHeader, 256), conn: conn}
	go func() {
		defer close(fs.frames)
		for {
			mt, b, err := conn.ReadMessage()
			if err != nil {
				return
			}
			if mt != websocket.BinaryMessage || len(b) < 4 {
				continue
			}
			n := bin.BigEndian.Uint32(b)
			var h struct {
				Seq uint64  `json:"seq"`
				W   int     `json:"w"`
				H   int     `json:"h"`
				DW  float64 `json:"dw"`
				DH  float64 `json:"dh"`
			}
			if err := json.Unmarshal(b[4:4+n], &h); err != nil {
				t.Errorf("frame header: %v", err)
				return
			}
			fs.frames <- frameHeader{Seq: h.Seq, W: h.W, H: h.H, DW: h.DW, DH: h.DH, Bytes: len(b) - 4 - int(n)}
			_ = fs.write(map[string]any{"t": "ack", "seq": h.Seq})
		}
	}()
	return fs
}

func (fs *frameSocket) write(v any) error {
	fs.wmu.Lock()
	defer fs.wmu.Unlock()
	return fs.conn.WriteJSON(v)
}

func (fs *frameSocket) input(ev map[string]any) {
	ev["t"] = "input"
	if err := fs.write(ev); err != nil {
		fs.t.Fatal(err)
	}
}

// next returns the next frame within d (ok false: none came); d 0 takes
// only a frame already there.
func (fs *frameSocket) next(d time.Duration) (frameHeader, bool) {
	var timeout <-chan time.Time
	if d > 0 {
		timeout = time.After(d)
	} else {
		c := make(chan time.Time)
		close(c)
		timeout = c
	}
	select {
	case f, ok := <-fs.frames:
		if !ok {
			fs.t.Fatal("socket closed")
		}
		return f, true
	default:
	}
	select {
	case f, ok := <-fs.frames:
		if !ok {
			fs.t.Fatal("socket closed")
		}
		return f, true
	case <-timeout:
		return frameHeader{}, false
	}
}

// settle drains frames until a second passes without one, returning the
// last (last if none came).
func (fs *frameSocket) settle(what string, last frameHeader) frameHeader {
	fs.t.Helper()
	for range 100 {
		f, ok := fs.next(time.Second)
		if !ok {
			return last
		}
		last = f
	}
	fs.t.Fatalf("%s: frames keep coming", what)
	return last
}

// throttledConn reads at most rate bytes a second (0 = unlimited): a
// viewer's slow link, as TCP backpressure makes it look to the worker.
type throttledConn struct {
	net.Conn
	rate atomic.Int64
	next time.Time // when the bytes read so far have "arrived"
}

func (c *throttledConn) Read(p []byte) (int, error) {
	r := c.rate.Load()
	if r == 0 {
		return c.Conn.Read(p)
	}
	n, err := c.Conn.Read(p[:min(len(p), 2048)])
	now := time.Now()
	if c.next.Before(now) {
		c.next = now
	}
	c.next = c.next.Add(time.Duration(n) * time.Second / time.Duration(r))
	time.Sleep(time.Until(c.next))
	return n, err
}

// TestFramesGradedToASlowLink: a viewer on a 128 kbit/s link gets smaller,
// coarser frames (the worker sees its acks come slowly), so typing still
// shows within a frame or two instead of seconds behind; once the link is
// fast again, frames are full size again.
func TestFramesGradedToASlowLink(t *testing.T) {
	c := appsCluster(t)
	graded := func() float64 { return c.workerMetric(t, "cloudbrowser_screencast_link_graded_browsers") }
	u := newUser(t, "http://"+c.public)
	path := lastHop(t, u.open("/typing"))
	wsURL := "ws://" + c.public + path + "/ws"
	var link *throttledConn
	dialer := websocket.Dialer{NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		link = &throttledConn{Conn: conn}
		return link, nil
	}}
	conn, _, err := dialer.DialContext(ctxT(t, 10*time.Second), wsURL, u.socketHeader(wsURL))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fs := watchFrames(t, conn)
	first, ok := fs.next(30 * time.Second)
	if !ok {
		t.Fatal("no first frame")
	}
	full := fs.settle("first frames", first)
	fs.input(map[string]any{"type": "mousedown", "x": 100, "y": 60, "button": "left", "buttons": 1, "clickCount": 1})
	fs.input(map[string]any{"type": "mouseup", "x": 100, "y": 60, "button": "left", "clickCount": 1})
	fs.settle("focus", full)

	// typeUntil types 2 keys a second until a frame satisfies ok.
	typeUntil := func(what string, ok func(frameHeader) bool) frameHeader {
		t.Helper()
		var got frameHeader
		k := 0
		testutil.Eventually(t, 60*time.Second, func() error {
			key := string(rune('a' + k%26))
			k++
			fs.input(map[string]any{"type": "keydown", "key": key})
			fs.input(map[string]any{"type": "keyup", "key": key})
			deadline := time.After(500 * time.Millisecond)
			for {
				select {
				case <-deadline:
					return fmt.Errorf("%s: not yet (link graded: %v)", what, graded())
				default:
				}
				f, has := fs.next(50 * time.Millisecond)
				if has && ok(f) {
					got = f
					return nil
				}
			}
		})
		return got
	}
	// 128 kbit/s: this page's full frames (~8 KiB) take ~0.5 s each.
	link.rate.Store(16 << 10)
	small := typeUntil("half-size frames on the slow link", func(f frameHeader) bool { return f.W > 0 && float64(f.W) <= 0.5*f.DW })
	if small.Bytes*2 > full.Bytes {
		t.Errorf("half-size frame %d bytes, a full one %d: want at most half", small.Bytes, full.Bytes)
	}
	if n := graded(); n != 1 {
		t.Errorf("link-graded browsers %v, want 1", n)
	}
	link.rate.Store(0) // the link is fast again
	typeUntil("full-size frames again", func(f frameHeader) bool { return float64(f.W) == f.DW })
	testutil.Eventually(t, 10*time.Second, func() error {
		if n := graded(); n != 0 {
			return fmt.Errorf("link-graded browsers %v", n)
		}
		return nil
	})
}
