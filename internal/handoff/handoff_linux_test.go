package handoff

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// pair returns both ends of a loopback TCP connection.
func pair(t *testing.T) (client, server *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

func listen(t *testing.T, onError func(error)) *Listener {
	t.Helper()
	l, err := Listen(filepath.Join(t.TempDir(), "w.sock"), onError)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestHandoffMovesTheConnection: after Send, the receiver reads the payload
// and then what the client sends, and its writes reach the client, with
// the sender's copy closed.
func TestHandoffMovesTheConnection(t *testing.T) {
	l := listen(t, nil)
	client, server := pair(t)
	if err := Send(context.Background(), l.Path(), server, []byte("HEAD\n")); err != nil {
		t.Fatal(err)
	}
	server.Close() // the sender's copy: the socket lives on in the receiver
	got, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if _, err := client.Write([]byte("after\n")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(got)
	for _, want := range []string{"HEAD\n", "after\n"} {
		line, err := r.ReadString('\n')
		if err != nil || line != want {
			t.Fatalf("read %q, %v; want %q", line, err, want)
		}
	}
	if _, err := got.Write([]byte("back\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(client).ReadString('\n')
	if err != nil || line != "back\n" {
		t.Fatalf("client read %q, %v", line, err)
	}
	if ra := got.RemoteAddr().String(); ra != client.LocalAddr().String() {
		t.Errorf("RemoteAddr %s, want the client's %s", ra, client.LocalAddr())
	}
}

// TestHandoffWithoutPayload: a socket handed over with nothing to read
// first (a proxy's connection to its worker) arrives every time, though
// the worker acknowledges and hangs up as soon as it has the socket.
func TestHandoffWithoutPayload(t *testing.T) {
	l := listen(t, nil)
	for i := range 200 {
		client, server := pair(t)
		if err := Send(context.Background(), l.Path(), server, nil); err != nil {
			t.Fatalf("handoff %d: %v", i, err)
		}
		server.Close()
		got, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 1)
		if _, err := io.ReadFull(got, b); err != nil || b[0] != 'x' {
			t.Fatalf("handoff %d: read %q, %v", i, b, err)
		}
		got.Close()
		client.Close()
	}
}

// TestHandoffServedByHTTP: an http.Server serving the Listener answers the
// handed request on the client's own connection.
func TestHandoffServedByHTTP(t *testing.T) {
	l := listen(t, nil)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "served "+r.URL.Path)
	})}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(l) }()
	defer func() { srv.Close(); <-done }()
	client, server := pair(t)
	if err := Send(context.Background(), l.Path(), server, []byte("GET /x HTTP/1.1\r\nHost: h\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	server.Close()
	resp, err := http.ReadResponse(bufio.NewReader(client), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 100))
	if resp.StatusCode != 200 || string(b) != "served /x" {
		t.Fatalf("%d %q", resp.StatusCode, b)
	}
}

// TestHandoffBadInput: garbage, a message without a socket and an
// oversized payload are refused and reported; a connection closed without
// a byte (a liveness probe) is not reported; the listener goes on.
func TestHandoffBadInput(t *testing.T) {
	var mu sync.Mutex
	var errs []string
	l := listen(t, func(err error) { mu.Lock(); errs = append(errs, err.Error()); mu.Unlock() })
	send := func(b []byte) {
		c, err := net.Dial("unix", l.Path())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = c.Write(b)
		_ = c.(*net.UnixConn).CloseWrite()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		var ack [1]byte
		if n, _ := c.Read(ack[:]); n != 0 {
			t.Errorf("%q was acknowledged", b)
		}
	}
	send([]byte("garbage that is not a handoff"))
	var big [4]byte
	binary.BigEndian.PutUint32(big[:], MaxPayload+1)
	send(big[:])
	send(nil)
	_, server := pair(t)
	if err := Send(context.Background(), l.Path(), server, make([]byte, MaxPayload+1)); err == nil {
		t.Error("an oversized payload was sent")
	}
	mu.Lock()
	n := len(errs)
	mu.Unlock()
	if n != 2 {
		t.Errorf("refusals reported: %v", errs)
	}
	// Still serving.
	client, server := pair(t)
	if err := Send(context.Background(), l.Path(), server, []byte("ok\n")); err != nil {
		t.Fatal(err)
	}
	got, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	got.Close()
	_ = client
}

// TestSendWithoutListener: a missing worker is an error, and the
// connection stays the caller's.
func TestSendWithoutListener(t *testing.T) {
	client, server := pair(t)
	err := Send(context.Background(), filepath.Join(t.TempDir(), "none.sock"), server, []byte("x"))
	if err == nil || !strings.Contains(err.Error(), "dial") {
		t.Fatalf("Send to nobody: %v", err)
	}
	if _, err := server.Write([]byte("still mine\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(client).ReadString('\n')
	if err != nil || line != "still mine\n" {
		t.Fatalf("%q %v", line, err)
	}
}

// TestListenerClose: Accept ends with net.ErrClosed.
func TestListenerClose(t *testing.T) {
	l := listen(t, nil)
	go func() { time.Sleep(10 * time.Millisecond); l.Close() }()
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
}

func TestHostID(t *testing.T) {
	a, b := HostID(), HostID()
	if a == "" || a != b {
		t.Fatalf("HostID %q, %q", a, b)
	}
}

// TestPrivateDir: made 0700 if missing; a directory others may write to,
// or a file, is refused.
func TestPrivateDir(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "mine")
	if err := PrivateDir(dir); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("made %v, %v", fi.Mode(), err)
	}
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o777); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(open, 0o777)
	if err := PrivateDir(open); err == nil {
		t.Error("a world-writable directory was accepted")
	}
	file := filepath.Join(base, "file")
	_ = os.WriteFile(file, nil, 0o600)
	if err := PrivateDir(file); err == nil {
		t.Error("a file was accepted")
	}
}

// TestCleanStale: a socket left by a listener that is gone is removed; a
// live one and other files stay.
func TestCleanStale(t *testing.T) {
	dir := t.TempDir()
	live, err := Listen(filepath.Join(dir, "live.sock"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	dead, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, "dead.sock"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	dead.SetUnlinkOnClose(false) // as a killed process leaves it
	dead.Close()
	_ = os.WriteFile(filepath.Join(dir, "other"), nil, 0o600)
	CleanStale(dir)
	for name, want := range map[string]bool{"live.sock": true, "dead.sock": false, "other": true} {
		if _, err := os.Lstat(filepath.Join(dir, name)); (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", name, err == nil, want)
		}
	}
}
