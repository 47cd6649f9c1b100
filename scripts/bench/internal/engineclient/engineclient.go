// Package engineclient is what the benchmark drivers share of a client
// engine (docs/client-engine.md): opening an app as a new user (cookie jar,
// redirects to a Browser URL), its WebSocket, reading frames, acknowledging
// them as the engine does once it has drawn them, typing, and the rule that
// decides which frame shows a key. A Session can ask for tile updates
// (AskTiles) and takes them as the engine does (docs/client-engine.md,
// "Tiles").
package engineclient

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Open opens /<app> at public as a new user and returns the Browser URL's
// path it was sent to and the user's cookies.
func Open(ctx context.Context, public, app string) (string, []*http.Cookie, error) {
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 60 * time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, public+"/"+app, nil)
	if err != nil {
		return "", nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", nil, err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return "", nil, fmt.Errorf("GET /%s: %s", app, resp.Status)
	}
	path := resp.Request.URL.Path
	if !strings.Contains(path, "/b/") {
		return "", nil, fmt.Errorf("did not reach a Browser URL: %s", path)
	}
	pu, err := url.Parse(public)
	if err != nil {
		return "", nil, err
	}
	return path, jar.Cookies(pu), nil
}

// Dial opens the client engine's socket of the Browser URL path at host
// with the user's cookies (and extra headers, e.g. a hop signature). A
// query on path ("?link=256") is the socket's.
func Dial(ctx context.Context, host, path string, cookies []*http.Cookie, extra http.Header) (*websocket.Conn, error) {
	h := http.Header{"Origin": {"http://" + host}}
	for _, ck := range cookies {
		h.Add("Cookie", ck.String())
	}
	for k, v := range extra {
		h[k] = v
	}
	p, q, _ := strings.Cut(path, "?") // a query goes on the socket's URL
	u := "ws://" + host + p + "/ws"
	if q != "" {
		u += "?" + q
	}
	conn, _, err := websocket.DefaultDialer.DialContext(ctx, u, h)
	return conn, err
}

// CheckHello fails if a text message is the hello of a read-only client:
// the cookie did not make us the browser's owner, so our input would be
// ignored.
func CheckHello(data []byte) error {
	var m struct {
		T        string `json:"t"`
		ReadOnly bool   `json:"readOnly"`
	}
	if json.Unmarshal(data, &m) == nil && m.T == "hello" && m.ReadOnly {
		return errors.New("connected read-only: the cookie did not make us the owner")
	}
	return nil
}

// TilesCaps is the message by which an engine says, once its socket is
// open, that it composes tile updates; a worker with --frame-tiles then
// sends it updates on the frame before (docs/client-engine.md, "Tiles").
// An engine that never sends it gets whole frames.
func TilesCaps() map[string]any { return map[string]any{"t": "caps", "tiles": true} }

// Frame is what a client learns of a screen frame when it arrives: a whole
// frame or a tile update, which shows the frame Seq as well once composed
// on the frame Base.
type Frame struct {
	Seq uint64
	// Painted is the header's ts: when Chromium painted the frame, in ms
	// (the worker's clock; the drivers run on the same machine).
	Painted time.Time
	// At is when the frame arrived.
	At    time.Time
	Bytes int
	// W, H: the frame's size in pixels.
	W, H int
	// Update: a tile update (the header has tiles) of Tiles tiles on the
	// frame Base, not a whole frame.
	Update bool
	Base   uint64
	Tiles  int
}

// ParseFrame reads the header of a binary frame message that arrived at
// at: uint32 big-endian header length, JSON header, JPEG (a tile update's
// header also has base and tiles, and its JPEG is the tiles' atlas).
func ParseFrame(data []byte, at time.Time) (Frame, error) {
	if len(data) < 4 {
		return Frame{}, errors.New("malformed frame: no header length")
	}
	n := binary.BigEndian.Uint32(data)
	var hdr struct {
		Seq   uint64    `json:"seq"`
		TS    int64     `json:"ts"`
		W     int       `json:"w"`
		H     int       `json:"h"`
		Base  uint64    `json:"base"`
		Tiles *[][4]int `json:"tiles"`
	}
	if uint64(n)+4 > uint64(len(data)) {
		return Frame{}, errors.New("malformed frame: header longer than the message")
	}
	if err := json.Unmarshal(data[4:4+n], &hdr); err != nil {
		return Frame{}, fmt.Errorf("malformed frame header: %w", err)
	}
	f := Frame{Seq: hdr.Seq, Painted: time.UnixMilli(hdr.TS), At: at, Bytes: len(data), W: hdr.W, H: hdr.H}
	if hdr.Tiles != nil {
		f.Update, f.Base, f.Tiles = true, hdr.Base, len(*hdr.Tiles)
	}
	return f, nil
}

// AppliesTo reports whether f can be drawn on a screen that shows last
// (ok: last is a frame drawn): a whole frame always, a tile update only on
// its base frame at the same size, the engine's rule (web/static/engine.js,
// drawNext).
func (f Frame) AppliesTo(last Frame, ok bool) bool {
	return !f.Update || ok && last.Seq == f.Base && last.W == f.W && last.H == f.H
}

// Shows is the drivers' rule for the frame that shows a key: the first
// frame that arrives after the key was sent and was painted no earlier
// than the key's millisecond (ts has ms resolution: a frame painted in that
// millisecond counts, at most 1 ms early). The paint time keeps a frame
// painted before the key, still on its way, from passing for the key's:
// with one key in flight on a quiet screen it is simply the first frame
// after the key. The rule reads the header only, so a tile update that a
// Session drew (one on the frame it shows, AppliesTo) counts as its whole
// frame would: composed on the frame before, it is that frame's pixels.
func (f Frame) Shows(sent time.Time) bool {
	return f.At.After(sent) && !f.Painted.Before(sent.Truncate(time.Millisecond))
}

// Latencies returns, for each key sent (in the order sent), the time to the
// first of frames (in arrival order, as one socket delivers them) that
// Shows it; keys no frame shows are counted in missing.
func Latencies(sent []time.Time, frames []Frame) (lat []time.Duration, missing int) {
	j := 0 // frames before j arrived or were painted before the previous key
	for _, t0 := range sent {
		for j < len(frames) && !frames[j].Shows(t0) {
			j++
		}
		if j == len(frames) {
			missing++
			continue
		}
		lat = append(lat, frames[j].At.Sub(t0))
	}
	return lat, missing
}

// Percentile returns the p-quantile (0..1) of sorted durations, the
// element at p×(n-1) rounded down (0 when there are none).
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(p*float64(len(sorted)-1))]
}

// Ms is d in milliseconds.
func Ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// TypingKey is the i-th key the drivers type: a..z, every 20th a
// Backspace, which keeps the text short.
func TypingKey(i int) string {
	if i%20 == 19 {
		return "Backspace"
	}
	return string(rune('a' + i%26))
}

// KeyEvents returns the keydown and keyup input messages of key k (a
// printable key carries its text).
func KeyEvents(k string) (down, up map[string]any) {
	down = map[string]any{"t": "input", "type": "keydown", "key": k}
	if len([]rune(k)) == 1 {
		down["text"] = k
	}
	return down, map[string]any{"t": "input", "type": "keyup", "key": k}
}

// Session is a client engine's socket: one goroutine reads it until
// Close, records every frame it draws and, with ack, acknowledges each as
// the engine does once it has drawn it (the worker paces frames on acks,
// worker/engine/pace.go). After AskTiles it takes tile updates as the
// engine does: one on the frame it shows is drawn (recorded, acked) like a
// whole frame; one that is not (cannot happen unless the worker errs) is
// dropped, neither recorded nor acked, and a refresh asked for, whose
// answer is whole (Unapplied counts them). Writes are serialized.
type Session struct {
	conn *websocket.Conn
	ack  bool
	wmu  sync.Mutex // gorilla allows one writer at a time

	mu        sync.Mutex
	frames    []Frame
	unapplied int
	arrived   chan struct{} // signalled (not queued) after each frame

	done chan struct{} // closed when the reader ends
	err  error         // why it ended, once done
}

// Connect dials the socket of the Browser URL path at host (Dial) and
// starts reading it.
func Connect(ctx context.Context, host, path string, cookies []*http.Cookie, extra http.Header, ack bool) (*Session, error) {
	conn, err := Dial(ctx, host, path, cookies, extra)
	if err != nil {
		return nil, err
	}
	s := &Session{conn: conn, ack: ack, arrived: make(chan struct{}, 1), done: make(chan struct{})}
	go s.read()
	return s, nil
}

func (s *Session) read() {
	defer close(s.done)
	for {
		typ, data, err := s.conn.ReadMessage()
		if err != nil {
			s.err = err
			return
		}
		if typ != websocket.BinaryMessage {
			if err := CheckHello(data); err != nil {
				s.err = err
				s.conn.Close()
				return
			}
			continue
		}
		f, err := ParseFrame(data, time.Now())
		if err != nil {
			s.err = err
			s.conn.Close()
			return
		}
		s.mu.Lock()
		var last Frame
		if len(s.frames) > 0 {
			last = s.frames[len(s.frames)-1]
		}
		drawn := f.AppliesTo(last, len(s.frames) > 0)
		if drawn {
			s.frames = append(s.frames, f)
		} else {
			s.unapplied++
		}
		s.mu.Unlock()
		if !drawn {
			if err := s.Send(map[string]any{"t": "refresh"}); err != nil {
				s.err = err
				s.conn.Close()
				return
			}
			continue
		}
		select {
		case s.arrived <- struct{}{}:
		default:
		}
		if s.ack {
			if err := s.Send(map[string]any{"t": "ack", "seq": f.Seq}); err != nil {
				s.err = err
				s.conn.Close()
				return
			}
		}
	}
}

// AskTiles says the engine composes tile updates (TilesCaps): the worker
// sends them from its next frame on if it runs with --frame-tiles.
func (s *Session) AskTiles() error { return s.Send(TilesCaps()) }

// Unapplied is the number of tile updates that arrived on a frame other
// than the one shown and were dropped (0 unless the worker errs).
func (s *Session) Unapplied() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unapplied
}

// Send writes one control message.
func (s *Session) Send(m map[string]any) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.conn.WriteJSON(m)
}

// Input sends one input event (m without "t").
func (s *Session) Input(m map[string]any) error {
	m["t"] = "input"
	return s.Send(m)
}

// Focus clicks into the test apps' input (at 20..320 × 40..80) and sets
// the viewport to width×height. It waits for the first frame first: a
// click sent right after the socket opened, before any frame, was lost 1 to
// 5 times in 8 on fresh browsers (cause not known; after the first frame, 0
// in 8), and then for a frame painted after the click (the caret
// appearing), clicking again if none comes.
func (s *Session) Focus(ctx context.Context, width, height int) error {
	if _, err := s.WaitShown(ctx, time.Time{}); err != nil {
		return fmt.Errorf("first frame: %w", err)
	}
	for try := 0; ; try++ {
		t := time.Now()
		if err := s.Input(map[string]any{"type": "mousedown", "x": 300, "y": 60, "button": "left", "buttons": 1, "clickCount": 1}); err != nil {
			return err
		}
		if err := s.Input(map[string]any{"type": "mouseup", "x": 300, "y": 60, "button": "left", "clickCount": 1}); err != nil {
			return err
		}
		// Long enough for a frame on a slow link (110 KiB at 256 kbit/s
		// takes 3.5 s); a lost click costs that much once.
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := s.WaitShown(wctx, t)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil || try == 2 {
			return fmt.Errorf("clicking into the input painted nothing: %w", err)
		}
	}
	return s.Input(map[string]any{"type": "resize", "width": width, "height": height})
}

// Type presses and releases key k.
func (s *Session) Type(k string) error {
	down, up := KeyEvents(k)
	if err := s.Send(down); err != nil {
		return err
	}
	return s.Send(up)
}

// Frames returns the frames that arrived at or after since, in arrival
// order.
func (s *Session) Frames(since time.Time) []Frame {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := len(s.frames)
	for i > 0 && !s.frames[i-1].At.Before(since) {
		i--
	}
	return append([]Frame(nil), s.frames[i:]...)
}

// WaitShown waits until a frame that Shows a key sent at sent has arrived
// and returns it.
func (s *Session) WaitShown(ctx context.Context, sent time.Time) (Frame, error) {
	for {
		for _, f := range s.Frames(sent) {
			if f.Shows(sent) {
				return f, nil
			}
		}
		select {
		case <-s.arrived:
		case <-s.done:
			return Frame{}, fmt.Errorf("socket closed: %w", s.err)
		case <-ctx.Done():
			return Frame{}, ctx.Err()
		}
	}
}

// Done is closed when the socket ended (Err says why).
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is why the socket ended, once Done is closed.
func (s *Session) Err() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}

// Close closes the socket and waits for the reader to end.
func (s *Session) Close() error {
	err := s.conn.Close()
	<-s.done
	return err
}
