package rmi

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"reflect"
	"sync"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

// DefaultMaxFrame is the default limit on one frame's body.
const DefaultMaxFrame = 8 << 20

// handshakeMaxFrame bounds frames read before the peer is authenticated, so
// an unauthenticated peer cannot make us allocate much.
const handshakeMaxFrame = 4 << 10

// mh is the one shared msgpack handle. It is configured once here and never
// modified afterwards (the codec requires that for concurrent use).
var mh = func() *codec.MsgpackHandle {
	h := &codec.MsgpackHandle{WriteExt: true}
	h.RawToString = true
	h.MapType = reflect.TypeOf(map[string]any(nil))
	h.Raw = true             // encode codec.Raw values verbatim (pre-encoded args)
	h.TimeNotBuiltin = false // msgpack timestamp extension (-1), the "new" format
	// Untrusted input: never pre-allocate more than this for a collection
	// whose length came off the wire.
	h.MaxInitLen = 4096
	return h
}()

// Message kinds.
const (
	kindCall    uint8 = 1
	kindReply   uint8 = 2
	kindCancel  uint8 = 3
	kindRelease uint8 = 4
)

// message is the body of every frame after the handshake. It is encoded as a
// msgpack array (toarray) so field names cost nothing on the wire. Fields not
// used by a kind are left zero.
type message struct {
	//lint:ignore U1000 go-msgpack reads this field's tag (encode as an array)
	_struct bool        `codec:",toarray"`
	Kind    uint8       // kind*
	Seq     uint64      // call id in the caller's sequence space; release: export id
	Object  string      // call: registered object name (when Ref == 0)
	Ref     uint64      // call: export id of a passed-by-reference object
	Method  string      // call
	Timeout int64       // call: caller's remaining time in ns, 0 = no deadline
	Args    []codec.Raw // call: each argument encoded on its own
	Result  codec.Raw   // reply: the method's result (nil when Err != nil)
	Err     *wireError  // reply: non-nil when the call failed
}

type wireError struct {
	//lint:ignore U1000 go-msgpack reads this field's tag (encode as an array)
	_struct bool `codec:",toarray"`
	Code    string
	Message string
}

var (
	encPool = sync.Pool{New: func() any { return codec.NewEncoderBytes(nil, mh) }}
	decPool = sync.Pool{New: func() any { return codec.NewDecoderBytes(nil, mh) }}
)

// marshal encodes v into a fresh byte slice.
func marshal(v any) (b []byte, err error) {
	e := encPool.Get().(*codec.Encoder)
	defer encPool.Put(e)
	b = make([]byte, 0, 64)
	e.ResetBytes(&b)
	// The codec recovers its own panics; this catches ones raised by user
	// MarshalBinary/Selfer implementations it calls into.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("rmi: encode %T: panic: %v", v, r)
		}
	}()
	if err := e.Encode(v); err != nil {
		return nil, fmt.Errorf("rmi: encode %T: %w", v, err)
	}
	return b, nil
}

// unmarshal decodes data into the pointer v. Trailing bytes are an error so
// a frame cannot smuggle extra content.
func unmarshal(data []byte, v any) (err error) {
	d := decPool.Get().(*codec.Decoder)
	defer decPool.Put(d)
	d.ResetBytes(data)
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("rmi: decode %T: panic: %v", v, r)
		}
	}()
	if err := d.Decode(v); err != nil {
		return fmt.Errorf("rmi: decode %T: %w", v, err)
	}
	if n := d.NumBytesRead(); n != len(data) {
		return fmt.Errorf("rmi: decode %T: %d trailing bytes", v, len(data)-n)
	}
	return nil
}

// readFrame reads one length-prefixed frame body of at most max bytes.
func readFrame(r io.Reader, max int) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 {
		return nil, fmt.Errorf("%w: empty frame", ErrProtocol)
	}
	if uint64(n) > uint64(max) {
		return nil, fmt.Errorf("%w: %d bytes > limit %d", ErrFrameTooLarge, n, max)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return body, nil
}

// writeFrame writes a length prefix and body; the caller flushes.
func writeFrame(w *bufio.Writer, body []byte) error {
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(body)))
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	_, err := w.Write(body)
	return err
}

// nilRaw is msgpack nil. A zero-length codec.Raw would encode as nothing
// and corrupt the enclosing array, so empty values are sent as this.
var nilRaw = codec.Raw{0xc0}

// encodeMessage encodes m as a frame body.
func encodeMessage(m *message) ([]byte, error) {
	if len(m.Result) == 0 {
		m.Result = nilRaw
	}
	return marshal(m)
}

// decodeMessage decodes and validates a post-handshake frame body.
func decodeMessage(body []byte) (*message, error) {
	m := new(message)
	if err := unmarshal(body, m); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	switch m.Kind {
	case kindCall:
		if m.Seq == 0 || m.Method == "" || (m.Object == "") == (m.Ref == 0) || m.Timeout < 0 {
			return nil, fmt.Errorf("%w: malformed call", ErrProtocol)
		}
	case kindReply, kindCancel, kindRelease:
		if m.Seq == 0 {
			return nil, fmt.Errorf("%w: zero seq", ErrProtocol)
		}
	default:
		return nil, fmt.Errorf("%w: unknown message kind %d", ErrProtocol, m.Kind)
	}
	return m, nil
}

// readMessage reads and decodes one frame. It is the entry point the fuzz
// target exercises.
func readMessage(r io.Reader, max int) (*message, error) {
	body, err := readFrame(r, max)
	if err != nil {
		return nil, err
	}
	return decodeMessage(body)
}

// Reference tokens. A by-reference value is sent as a msgpack fixext8 with
// application type refExtType and the 8-byte big-endian export id as data:
// 0xd7 0x01 <id>. It never collides with ordinary values (the timestamp
// extension is type -1) and is recognised without a per-connection codec.
const refExtType = 0x01

func refToken(id uint64) codec.Raw {
	b := make([]byte, 10)
	b[0], b[1] = 0xd7, refExtType
	binary.BigEndian.PutUint64(b[2:], id)
	return b
}

// parseRefToken returns the export id if raw is a reference token.
func parseRefToken(raw []byte) (uint64, bool) {
	if len(raw) != 10 || raw[0] != 0xd7 || raw[1] != refExtType {
		return 0, false
	}
	id := binary.BigEndian.Uint64(raw[2:])
	return id, id != 0
}

// isNil reports whether raw is msgpack nil (or absent).
func isNil(raw []byte) bool { return len(raw) == 0 || (len(raw) == 1 && raw[0] == 0xc0) }
