package rmi

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
)

// countingAdder counts the calls it ran, to tell whether a frame was acted on.
type countingAdder struct{ n atomic.Int64 }

func (a *countingAdder) Add(_ context.Context, x, y int) (int, error) { a.n.Add(1); return x + y, nil }

// hangsUp waits until the server closes nc (EOF or reset).
func hangsUp(t *testing.T, nc net.Conn) {
	t.Helper()
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second)) // hang guard only
	_, err := io.Copy(io.Discard, nc)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("server kept the connection open")
	}
}

// Every frame after the handshake is sealed for its position and direction:
// tampering, replaying, reordering, reflecting, moving to another
// connection or sending plaintext closes the connection with a logged reason
// and runs nothing.
func TestSealedFrameAttacks(t *testing.T) {
	testutil.NoLeaks(t)
	logs := &testutil.SyncBuffer{}
	srv := mustNode(t, "master", logs)
	obj := &countingAdder{}
	if err := srv.Register("master", obj); err != nil {
		t.Fatal(err)
	}
	addr := serveInternal(t, srv)
	cn := mustNode(t, "raw", nil)
	call := func(seq uint64) []byte {
		return mustEncode(t, &message{Kind: kindCall, Seq: seq, Object: "master", Method: "Add",
			Args: []codec.Raw{mustRaw(t, 1), mustRaw(t, 2)}})
	}
	// okCall sends a sealed call and checks its reply: the session works.
	okCall := func(t *testing.T, rs *rawSession, seq uint64) []byte {
		t.Helper()
		fr := rs.seal(t, call(seq))
		if _, err := rs.nc.Write(fr); err != nil {
			t.Fatal(err)
		}
		r, err := rs.read()
		if err != nil || r.Seq != seq || r.Err != nil {
			t.Fatalf("reply %+v, %v", r, err)
		}
		return fr
	}

	tests := []struct {
		name string
		// attack returns what to write after the session is up, and how many
		// calls the server should have run in total.
		attack func(t *testing.T, rs *rawSession) (payload []byte, ran int64)
		log    string
	}{
		{"tampered frame", func(t *testing.T, rs *rawSession) ([]byte, int64) {
			fr := rs.seal(t, call(1))
			fr[len(fr)-20] ^= 0x01 // inside the ciphertext
			return fr, 0
		}, "failed authentication"},
		{"tampered length", func(t *testing.T, rs *rawSession) ([]byte, int64) {
			fr := rs.seal(t, call(1))
			fr[3]-- // one byte shorter: the rest is read as the next frame
			return fr, 0
		}, "failed authentication"},
		{"replayed frame", func(t *testing.T, rs *rawSession) ([]byte, int64) {
			return okCall(t, rs, 1), 1
		}, "frame 1 failed authentication"},
		{"reordered frames", func(t *testing.T, rs *rawSession) ([]byte, int64) {
			f1 := rs.seal(t, call(1))
			f2 := rs.seal(t, call(2))
			return append(f2, f1...), 0
		}, "frame 0 failed authentication"},
		{"reflected frame", func(t *testing.T, rs *rawSession) ([]byte, int64) {
			// Capture the server's sealed reply off the wire and send it back.
			fr := rs.seal(t, call(1))
			if _, err := rs.nc.Write(fr); err != nil {
				t.Fatal(err)
			}
			hdr := make([]byte, 4)
			if _, err := io.ReadFull(rs.br, hdr); err != nil {
				t.Fatal(err)
			}
			body := make([]byte, int(hdr[0])<<24|int(hdr[1])<<16|int(hdr[2])<<8|int(hdr[3]))
			if _, err := io.ReadFull(rs.br, body); err != nil {
				t.Fatal(err)
			}
			return append(hdr, body...), 1
		}, "frame 1 failed authentication"},
		{"frame from another connection", func(t *testing.T, rs *rawSession) ([]byte, int64) {
			other := rawAuthed(t, cn, addr)
			return other.seal(t, call(1)), 0
		}, "frame 0 failed authentication"},
		{"plaintext call after handshake", func(t *testing.T, rs *rawSession) ([]byte, int64) {
			return frame(call(1)), 0
		}, "not sealed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := obj.n.Load()
			rs := rawAuthed(t, cn, addr)
			payload, ran := tc.attack(t, rs)
			_, _ = rs.nc.Write(payload) // the server may close before reading it all
			hangsUp(t, rs.nc)
			if got := obj.n.Load() - before; got != ran {
				t.Errorf("server ran %d calls, want %d", got, ran)
			}
			if s := logs.String(); !strings.Contains(s, tc.log) || !strings.Contains(s, "bad input from peer") {
				t.Errorf("closing not logged with %q:\n%s", tc.log, s)
			}
		})
	}
}

// startRelay forwards TCP between a client and addr and records every byte
// in both directions.
func startRelay(t *testing.T, addr string) (string, *testutil.SyncBuffer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &testutil.SyncBuffer{}
	var wg sync.WaitGroup
	wg.Go(func() {
		in, err := ln.Accept()
		if err != nil {
			return
		}
		defer in.Close()
		out, err := net.Dial("tcp", addr)
		if err != nil {
			return
		}
		defer out.Close()
		var pw sync.WaitGroup
		pw.Go(func() { _, _ = io.Copy(io.MultiWriter(out, r), in); _ = out.Close() })
		_, _ = io.Copy(io.MultiWriter(in, r), out)
		_ = in.Close()
		pw.Wait()
	})
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	return ln.Addr().String(), r
}

type echo struct{}

func (echo) Echo(_ context.Context, s string) (string, error) { return "got " + s, nil }

// What crosses the wire after the handshake is ciphertext: neither an
// argument nor a result nor a method name appears in a capture.
func TestFramesAreEncrypted(t *testing.T) {
	testutil.NoLeaks(t)
	srv := mustNode(t, "master", nil)
	if err := srv.Register("master", echo{}); err != nil {
		t.Fatal(err)
	}
	addr, rec := startRelay(t, serveInternal(t, srv))
	cl := mustNode(t, "w-1", nil)
	c, err := cl.Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	const password = "correct-horse-battery-staple"
	var got string
	if err := c.Call(context.Background(), "master", "Echo", &got, password); err != nil || got != "got "+password {
		t.Fatalf("Echo = %q, %v", got, err)
	}
	_ = c.Close()
	capture := rec.Bytes()
	for _, s := range []string{password, "Echo", "got "} {
		if bytes.Contains(capture, []byte(s)) {
			t.Errorf("capture of %d bytes contains %q in clear text", len(capture), s)
		}
	}
	if !bytes.Contains(capture, []byte("w-1")) { // the capture did see the (plaintext) handshake
		t.Error("relay captured nothing useful")
	}
}

// Role keys: a client declaring a role must prove that role's key or the
// cluster secret; the server records the role.
func TestRoleKeys(t *testing.T) {
	testutil.NoLeaks(t)
	workerKey := []byte("worker-key-0123456789abcdef")
	proxyKey := []byte("proxy-key-0123456789abcdef")
	logs := &testutil.SyncBuffer{}
	srv, err := New(Config{Name: "master", Secret: internalSecret, Logger: zerolog.New(logs),
		RoleSecrets: map[string][]byte{"worker": workerKey, "proxy": proxyKey}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	if err := srv.Register("master", echo{}); err != nil {
		t.Fatal(err)
	}
	accepted := make(chan *Conn, 1)
	srv.cfg.OnConnect = func(c *Conn) { accepted <- c }
	addr := serveInternal(t, srv)

	tests := []struct {
		name        string
		role        string
		key         []byte
		wantErr     error
		wantCluster bool
		log         string
	}{
		{"worker with worker key", "worker", workerKey, nil, false, ""},
		{"proxy with proxy key", "proxy", proxyKey, nil, false, ""},
		{"worker with cluster secret", "worker", internalSecret, nil, true, ""},
		{"cluster with cluster secret", RoleCluster, internalSecret, nil, true, ""},
		{"worker with proxy key", "worker", proxyKey, ErrAuth, false, `did not prove the worker key or the cluster secret`},
		{"proxy with worker key", "proxy", workerKey, ErrAuth, false, `did not prove the proxy key or the cluster secret`},
		{"cluster with worker key", RoleCluster, workerKey, ErrAuth, false, `(role \"cluster\") did not prove the cluster secret`},
		{"unknown role with worker key", "admin", workerKey, ErrAuth, false, `(role \"admin\") did not prove the cluster secret`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cl, err := New(Config{Name: "c", Role: tc.role, Secret: tc.key})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			c, err := cl.Dial(context.Background(), addr)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Dial = %v, want %v", err, tc.wantErr)
				}
				testutil.Eventually(t, 10*time.Second, testutil.Cond("refusal logged", func() bool { return strings.Contains(logs.String(), tc.log) }))
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var sc *Conn
			select {
			case sc = <-accepted:
			case <-time.After(10 * time.Second): // hang guard only
				t.Fatal("no accepted conn")
			}
			if sc.Role() != tc.role || sc.ClusterSecret() != tc.wantCluster {
				t.Errorf("server sees role %q cluster=%v, want %q %v", sc.Role(), sc.ClusterSecret(), tc.role, tc.wantCluster)
			}
			var got string
			if err := c.Call(context.Background(), "master", "Echo", &got, "x"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// hsClientV1 is the client hello of protocol version 1 (no role).
type hsClientV1 struct {
	//lint:ignore U1000 go-msgpack reads this field's tag (encode as an array)
	_struct bool `codec:",toarray"`
	Version uint8
	Name    string
	Nonce   []byte
	MAC     []byte
}

// A version-1 peer fails clearly on both sides instead of misparsing.
func TestOldProtocolVersion(t *testing.T) {
	testutil.NoLeaks(t)
	t.Run("old client", func(t *testing.T) {
		logs := &testutil.SyncBuffer{}
		srv := mustNode(t, "master", logs)
		addr := serveInternal(t, srv)
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		br := bufio.NewReader(nc)
		var hello hsHello
		if err := hsRead(br, &hello); err != nil {
			t.Fatal(err)
		}
		if err := hsWrite(nc, &hsClientV1{Version: 1, Name: "old", Nonce: make([]byte, nonceLen), MAC: make([]byte, 32)}); err != nil {
			t.Fatal(err)
		}
		var verdict hsServer
		if err := hsRead(br, &verdict); err != nil {
			t.Fatal(err)
		}
		if verdict.OK || verdict.Reason != "version" {
			t.Fatalf("verdict %+v, want refusal for version", verdict)
		}
		hangsUp(t, nc)
		testutil.Eventually(t, 10*time.Second, testutil.Cond("refusal logged", func() bool {
			return strings.Contains(logs.String(), "peer protocol version 1, want 2")
		}))
	})
	t.Run("old server", func(t *testing.T) {
		addr := fakeServer(t, func(nc net.Conn, br *bufio.Reader) {
			_ = hsWrite(nc, &hsHello{Version: 1, Nonce: make([]byte, nonceLen)})
		})
		n := mustNode(t, "c", nil)
		_, err := n.Dial(context.Background(), addr)
		if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "server protocol version 1, want 2") {
			t.Fatalf("Dial = %v, want a version error", err)
		}
	})
}

// RegisterFor: only the named roles (and RoleCluster) may call the object.
func TestRegisterFor(t *testing.T) {
	testutil.NoLeaks(t)
	workerKey := []byte("worker-key-0123456789abcdef")
	proxyKey := []byte("proxy-key-0123456789abcdef")
	logs := &testutil.SyncBuffer{}
	srv, err := New(Config{Name: "master", Secret: internalSecret, Logger: zerolog.New(logs),
		RoleSecrets: map[string][]byte{"worker": workerKey, "proxy": proxyKey}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	if err := srv.RegisterFor("workers-only", echo{}, "worker"); err != nil {
		t.Fatal(err)
	}
	if err := srv.Register("anyone", echo{}); err != nil {
		t.Fatal(err)
	}
	addr := serveInternal(t, srv)
	tests := []struct {
		role   string
		key    []byte
		object string
		ok     bool
	}{
		{"worker", workerKey, "workers-only", true},
		{"proxy", proxyKey, "workers-only", false},
		{RoleCluster, internalSecret, "workers-only", true},
		{"proxy", internalSecret, "workers-only", false}, // the declared role counts
		{"proxy", proxyKey, "anyone", true},
	}
	for _, tc := range tests {
		t.Run(tc.role+"->"+tc.object, func(t *testing.T) {
			cl, err := New(Config{Name: "c", Role: tc.role, Secret: tc.key})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			c, err := cl.Dial(context.Background(), addr)
			if err != nil {
				t.Fatal(err)
			}
			var got string
			err = c.Call(context.Background(), tc.object, "Echo", &got, "x")
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrForbidden) || !strings.Contains(err.Error(), `role "proxy" may not call workers-only.Echo`) {
				t.Fatalf("call = %v, want ErrForbidden", err)
			}
			// The refusal is an error reply: the connection stays up.
			if err := c.Call(context.Background(), "anyone", "Echo", &got, "x"); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(logs.String(), "call refused") {
				t.Error("refusal not logged")
			}
		})
	}
}

// BenchmarkFrameSealOpen is the CPU cost of sealing and opening one frame,
// without the network noise of BenchmarkSealing.
func BenchmarkFrameSealOpen(b *testing.B) {
	for _, size := range []int{64, 4 << 10, 64 << 10} {
		b.Run(strconv.Itoa(size)+"B", func(b *testing.B) {
			key := bytes.Repeat([]byte{7}, 32)
			tx, _ := newFrameCipher(key)
			rx, _ := newFrameCipher(key)
			body := make([]byte, size)
			var buf bytes.Buffer
			bw := bufio.NewWriterSize(&buf, 128<<10)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				buf.Reset()
				bw.Reset(&buf)
				if err := tx.write(bw, body); err != nil {
					b.Fatal(err)
				}
				_ = bw.Flush()
				if _, err := rx.read(&buf, DefaultMaxFrame); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Name keys: a key bound to a client's name proves the name as well as the
// role (Conn.NameProven); another name's key proves nothing; a node given
// a new dial key (SetDialSecret) proves it on its next dial.
func TestNameKeys(t *testing.T) {
	testutil.NoLeaks(t)
	workerKey := []byte("worker-key-0123456789abcdef")
	nameKey := func(name string) []byte { return []byte("name-key-of-" + name + "-0123456789") }
	srv, err := New(Config{Name: "master", Secret: internalSecret, Logger: zerolog.Nop(),
		RoleSecrets: map[string][]byte{"worker": workerKey},
		NameSecret: func(role, name string) []byte {
			if role != "worker" {
				return nil
			}
			return nameKey(name)
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	if err := srv.Register("master", echo{}); err != nil {
		t.Fatal(err)
	}
	accepted := make(chan *Conn, 1)
	srv.cfg.OnConnect = func(c *Conn) { accepted <- c }
	addr := serveInternal(t, srv)

	for _, tc := range []struct {
		name, client, role     string
		key                    []byte
		wantErr                error
		wantNamed, wantCluster bool
	}{
		{"own name key", "w-1", "worker", nameKey("w-1"), nil, true, false},
		{"role key", "w-1", "worker", workerKey, nil, false, false},
		{"cluster secret", "w-1", "worker", internalSecret, nil, false, true},
		{"another name's key", "w-1", "worker", nameKey("w-2"), ErrAuth, false, false},
		{"name key in another role", "w-1", "proxy", nameKey("w-1"), ErrAuth, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, err := New(Config{Name: tc.client, Role: tc.role, Secret: tc.key})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			_, err = cl.Dial(context.Background(), addr)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Dial = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			sc := <-accepted
			if sc.NameProven() != tc.wantNamed || sc.ClusterSecret() != tc.wantCluster || sc.PeerName() != tc.client {
				t.Errorf("server sees %q named=%v cluster=%v, want named=%v cluster=%v", sc.PeerName(), sc.NameProven(), sc.ClusterSecret(), tc.wantNamed, tc.wantCluster)
			}
		})
	}

	t.Run("dial key replaced", func(t *testing.T) {
		cl, err := New(Config{Name: "w-3", Role: "worker", Secret: workerKey})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if err := cl.SetDialSecret([]byte("short")); err == nil {
			t.Fatal("a short dial key was accepted")
		}
		if err := cl.SetDialSecret(nameKey("w-3")); err != nil {
			t.Fatal(err)
		}
		if _, err := cl.Dial(context.Background(), addr); err != nil {
			t.Fatal(err)
		}
		if sc := <-accepted; !sc.NameProven() {
			t.Error("the new dial key did not prove the name")
		}
	})
}
