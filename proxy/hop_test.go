package proxy

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/internal/hop"
)

var testHopKey = []byte("0123456789abcdef0123456789abcdef")

// hopChecker is a worker that answers 403 unless the request carries a
// valid hop signature, and records the X-Forwarded-For it was given.
type hopChecker struct {
	next http.Handler
	xff  atomic.Value
}

func (h *hopChecker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := hop.Verify(testHopKey, time.Now(), r.Header.Get(hop.Header), hop.FieldsOf(r)); err != nil {
		http.Error(w, "hop: "+err.Error(), http.StatusForbidden)
		return
	}
	h.xff.Store(r.Header.Get("X-Forwarded-For"))
	if h.next != nil {
		h.next.ServeHTTP(w, r)
		return
	}
	w.Write([]byte("ok"))
}

func TestHopSignedHTTP(t *testing.T) {
	wk := &hopChecker{}
	route := startWorker(t, wk)
	_, srv := startProxy(t, Config{Router: &fakeRouter{route: route}, HopKey: func() []byte { return testHopKey }})
	for _, tc := range []struct {
		name, method, path string
		hdr                map[string]string
	}{
		{"get", "GET", "/chat/a/" + testInstance, nil},
		{"query and escapes", "GET", "/chat/a/" + testInstance + "/b/" + testBrowser + "/x%20y?a=1&b=%2F", nil},
		{"post", "POST", "/chat/login", nil},
		{"forged hop and forwarded headers", "GET", "/chat",
			map[string]string{hop.Header: "v1.1.AAAA", "X-Forwarded-For": "6.6.6.6", "X-Forwarded-Proto": "https"}},
		{"no host", "GET", "/chat", map[string]string{"Host": ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader("user=a"))
			for k, v := range tc.hdr {
				if k == "Host" {
					req.Host = v
					continue
				}
				req.Header.Set(k, v)
			}
			resp, err := client(t).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body := readAll(t, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d %q: the worker refused the proxy's hop", resp.StatusCode, body)
			}
			if got := wk.xff.Load(); got != "127.0.0.1" {
				t.Fatalf("worker saw X-Forwarded-For %q, want the proxy's peer address only", got)
			}
		})
	}
}

func TestHopSignedWebSocket(t *testing.T) {
	echo := newWSEcho()
	wk := &hopChecker{next: echo}
	route := startWorker(t, wk)
	_, srv := startProxy(t, Config{Router: &fakeRouter{route: route}, HopKey: func() []byte { return testHopKey }})
	c := dialWS(t, wsURL(srv.URL, wsPath+"?v=1"), http.Header{hop.Header: {"v1.1.AAAA"}, "X-Forwarded-For": {"6.6.6.6"}})
	<-echo.hdr
	if err := c.WriteMessage(websocket.TextMessage, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := c.ReadMessage(); err != nil || string(msg) != "hi" {
		t.Fatalf("echo: %q %v", msg, err)
	}
	if got := wk.xff.Load(); got != "127.0.0.1" {
		t.Fatalf("worker saw X-Forwarded-For %q", got)
	}
}

// TestHopNoKeyYet: a proxy the master has not yet given a key answers 503
// itself instead of sending requests every worker would refuse.
func TestHopNoKeyYet(t *testing.T) {
	var hits atomic.Int64
	route := startWorker(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	_, srv := startProxy(t, Config{Router: &fakeRouter{route: route}, HopKey: func() []byte { return nil }})
	for _, path := range []string{"/chat", wsPath} {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		if path == wsPath {
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", "websocket")
		}
		resp, err := client(t).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(t, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "not yet connected") {
			t.Fatalf("%s: %d %q, want 503 not yet connected", path, resp.StatusCode, body)
		}
	}
	if hits.Load() != 0 {
		t.Fatalf("worker contacted %d times", hits.Load())
	}
}

// TestHopInboundDropped: a client's X-CB-Hop never reaches a worker, even
// from a proxy that signs nothing.
func TestHopInboundDropped(t *testing.T) {
	got := make(chan string, 2)
	route := startWorker(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get(hop.Header)
	}))
	_, srv := startProxy(t, Config{Router: &fakeRouter{route: route}})
	req, _ := http.NewRequest("GET", srv.URL+"/chat", nil)
	req.Header.Set(hop.Header, "v1.1.forged")
	resp, err := client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if h := <-got; h != "" {
		t.Fatalf("worker saw X-CB-Hop %q", h)
	}
}
