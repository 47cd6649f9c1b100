package rmi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
)

var internalSecret = []byte("0123456789abcdef-internal")

type adder struct{}

func (adder) Add(_ context.Context, a, b int) (int, error) { return a + b, nil }

func mustNode(t *testing.T, name string, logs io.Writer) *Node {
	t.Helper()
	if logs == nil {
		logs = io.Discard
	}
	n, err := New(Config{Name: name, Secret: internalSecret, Logger: zerolog.New(logs), HandshakeTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	return n
}

func serveInternal(t *testing.T, n *Node) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = n.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	return ln.Addr().String()
}

func frame(body []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	return append(b, body...)
}

func mustEncode(t testing.TB, m *message) []byte {
	t.Helper()
	b, err := encodeMessage(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustRaw(t testing.TB, v any) codec.Raw {
	t.Helper()
	b, err := marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rawSession is a hand-made client connection past the handshake: the
// caller writes anything, sealed with the session's keys or not.
type rawSession struct {
	nc net.Conn
	br *bufio.Reader
	hs hsResult
}

// rawAuthed opens a TCP connection to addr and completes the handshake by
// hand, leaving the caller free to write anything.
func rawAuthed(t *testing.T, cn *Node, addr string) *rawSession {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	br := bufio.NewReader(nc)
	hs, err := cn.handshake(context.Background(), nc, br, true)
	if err != nil {
		t.Fatal(err)
	}
	return &rawSession{nc: nc, br: br, hs: hs}
}

// seal returns body as the next sealed frame of this session.
func (s *rawSession) seal(t testing.TB, body []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	bw := bufio.NewWriter(&b)
	if err := s.hs.tx.write(bw, body); err != nil {
		t.Fatal(err)
	}
	_ = bw.Flush()
	return b.Bytes()
}

// read reads and opens the next frame from the server.
func (s *rawSession) read() (*message, error) {
	body, err := s.hs.rx.read(s.br, DefaultMaxFrame)
	if err != nil {
		return nil, err
	}
	return decodeMessage(body)
}

func TestGarbageInput(t *testing.T) {
	testutil.NoLeaks(t)
	logs := &testutil.SyncBuffer{}
	srv := mustNode(t, "master", logs)
	if err := srv.Register("master", adder{}); err != nil {
		t.Fatal(err)
	}
	addr := serveInternal(t, srv)
	cn := mustNode(t, "raw", nil)
	good := mustNode(t, "good", nil)

	rnd := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 8192)
	for i := range random {
		random[i] = byte(rnd.Uint32())
	}
	valid := mustEncode(t, &message{Kind: kindCancel, Seq: 1})
	tests := []struct {
		name    string
		authed  bool
		payload []byte
		sealed  bool // a correctly sealed frame: the garbage is inside
	}{
		{"random bytes before auth", false, random, false},
		{"huge length before auth", false, []byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3}, false},
		{"junk handshake frame", false, frame([]byte{0xc1, 0xc1, 0xc1}), false},
		{"random bytes after auth", true, random, false},
		{"huge length after auth", true, []byte{0x7f, 0xff, 0xff, 0xff}, false},
		{"zero length", true, []byte{0, 0, 0, 0}, false},
		{"junk msgpack", true, []byte{0xc1, 0xde, 0xad, 0xbe, 0xef}, true},
		{"not an array", true, mustRaw(t, "hello"), true},
		{"truncated body", true, valid[:len(valid)-1], true},
		{"trailing bytes", true, append(append([]byte{}, valid...), 0x01), true},
		{"unknown kind", true, mustEncode(t, &message{Kind: 99, Seq: 1}), true},
		{"call without method", true, mustEncode(t, &message{Kind: kindCall, Seq: 1, Object: "master"}), true},
		{"call with name and ref", true, mustEncode(t, &message{Kind: kindCall, Seq: 1, Object: "master", Ref: 3, Method: "Add"}), true},
		{"zero seq", true, mustEncode(t, &message{Kind: kindReply}), true},
		{"args not raw", true, mustRaw(t, []any{1, 1, "master", 0, "Add", 0, "nope", nil, nil}), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var nc net.Conn
			if tc.authed {
				rs := rawAuthed(t, cn, addr)
				nc = rs.nc
				if tc.sealed {
					tc.payload = rs.seal(t, tc.payload)
				}
			} else {
				var err error
				if nc, err = net.Dial("tcp", addr); err != nil {
					t.Fatal(err)
				}
				defer nc.Close()
			}
			_, _ = nc.Write(tc.payload)                              // the server may close before reading it all
			_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second)) // hang guard only
			// The server must hang up (EOF or reset), not keep the conn.
			_, err := io.Copy(io.Discard, nc)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("server kept a garbage connection open")
			}
			// ... and keep serving good clients.
			c, err := good.Dial(context.Background(), addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var sum int
			if err := c.Call(context.Background(), "master", "Add", &sum, 2, 2); err != nil || sum != 4 {
				t.Fatalf("good client after garbage: %d, %v", sum, err)
			}
		})
	}
	if s := logs.String(); !strings.Contains(s, "bad input from peer") || !strings.Contains(s, "handshake failed") {
		t.Errorf("garbage not logged:\n%s", s)
	}
}

// A well-formed call with bad contents gets an error reply; the conn lives.
func TestBadCallKeepsConn(t *testing.T) {
	testutil.NoLeaks(t)
	srv := mustNode(t, "master", nil)
	if err := srv.Register("master", adder{}); err != nil {
		t.Fatal(err)
	}
	addr := serveInternal(t, srv)
	rs := rawAuthed(t, mustNode(t, "raw", nil), addr)

	tests := []struct {
		name string
		call message
		code string
	}{
		{"unknown object", message{Object: "nobody", Method: "Add"}, CodeNoObject},
		{"unknown export", message{Ref: 77, Method: "Add"}, CodeNoObject},
		{"unknown method", message{Object: "master", Method: "Mul"}, CodeNoMethod},
		{"arg count", message{Object: "master", Method: "Add", Args: []codec.Raw{mustRaw(t, 1)}}, CodeBadArgs},
		{"arg type", message{Object: "master", Method: "Add", Args: []codec.Raw{mustRaw(t, map[string]int{}), mustRaw(t, 1)}}, CodeBadArgs},
		{"arg unknown ext", message{Object: "master", Method: "Add", Args: []codec.Raw{{0xd4, 0x05, 0x00}, mustRaw(t, 1)}}, CodeBadArgs},
		{"ok", message{Object: "master", Method: "Add", Args: []codec.Raw{mustRaw(t, 40), mustRaw(t, 2)}}, ""},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.call
			m.Kind, m.Seq = kindCall, uint64(i+1)
			if _, err := rs.nc.Write(rs.seal(t, mustEncode(t, &m))); err != nil {
				t.Fatal(err)
			}
			r, err := rs.read()
			if err != nil {
				t.Fatal(err)
			}
			if r.Kind != kindReply || r.Seq != m.Seq {
				t.Fatalf("got kind %d seq %d", r.Kind, r.Seq)
			}
			if tc.code == "" {
				var sum int
				if r.Err != nil || unmarshal(r.Result, &sum) != nil || sum != 42 {
					t.Fatalf("reply %+v", r)
				}
				return
			}
			if r.Err == nil || r.Err.Code != tc.code {
				t.Fatalf("reply err %+v, want code %s", r.Err, tc.code)
			}
		})
	}
}

// fakeServer accepts one connection and runs script on it.
func fakeServer(t *testing.T, script func(nc net.Conn, br *bufio.Reader)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		script(nc, bufio.NewReader(nc))
	}()
	t.Cleanup(func() { _ = ln.Close(); <-done })
	return ln.Addr().String()
}

func TestHandshakeClientChecks(t *testing.T) {
	testutil.NoLeaks(t)
	nonce := bytes.Repeat([]byte{7}, nonceLen)
	tests := []struct {
		name    string
		script  func(nc net.Conn, br *bufio.Reader)
		want    error
		timeout time.Duration // generous unless the timeout is the point
	}{
		{"server without the secret", func(nc net.Conn, br *bufio.Reader) {
			_ = hsWrite(nc, &hsHello{Version: protocolVersion, Nonce: nonce})
			var hc hsClient
			_ = hsRead(br, &hc)
			_ = hsWrite(nc, &hsServer{OK: true, Name: "evil", MAC: make([]byte, 32)})
		}, ErrAuth, 5 * time.Second},
		{"version mismatch", func(nc net.Conn, br *bufio.Reader) {
			_ = hsWrite(nc, &hsHello{Version: 99, Nonce: nonce})
		}, ErrProtocol, 5 * time.Second},
		{"short nonce", func(nc net.Conn, br *bufio.Reader) {
			_ = hsWrite(nc, &hsHello{Version: protocolVersion, Nonce: []byte{1}})
		}, ErrProtocol, 5 * time.Second},
		{"silent server", func(nc net.Conn, br *bufio.Reader) {
			_, _ = io.Copy(io.Discard, br) // until the client gives up
		}, os.ErrDeadlineExceeded, 100 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr := fakeServer(t, tc.script)
			n, err := New(Config{Name: "c", Secret: internalSecret, HandshakeTimeout: tc.timeout})
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			_, err = n.Dial(context.Background(), addr)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Dial = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestRefTokens(t *testing.T) {
	for _, id := range []uint64{1, 2, 1 << 40, ^uint64(0)} {
		got, ok := parseRefToken(refToken(id))
		if !ok || got != id {
			t.Errorf("token %d round trip = %d, %v", id, got, ok)
		}
	}
	for _, raw := range [][]byte{nil, {0xc0}, refToken(0), mustRaw(t, 5), mustRaw(t, time.Now())} {
		if _, ok := parseRefToken(raw); ok {
			t.Errorf("%x parsed as a reference", raw)
		}
	}
}
