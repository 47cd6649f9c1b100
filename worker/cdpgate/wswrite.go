package cdpgate

import (
	"bufio"
	"encoding/binary"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// maxKept is the biggest write buffer a connection keeps between writes.
const maxKept = 1 << 20

// frameWriter writes one WebSocket connection's frames straight to it, in
// order: gorilla's Conn keeps reading, and its control frames (pongs, the
// close answer) are written whole by net.Conn, never inside these. The
// upstream reader queues the client's frames and flushes them just before
// it reads from Chromium again (flushConn), so that every frame made from
// one read goes out in one write(2): a loopback write and the wake-up of
// its reader are most of what the gate costs per command, more than the
// JSON (docs/automation.md, "Figures"). Others send at once, behind what
// is queued.
type frameWriter struct {
	conn   net.Conn
	mask   bool   // a client's frames are masked (RFC 6455 5.3)
	fail   func() // a write failed: the connection is done
	mu     sync.Mutex
	buf    []byte
	failed bool
	shut   bool
}

func newFrameWriter(conn net.Conn, mask bool, fail func()) *frameWriter {
	return &frameWriter{conn: conn, mask: mask, fail: fail}
}

// Opcodes (RFC 6455 5.2).
const (
	opText  = 1
	opClose = 8
)

// queue adds a frame (FIN set) with payload, which it copies, for the
// next flush or send.
func (w *frameWriter) queue(op byte, payload []byte) {
	w.mu.Lock()
	if !w.shut && !w.failed {
		w.buf = appendFrame(w.buf, op, payload, w.mask)
	}
	w.mu.Unlock()
}

// send writes what is queued and a frame with payload.
func (w *frameWriter) send(op byte, payload []byte) {
	w.mu.Lock()
	if !w.shut && !w.failed {
		w.buf = appendFrame(w.buf, op, payload, w.mask)
		w.flushLocked()
	}
	w.mu.Unlock()
}

// flush writes what is queued.
func (w *frameWriter) flush() {
	w.mu.Lock()
	w.flushLocked()
	w.mu.Unlock()
}

// sendWithin is send for a close frame: a write blocked on a client that
// stopped reading gives up after d, and so does this one.
func (w *frameWriter) sendWithin(op byte, payload []byte, d time.Duration) {
	_ = w.conn.SetWriteDeadline(time.Now().Add(d)) // applies to a pending write too
	w.mu.Lock()
	if !w.shut && !w.failed {
		w.buf = appendFrame(w.buf, op, payload, w.mask)
		w.write(time.Now().Add(d))
	}
	w.mu.Unlock()
}

// close writes what is queued and drops what comes after.
func (w *frameWriter) close() {
	w.mu.Lock()
	w.flushLocked()
	w.shut = true
	w.mu.Unlock()
}

func (w *frameWriter) flushLocked() {
	w.write(time.Now().Add(writeTimeout))
}

func (w *frameWriter) write(deadline time.Time) {
	if len(w.buf) == 0 || w.failed {
		return
	}
	_ = w.conn.SetWriteDeadline(deadline)
	_, err := w.conn.Write(w.buf)
	w.buf = w.buf[:0]
	if cap(w.buf) > maxKept {
		w.buf = nil // a big message's buffer is not kept
	}
	if err != nil {
		w.failed = true
		w.fail()
	}
}

// flushConn is Chromium's connection as the gate's gorilla Conn reads it:
// each time its buffer is empty and it reads again, before would block
// for more (or find it), the frames for the client are flushed.
type flushConn struct {
	net.Conn
	before func()
}

func (c flushConn) Read(p []byte) (int, error) {
	c.before()
	return c.Conn.Read(p)
}

// appendFrame appends a final frame of op with payload, masked if mask.
func appendFrame(b []byte, op byte, payload []byte, mask bool) []byte {
	n := len(payload)
	b = append(b, 0x80|op)
	var m byte
	if mask {
		m = 0x80
	}
	switch {
	case n <= 125:
		b = append(b, m|byte(n))
	case n <= 0xffff:
		b = append(b, m|126)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, m|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	if !mask {
		return append(b, payload...)
	}
	var key [4]byte
	binary.LittleEndian.PutUint32(key[:], rand.Uint32())
	b = append(b, key[:]...)
	start := len(b)
	b = append(b, payload...)
	maskBytes(b[start:], key)
	return b
}

// maskBytes XORs p with the repeated key, eight bytes at a time.
func maskBytes(p []byte, key [4]byte) {
	k4 := binary.LittleEndian.Uint32(key[:])
	k8 := uint64(k4) | uint64(k4)<<32
	i := 0
	for ; i+8 <= len(p); i += 8 {
		binary.LittleEndian.PutUint64(p[i:], binary.LittleEndian.Uint64(p[i:])^k8)
	}
	for ; i < len(p); i++ {
		p[i] ^= key[i&3]
	}
}

// Upgrade upgrades an automation client's request with u, so that Serve
// can batch the client's commands for Chromium as it does Chromium's
// frames for the client: it flushes them just before it reads from the
// client again (hookConn). u.ReadBufferSize 0 is taken as 4096: gorilla
// would otherwise read through the server's buffer, around the hook.
func Upgrade(u *websocket.Upgrader, w http.ResponseWriter, r *http.Request, h http.Header) (*websocket.Conn, error) {
	uu := *u
	if uu.ReadBufferSize == 0 {
		uu.ReadBufferSize = 4096
	}
	return uu.Upgrade(hookWriter{w}, r, h)
}

// hookWriter hands gorilla the hijacked connection as a hookConn.
type hookWriter struct{ http.ResponseWriter }

func (h hookWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	return &hookConn{Conn: c}, brw, nil
}

func (h hookWriter) Unwrap() http.ResponseWriter { return h.ResponseWriter }

// hookConn is a client connection whose reads Serve hooks (before, set
// before its readers start).
type hookConn struct {
	net.Conn
	before func()
}

func (c *hookConn) Read(p []byte) (int, error) {
	if c.before != nil {
		c.before()
	}
	return c.Conn.Read(p)
}
