//go:build linux

package proxy

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/internal/handoff"
	"github.com/cloudbrowser-go/cloudbrowser/internal/hop"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
)

// handoffWorker is an echo worker on this host that takes handoffs: the
// same handler behind its TCP port and its handoff socket. It counts
// requests whose hop signature does not verify.
func handoffWorker(t *testing.T, key []byte) (Route, *wsEcho, *atomic.Int64) {
	t.Helper()
	echo := newWSEcho()
	bad := new(atomic.Int64)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := hop.Verify(key, time.Now(), r.Header.Get(hop.Header), hop.FieldsOf(r)); err != nil {
			bad.Add(1)
		}
		echo.ServeHTTP(w, r)
	})
	srv := httptest.NewServer(h)
	l, err := handoff.Listen(filepath.Join(t.TempDir(), "w.sock"), nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h}
	done := make(chan struct{})
	go func() { defer close(done); _ = hs.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		hs.Close()
		<-done
	})
	return Route{WorkerID: testWorker, Addr: srv.Listener.Addr().String(), Handoff: l.Path(), Host: handoff.HostID()}, echo, bad
}

func echoOnce(t *testing.T, c *websocket.Conn, msg string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
		t.Fatal(err)
	}
	_, got, err := c.ReadMessage()
	if err != nil || string(got) != msg {
		t.Fatalf("echo %q: %q, %v", msg, got, err)
	}
}

// TestWebSocketHandoff: a WebSocket to a worker on this host is handed to
// it: the signed handshake is the worker's, the proxy relays none of its
// bytes, and the session outlives the proxy.
func TestWebSocketHandoff(t *testing.T) {
	key := make([]byte, hop.KeyLen)
	_, _ = rand.Read(key)
	route, echo, bad := handoffWorker(t, key)
	p, srv := startProxy(t, Config{Router: &fakeRouter{route: route}, HopKey: func() []byte { return key }})
	c := dialWS(t, wsURL(srv.URL, wsPath), nil)
	echoOnce(t, c, "hello")
	if h := <-echo.hdr; h.Get("X-Forwarded-For") != "127.0.0.1" || h.Get("X-Request-Id") == "" {
		t.Errorf("worker saw %v", h)
	}
	if bad.Load() != 0 {
		t.Errorf("%d handshakes without a valid hop signature", bad.Load())
	}
	// The proxy counts the socket once it is sent, which the worker's
	// answer may come before.
	testutil.Eventually(t, testutil.Scale(10*time.Second), func() error {
		if st := p.Stats(); st.WebSocketsHandedOff != 1 || st.WebSocketsTotal != 0 || st.BytesUp != 0 {
			return fmt.Errorf("stats %+v: want one handed off, none relayed", st)
		}
		return nil
	})
	srv.Close() // the proxy's connections go; the handed one is not its
	echoOnce(t, c, "after the proxy closed")
}

// TestWebSocketHandoffFallsBack: a handoff socket that is gone means the
// connection is relayed, and the socket is not tried again for a while;
// DisableHandoff relays too.
func TestWebSocketHandoffFallsBack(t *testing.T) {
	route := startWorker(t, newWSEcho())
	route.Handoff, route.Host = filepath.Join(t.TempDir(), "gone.sock"), handoff.HostID()
	p, srv := startProxy(t, Config{Router: &fakeRouter{route: route}})
	for i := range 2 {
		c := dialWS(t, wsURL(srv.URL, wsPath), nil)
		echoOnce(t, c, "relayed")
		c.Close()
		if st := p.Stats(); st.WebSocketsHandedOff != 0 || st.WebSocketsTotal != uint64(i+1) {
			t.Fatalf("connection %d: stats %+v", i, st)
		}
	}
	if p.handoffs.allows(route) {
		t.Error("a failed handoff socket is tried again at once")
	}

	key := make([]byte, hop.KeyLen)
	hroute, _, _ := handoffWorker(t, key)
	p2, srv2 := startProxy(t, Config{Router: &fakeRouter{route: hroute}, DisableHandoff: true})
	c := dialWS(t, wsURL(srv2.URL, wsPath), nil)
	echoOnce(t, c, "relayed")
	if st := p2.Stats(); st.WebSocketsHandedOff != 0 || st.WebSocketsTotal != 1 {
		t.Errorf("DisableHandoff: stats %+v", st)
	}
}

// TestEdgeWorkerPairs: the edge reaches a worker on this host over a unix
// socket pair handed to the worker's handoff socket, not TCP, and pools
// it; with that socket gone it uses TCP and leaves the socket alone.
func TestEdgeWorkerPairs(t *testing.T) {
	key := make([]byte, hop.KeyLen)
	_, _ = rand.Read(key)
	var viaTCP, viaPair, unsigned atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := hop.Verify(key, time.Now(), r.Header.Get(hop.Header), hop.FieldsOf(r)); err != nil {
			unsigned.Add(1)
		}
		if strings.HasPrefix(r.RemoteAddr, "127.0.0.1:") {
			viaTCP.Add(1)
		} else {
			viaPair.Add(1)
		}
		_, _ = io.WriteString(w, "ok "+r.Header.Get("X-Forwarded-For"))
	})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	l, err := handoff.Listen(filepath.Join(t.TempDir(), "w.sock"), nil)
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h}
	served := make(chan struct{})
	go func() { defer close(served); _ = hs.Serve(l) }()
	t.Cleanup(func() { hs.Close(); <-served })
	route := Route{WorkerID: testWorker, Addr: srv.Listener.Addr().String(), Handoff: l.Path(), Host: handoff.HostID()}
	p, ps := startProxy(t, Config{Router: &fakeRouter{route: route}, HopKey: func() []byte { return key }})

	get := func(what string) {
		t.Helper()
		resp := rawExchange(t, ps.Addr, "GET "+edgePath+" HTTP/1.1\r\nHost: cb.example\r\n\r\n", 1, false)[0]
		if b := body(t, resp); resp.StatusCode != 200 || b != "ok 127.0.0.1" {
			t.Fatalf("%s: %d %q", what, resp.StatusCode, b)
		}
	}
	for i := range 5 {
		get(fmt.Sprintf("request %d", i))
	}
	if viaPair.Load() != 5 || viaTCP.Load() != 0 || unsigned.Load() != 0 {
		t.Fatalf("over a pair %d, TCP %d, unsigned %d; want 5 over a pair", viaPair.Load(), viaTCP.Load(), unsigned.Load())
	}
	if n := p.Stats().WorkerPairs; n != 1 {
		t.Fatalf("%d pairs for 5 requests in a row, want 1 (pooled)", n)
	}
	if served, handed := edgeCounts(p); served != 5 || len(handed) != 0 {
		t.Fatalf("the edge served %d and handed %v to net/http", served, handed)
	}

	// The worker's handoff socket and its connections gone: TCP.
	hs.Close()
	<-served
	for i := range 3 {
		get(fmt.Sprintf("request %d after the socket went", i))
	}
	if viaTCP.Load() != 3 || viaPair.Load() != 5 {
		t.Fatalf("after the socket went: over a pair %d, TCP %d; want 3 more over TCP", viaPair.Load(), viaTCP.Load())
	}
	if p.handoffs.allows(route) {
		t.Error("a failed handoff socket is tried again at once")
	}
}

// handedOff dials a WebSocket that the proxy hands to route's worker and
// waits until the proxy counted it.
func handedOff(t *testing.T, p *Proxy, url string, n uint64) *websocket.Conn {
	t.Helper()
	c := dialWS(t, url, nil)
	echoOnce(t, c, "hello")
	testutil.Eventually(t, testutil.Scale(10*time.Second), func() error {
		if st := p.Stats(); st.WebSocketsHandedOff != n {
			return fmt.Errorf("stats %+v: want %d handed off", st, n)
		}
		return nil
	})
	return c
}

// TestWebSocketHandoffCloseWorker: a socket handed to a worker the master
// then declares dead is ended by the proxy (the worker, stalled or cut
// off, would never end it); its client sees the connection close.
func TestWebSocketHandoffCloseWorker(t *testing.T) {
	key := make([]byte, hop.KeyLen)
	route, _, _ := handoffWorker(t, key)
	p, srv := startProxy(t, Config{Router: &fakeRouter{route: route}, HopKey: func() []byte { return key }})
	c := handedOff(t, p, wsURL(srv.URL, wsPath), 1)
	if n := p.CloseWorker("w-other"); n != 0 {
		t.Fatalf("another worker's CloseWorker closed %d", n)
	}
	echoOnce(t, c, "still handed")
	if n := p.CloseWorker(testWorker); n != 1 {
		t.Fatalf("CloseWorker closed %d, want 1", n)
	}
	_ = c.SetReadDeadline(time.Now().Add(testutil.Scale(10 * time.Second)))
	if _, _, err := c.ReadMessage(); err == nil || isTimeout(err) {
		t.Fatalf("client of the dead worker: %v, want the connection closed", err)
	}
	testutil.Eventually(t, testutil.Scale(10*time.Second), testutil.Cond("the proxy let go of the descriptor", func() bool { return p.handed.count() == 0 }))
}

// TestWebSocketHandoffWorkerEnds: the proxy's descriptor of a handed
// socket never holds it open: when the worker ends the connection, its
// client sees the end of the stream (not a hang), and the proxy lets go.
func TestWebSocketHandoffWorkerEnds(t *testing.T) {
	key := make([]byte, hop.KeyLen)
	route, echo, _ := handoffWorker(t, key)
	p, srv := startProxy(t, Config{Router: &fakeRouter{route: route}, HopKey: func() []byte { return key }})
	c := handedOff(t, p, wsURL(srv.URL, wsPath), 1)
	wc := <-echo.conns
	_ = wc.Close() // no close frame: only the end of the TCP stream tells
	_ = c.SetReadDeadline(time.Now().Add(testutil.Scale(10 * time.Second)))
	if _, _, err := c.ReadMessage(); err == nil || isTimeout(err) {
		t.Fatalf("after the worker ended it: %v, want the end of the stream", err)
	}
	testutil.Eventually(t, testutil.Scale(10*time.Second), testutil.Cond("the proxy let go of the descriptor", func() bool { return p.handed.count() == 0 }))
	// The client leaving is noticed too.
	c2 := handedOff(t, p, wsURL(srv.URL, wsPath), 2)
	_ = c2.Close()
	testutil.Eventually(t, testutil.Scale(10*time.Second), testutil.Cond("the proxy let go after the client left", func() bool { return p.handed.count() == 0 }))
}

// TestHandoffWorkerProcess is not a test: run by
// TestWebSocketHandoffWorkerDies as a separate worker process, it serves a
// WebSocket echo on the handoff socket named by CB_TEST_HANDOFF_SOCKET
// until killed.
func TestHandoffWorkerProcess(t *testing.T) {
	path := os.Getenv("CB_TEST_HANDOFF_SOCKET")
	if path == "" {
		t.Skip("a helper process, run by TestWebSocketHandoffWorkerDies")
	}
	l, err := handoff.Listen(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = (&http.Server{Handler: newWSEcho()}).Serve(l)
}

// TestWebSocketHandoffWorkerDies: a socket handed to a worker process that
// is then killed (kill -9) is ended by the proxy at once, with no word
// from the master: the proxy's own descriptor does not keep its client on
// a dead connection.
func TestWebSocketHandoffWorkerDies(t *testing.T) {
	cmd, exited, route := handoffProcess(t)
	key := make([]byte, hop.KeyLen)
	p, srv := startProxy(t, Config{Router: &fakeRouter{route: route}, HopKey: func() []byte { return key }})
	c := handedOff(t, p, wsURL(srv.URL, wsPath), 1)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-exited
	_ = c.SetReadDeadline(time.Now().Add(testutil.Scale(10 * time.Second)))
	if _, _, err := c.ReadMessage(); err == nil || isTimeout(err) {
		t.Fatalf("client of the killed worker: %v, want the connection closed", err)
	}
	testutil.Eventually(t, testutil.Scale(10*time.Second), testutil.Cond("the proxy let go of the descriptor", func() bool { return p.handed.count() == 0 }))
}

// handoffProcess starts a worker process (TestHandoffWorkerProcess) that
// takes handoffs, and returns it, a channel closed when it exited, and
// its route (no TCP address: only handoffs reach it).
func handoffProcess(t *testing.T) (*exec.Cmd, chan struct{}, Route) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "w.sock")
	cmd := exec.Command(os.Args[0], "-test.run=^TestHandoffWorkerProcess$")
	cmd.Env = append(os.Environ(), "CB_TEST_HANDOFF_SOCKET="+sock)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	testutil.Eventually(t, testutil.Scale(20*time.Second), func() error {
		_, err := os.Stat(sock)
		return err
	})
	return cmd, exited, Route{WorkerID: testWorker, Addr: "127.0.0.1:1", Handoff: sock, Host: handoff.HostID()}
}

// TestWebSocketHandoffToStoppedWorker: a worker that is stopped (SIGSTOP)
// never acknowledges a handoff, but may take the socket when it resumes:
// the proxy must not relay that socket as well (two servers on one
// connection). It ends it; the client sees the connection close, not a
// hang.
func TestWebSocketHandoffToStoppedWorker(t *testing.T) {
	cmd, _, route := handoffProcess(t)
	// Its TCP port, as a stopped process's: connections queue, unanswered.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	route.Addr = ln.Addr().String()
	key := make([]byte, hop.KeyLen)
	p, srv := startProxy(t, Config{Router: &fakeRouter{route: route}, HopKey: func() []byte { return key }})
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGCONT) }()
	d := websocket.Dialer{HandshakeTimeout: testutil.Scale(30 * time.Second)}
	c, resp, err := d.Dial(wsURL(srv.URL, wsPath), nil)
	if err == nil {
		c.Close()
		t.Fatal("a websocket opened on a stopped worker")
	}
	if resp != nil {
		resp.Body.Close()
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the handshake hung: %v", err)
	}
	if st := p.Stats(); st.WebSocketsTotal != 0 || st.WebSocketsHandedOff != 0 {
		t.Fatalf("stats %+v: the unacknowledged socket was relayed or counted", st)
	}
}

// TestRelayAfterFailedHandoffBounded: when the handoff fails (the worker's
// socket refuses) the proxy relays the upgrade, and a worker that then
// never answers it (stopped) gets the client a 504 after the handshake
// timeout, not a hang.
func TestRelayAfterFailedHandoffBounded(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0") // connections queue, unanswered
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	route := Route{WorkerID: testWorker, Addr: ln.Addr().String(), Handoff: filepath.Join(t.TempDir(), "none.sock"), Host: handoff.HostID()}
	key := make([]byte, hop.KeyLen)
	p, srv := startProxy(t, Config{Router: &fakeRouter{route: route}, HopKey: func() []byte { return key },
		HandshakeTimeout: 200 * time.Millisecond})
	d := websocket.Dialer{HandshakeTimeout: testutil.Scale(30 * time.Second)}
	c, resp, err := d.Dial(wsURL(srv.URL, wsPath), nil)
	if err == nil {
		c.Close()
		t.Fatal("a websocket opened on a worker that never answered")
	}
	if resp == nil || resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("answer %v (%v), want 504", resp, err)
	}
	resp.Body.Close()
	if st := p.Stats(); st.WebSocketsTotal != 0 {
		t.Fatalf("stats %+v: an unanswered upgrade was counted as a websocket", st)
	}
}
