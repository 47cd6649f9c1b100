package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/internal/urlkind"
)

var upgrader = websocket.Upgrader{ReadBufferSize: 64 << 10, WriteBufferSize: 64 << 10}

// wsEcho is a gorilla echo worker. It reports the upgrade request's headers
// on hdr and its read error (i.e. how the session ended) on ended.
type wsEcho struct {
	hdr   chan http.Header
	ended chan error
	greet string // sent before the first read, to exercise buffered bytes
	conns chan *websocket.Conn
}

func newWSEcho() *wsEcho {
	return &wsEcho{hdr: make(chan http.Header, 16), ended: make(chan error, 16), conns: make(chan *websocket.Conn, 16)}
}

func (e *wsEcho) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Deny") != "" {
		w.Header().Set("X-Why", "denied")
		http.Error(w, "upgrade denied by worker", http.StatusForbidden)
		return
	}
	e.hdr <- r.Header.Clone()
	c, err := upgrader.Upgrade(w, r, http.Header{"X-From-Worker": {"1"}})
	if err != nil {
		return
	}
	defer c.Close()
	e.conns <- c
	if e.greet != "" {
		c.WriteMessage(websocket.TextMessage, []byte(e.greet))
	}
	for {
		mt, msg, err := c.ReadMessage()
		if err != nil {
			e.ended <- err
			return
		}
		if err := c.WriteMessage(mt, msg); err != nil {
			e.ended <- err
			return
		}
	}
}

func wsURL(srv string, path string) string { return "ws" + strings.TrimPrefix(srv, "http") + path }

var wsPath = "/chat/a/" + testInstance + "/b/" + testBrowser + "/ws"

func dialWS(t testing.TB, url string, h http.Header) *websocket.Conn {
	t.Helper()
	d := websocket.Dialer{ReadBufferSize: 64 << 10, WriteBufferSize: 64<<10 + 16}
	c, resp, err := d.Dial(url, h)
	if err != nil {
		t.Fatalf("dial %s: %v (resp %v)", url, err, resp)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestWebSocketRelayEcho(t *testing.T) {
	echo := newWSEcho()
	route := startWorker(t, echo)
	fr := &fakeRouter{route: route}
	p, srv := startProxy(t, Config{Router: fr})

	c := dialWS(t, wsURL(srv.URL, wsPath+"?v=1"), http.Header{"X-Request-Id": {"ws-req-1"}, "Sec-Websocket-Protocol": {"cb1"}})
	h := <-echo.hdr
	for k, want := range map[string]string{
		"X-Request-Id": "ws-req-1", "X-Forwarded-For": "127.0.0.1", "X-Forwarded-Proto": "http",
		"Upgrade": "websocket", "Sec-Websocket-Protocol": "cb1",
	} {
		if got := h.Get(k); got != want {
			t.Errorf("worker saw %s = %q, want %q", k, got, want)
		}
	}

	big := make([]byte, 1<<20)
	rand.Read(big)
	var sent int
	for i := 0; i < 1000; i++ {
		mt, msg := websocket.TextMessage, []byte(fmt.Sprintf("message %d", i))
		switch {
		case i%250 == 0:
			mt, msg = websocket.BinaryMessage, append([]byte{byte(i)}, big...)
		case i%2 == 1:
			mt, msg = websocket.BinaryMessage, []byte{byte(i), 0, 0xff, byte(i >> 8)}
		}
		if err := c.WriteMessage(mt, msg); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		gotT, got, err := c.ReadMessage()
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if gotT != mt || !bytes.Equal(got, msg) {
			t.Fatalf("message %d corrupted: type %d len %d, want type %d len %d", i, gotT, len(got), mt, len(msg))
		}
		sent += len(msg)
	}
	if n := fr.calls.Load(); n != 1 {
		t.Fatalf("router calls = %d, want exactly 1 for the whole session", n)
	}
	if s := p.Stats(); s.WebSocketsOpen != 1 || s.WebSocketsTotal != 1 {
		t.Fatalf("stats during session = %+v", s)
	}

	// Closing the client ends the worker side.
	c.Close()
	if err := <-echo.ended; err == nil {
		t.Fatal("worker read should fail after client close")
	}
	waitRelaysDone(t, p)
	s := p.Stats()
	if s.BytesUp < uint64(sent) || s.BytesDown < uint64(sent) {
		t.Fatalf("byte counters up=%d down=%d, want >= %d payload bytes", s.BytesUp, s.BytesDown, sent)
	}
}

// waitRelaysDone waits for the proxy's relays to finish; Shutdown is the
// synchronization point, not a timer.
func waitRelaysDone(t testing.TB, p *Proxy) {
	t.Helper()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.WebSocketsOpen != 0 {
		t.Fatalf("open relays after shutdown: %d", s.WebSocketsOpen)
	}
}

func TestWebSocketWorkerClosesFirst(t *testing.T) {
	echo := newWSEcho()
	echo.greet = "hi" // written right after the 101: may arrive in the handshake buffer
	route := startWorker(t, echo)
	_, srv := startProxy(t, Config{Router: &fakeRouter{route: route}})
	c := dialWS(t, wsURL(srv.URL, wsPath), nil)
	if _, msg, err := c.ReadMessage(); err != nil || string(msg) != "hi" {
		t.Fatalf("greeting %q, %v", msg, err)
	}
	wc := <-echo.conns
	wc.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, "bye"), time.Time{})
	wc.Close()
	_, _, err := c.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.CloseGoingAway {
		t.Fatalf("client read err = %v, want close 1001", err)
	}
}

func TestWebSocketNon101Relayed(t *testing.T) {
	route := startWorker(t, newWSEcho())
	fr := &fakeRouter{route: route}
	p, srv := startProxy(t, Config{Router: fr})
	d := websocket.Dialer{}
	_, resp, err := d.Dial(wsURL(srv.URL, wsPath), http.Header{"X-Deny": {"1"}})
	if !errors.Is(err, websocket.ErrBadHandshake) || resp == nil {
		t.Fatalf("dial err = %v, resp %v; want bad handshake", err, resp)
	}
	body := readAll(t, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Why") != "denied" || !strings.Contains(body, "upgrade denied") {
		t.Fatalf("got %d %v %q, want the worker's 403", resp.StatusCode, resp.Header, body)
	}
	if s := p.Stats(); s.WebSocketsTotal != 0 {
		t.Fatalf("stats %+v: refused upgrade counted as relay", s)
	}
}

// TestWebSocketGone: a client engine's socket to something gone for good is
// accepted only to tell it why and where to go (a browser cannot read a
// refused handshake's status), then closed.
func TestWebSocketGone(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		err        error
	}{
		{"unknown instance", "does not exist", ErrUnknownInstance},
		{"lost", "stopped with it", ErrInstanceLost},
		{"merged", "replaced by a new one", ErrInstanceMerged},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, srv := startProxy(t, Config{Router: &fakeRouter{err: tc.err}})
			conn, _, err := websocket.DefaultDialer.Dial(wsURL(srv.URL, wsPath), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			var m map[string]string
			if err := conn.ReadJSON(&m); err != nil {
				t.Fatal(err)
			}
			if m["t"] != "closed" || !strings.Contains(m["reason"], tc.want) || m["reload"] != "/chat" {
				t.Fatalf("notice %v", m)
			}
			if _, _, err := conn.ReadMessage(); !websocket.IsCloseError(err, websocket.ClosePolicyViolation) {
				t.Fatalf("then %v, want a close frame", err)
			}
		})
	}
}

func TestWebSocketErrors(t *testing.T) {
	tests := []struct {
		name   string
		route  Route
		err    error
		status int
		hook   bool
	}{
		{"master down", Route{}, ErrMasterUnavailable, 503, false},
		{"worker refuses", Route{WorkerID: "w-dead", Addr: refusedAddr(t)}, nil, 502, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var hr hookRecorder
			_, srv := startProxy(t, Config{Router: &fakeRouter{route: tc.route, err: tc.err}, OnWorkerUnreachable: hr.hook})
			_, resp, err := websocket.DefaultDialer.Dial(wsURL(srv.URL, wsPath), nil)
			if err == nil || resp == nil {
				t.Fatalf("dial err %v resp %v", err, resp)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if hooked := hr.get(); tc.hook != (len(hooked) == 1) {
				t.Fatalf("hook calls %v", hooked)
			}
		})
	}
}

func TestWebSocketShutdownClosesRelays(t *testing.T) {
	echo := newWSEcho()
	route := startWorker(t, echo)
	p, srv := startProxy(t, Config{Router: &fakeRouter{route: route}})
	var clients []*websocket.Conn
	for i := 0; i < 3; i++ {
		c := dialWS(t, wsURL(srv.URL, wsPath), nil)
		c.WriteMessage(websocket.TextMessage, []byte("ping"))
		if _, _, err := c.ReadMessage(); err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	if s := p.Stats(); s.WebSocketsOpen != 3 {
		t.Fatalf("open = %d", s.WebSocketsOpen)
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, c := range clients {
		if _, _, err := c.ReadMessage(); err == nil {
			t.Fatal("client still connected after Shutdown")
		}
	}
	for range clients {
		if err := <-echo.ended; err == nil {
			t.Fatal("worker side not closed")
		}
	}
	// New upgrades are refused while shut down: the edge has closed the
	// listener (the connection is refused), or net/http answers 503.
	_, resp, err := websocket.DefaultDialer.Dial(wsURL(srv.URL, wsPath), nil)
	var oe *net.OpError
	refused := errors.As(err, &oe) && oe.Op == "dial"
	if err == nil || !refused && (resp == nil || resp.StatusCode != http.StatusServiceUnavailable) {
		t.Fatalf("after shutdown: err %v resp %v", err, resp)
	}
	if resp != nil {
		resp.Body.Close()
	}
}

// TestWebSocketRawBytes drives the relay with hand-written bytes: the client
// pipelines a frame with its handshake (bytes stuck in the server's bufio
// reader), and half-closes; the raw worker echoes until EOF, then says bye.
func TestWebSocketRawBytes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	workerDone := make(chan error, 1)
	go func() {
		workerDone <- func() error {
			c, err := ln.Accept()
			if err != nil {
				return err
			}
			defer c.Close()
			br := bufio.NewReader(c)
			req, err := http.ReadRequest(br)
			if err != nil {
				return err
			}
			if req.Header.Get("Upgrade") != "websocket" || req.URL.Path != wsPath {
				return fmt.Errorf("worker got %s %v", req.URL, req.Header)
			}
			io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
			if _, err := io.Copy(c, br); err != nil { // echo until the client's half-close
				return err
			}
			_, err = io.WriteString(c, "bye")
			return err
		}()
	}()
	defer func() { ln.Close() }()

	route := Route{WorkerID: testWorker, Addr: ln.Addr().String()}
	p, srv := startProxy(t, Config{Router: &fakeRouter{route: route}})
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	payload := "early-bytes-after-handshake"
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"+
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n%s", wsPath, payload)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 || resp.Header.Get("X-Request-Id") == "" {
		t.Fatalf("handshake: %v %v", resp, err)
	}
	got := make([]byte, len(payload))
	if _, err := io.ReadFull(br, got); err != nil || string(got) != payload {
		t.Fatalf("echo %q, %v", got, err)
	}
	conn.(*net.TCPConn).CloseWrite()
	rest, err := io.ReadAll(br) // "bye" then EOF: the half-close went through and back
	if err != nil || string(rest) != "bye" {
		t.Fatalf("after half-close: %q, %v", rest, err)
	}
	if err := <-workerDone; err != nil {
		t.Fatal(err)
	}
	waitRelaysDone(t, p)
	if s := p.Stats(); s.BytesUp != uint64(len(payload)) || s.BytesDown != uint64(len(payload)+3) {
		t.Fatalf("bytes up %d down %d", s.BytesUp, s.BytesDown)
	}
}

// A worker that accepts the TCP connection but hangs up before answering
// the upgrade is unreachable (502 + hook), not a refused upgrade.
func TestWebSocketWorkerDropsHandshake(t *testing.T) {
	route := resetWorker(t)
	var hr hookRecorder
	_, srv := startProxy(t, Config{Router: &fakeRouter{route: route}, OnWorkerUnreachable: hr.hook})
	_, resp, err := websocket.DefaultDialer.Dial(wsURL(srv.URL, wsPath), nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("err %v resp %v", err, resp)
	}
	resp.Body.Close()
	if hooked := hr.get(); len(hooked) != 1 {
		t.Fatalf("hook calls %v", hooked)
	}
}

// TestWebSocketCloseWorker: when the master declares a worker dead, the
// proxy closes every WebSocket it relays to that worker (whether or not
// the worker can still be reached), and only those: the engines reconnect
// and find the instance's new copy.
func TestWebSocketCloseWorker(t *testing.T) {
	deadEcho, liveEcho := newWSEcho(), newWSEcho()
	dead, live := startWorker(t, deadEcho), startWorker(t, liveEcho)
	dead.WorkerID, live.WorkerID = "w-dead", "w-live"
	var to atomic.Pointer[Route]
	to.Store(&dead)
	p, srv := startProxy(t, Config{Router: &fakeRouter{fn: func(ctx context.Context, _ urlkind.Target) (Route, error) { return *to.Load(), nil }}})
	open := func() *websocket.Conn {
		c := dialWS(t, wsURL(srv.URL, wsPath), nil)
		if err := c.WriteMessage(websocket.TextMessage, []byte("ping")); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.ReadMessage(); err != nil {
			t.Fatal(err)
		}
		return c
	}
	onDead := []*websocket.Conn{open(), open()}
	to.Store(&live)
	onLive := open()

	if n := p.CloseWorker("w-dead"); n != 2 {
		t.Fatalf("closed %d relays, want 2", n)
	}
	for i, c := range onDead {
		if _, _, err := c.ReadMessage(); err == nil {
			t.Fatalf("client %d of the dead worker still connected", i)
		}
	}
	if err := onLive.WriteMessage(websocket.TextMessage, []byte("still here")); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := onLive.ReadMessage(); err != nil || string(msg) != "still here" {
		t.Fatalf("the live worker's client: %q %v", msg, err)
	}
	if s := p.Stats(); s.WebSocketsWorkerGone != 2 {
		t.Fatalf("worker-gone count %d, want 2", s.WebSocketsWorkerGone)
	}
}
