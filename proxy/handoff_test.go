//go:build linux

package proxy

import (
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/internal/handoff"
	"github.com/cloudbrowser-go/cloudbrowser/internal/hop"
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
	st := p.Stats()
	if st.WebSocketsHandedOff != 1 || st.WebSocketsTotal != 0 || st.BytesUp != 0 {
		t.Errorf("stats %+v: want one handed off, none relayed", st)
	}
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
	if p.canHandOff(route) {
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
