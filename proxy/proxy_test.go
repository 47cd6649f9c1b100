package proxy

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/urlkind"
)

// seen is what the echo worker reports about the request it received.
type seen struct {
	Method, Path, RawPath, Query, Host, Body string
	Header                                   http.Header
}

func echoWorker(t testing.TB) Route {
	return startWorker(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Worker", "yes")
		w.Header().Set("X-Request-Id", "worker-should-not-override")
		json.NewEncoder(w).Encode(seen{r.Method, r.URL.Path, r.URL.RawPath, r.URL.RawQuery, r.Host, string(body), r.Header})
	}))
}

func TestHTTPForwarding(t *testing.T) {
	route := echoWorker(t)
	fr := &fakeRouter{route: route}
	p, srv := startProxy(t, Config{Router: fr})
	c := client(t)
	path := "/chat/a/" + testInstance + "/b/" + testBrowser + "/files/a%20b%2Fc.txt"

	tests := []struct {
		name       string
		method     string
		reqID      string
		body       string
		wantReqID  string // "" = generated
		wantTarget urlkind.Kind
	}{
		{"post with body and sane id", "POST", "client-id_1.2:3", "hello=world", "client-id_1.2:3", urlkind.KindResource},
		{"get with insane id", "GET", "bad id with spaces", "", "", urlkind.KindResource},
		{"put with overlong id", "PUT", strings.Repeat("x", 65), "x", "", urlkind.KindResource},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, srv.URL+path+"?q=1&r=%2F", strings.NewReader(tc.body))
			req.Header.Set("X-Request-Id", tc.reqID)
			req.Header.Set("X-Custom", "kept")
			req.Header.Set("Connection", "X-Hop")
			req.Header.Set("X-Hop", "dropped")
			req.Header.Set("X-Forwarded-For", "6.6.6.6") // spoofed, must not survive
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var s seen
			if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 200 || resp.Header.Get("X-Worker") != "yes" {
				t.Fatalf("status %d, headers %v", resp.StatusCode, resp.Header)
			}
			checks := []struct{ what, got, want string }{
				{"method", s.Method, tc.method},
				{"raw path", s.RawPath, path},
				{"query", s.Query, "q=1&r=%2F"},
				{"body", s.Body, tc.body},
				{"host", s.Host, strings.TrimPrefix(srv.URL, "http://")},
				{"custom header", s.Header.Get("X-Custom"), "kept"},
				{"hop header", s.Header.Get("X-Hop"), ""},
				{"xff", s.Header.Get("X-Forwarded-For"), "127.0.0.1"},
				{"xf-host (Host is kept: none)", s.Header.Get("X-Forwarded-Host"), ""},
				{"xf-proto", s.Header.Get("X-Forwarded-Proto"), "http"},
				{"response id matches forwarded id", resp.Header.Get("X-Request-Id"), s.Header.Get("X-Request-Id")},
			}
			for _, ch := range checks {
				if ch.got != ch.want {
					t.Errorf("%s = %q, want %q", ch.what, ch.got, ch.want)
				}
			}
			id := resp.Header.Values("X-Request-Id")
			if len(id) != 1 || id[0] == "" {
				t.Fatalf("response X-Request-Id = %q, want exactly one", id)
			}
			if tc.wantReqID != "" && id[0] != tc.wantReqID {
				t.Errorf("request id = %q, want client's %q", id[0], tc.wantReqID)
			}
			if tc.wantReqID == "" && id[0] == tc.reqID {
				t.Errorf("insane client id %q was kept", tc.reqID)
			}
		})
	}
	if got := fr.calls.Load(); got != int64(len(tests)) {
		t.Errorf("router calls = %d, want %d", got, len(tests))
	}
	if s := p.Stats(); s.Requests != uint64(len(tests)) || s.RouteErrors != 0 {
		t.Errorf("stats = %+v", s)
	}
}

func TestHTTPTrustForwardedFor(t *testing.T) {
	route := echoWorker(t)
	_, srv := startProxy(t, Config{Router: &fakeRouter{route: route}, TrustForwardedFor: true})
	req, _ := http.NewRequest("GET", srv.URL+"/chat", nil)
	req.Header.Set("X-Forwarded-For", "1.2.3.4")
	resp, err := client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s seen
	json.NewDecoder(resp.Body).Decode(&s)
	if got := s.Header.Get("X-Forwarded-For"); got != "1.2.3.4, 127.0.0.1" {
		t.Fatalf("X-Forwarded-For = %q", got)
	}
}

// The second chunk is only written after the client has read the first, so
// the test deadlocks (and fails by timeout) unless the proxy streams: event
// streams, and any answer of unknown length (answers of known length are
// written as the server's buffer fills).
func TestHTTPStreaming(t *testing.T) {
	for _, ct := range []string{"text/event-stream", "text/plain"} {
		t.Run(ct, func(t *testing.T) {
			next := make(chan struct{})
			route := startWorker(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", ct)
				fmt.Fprint(w, "data: one\n\n")
				w.(http.Flusher).Flush()
				select {
				case <-next:
				case <-r.Context().Done():
					return
				}
				fmt.Fprint(w, "data: two\n\n")
			}))
			_, srv := startProxy(t, Config{Router: &fakeRouter{route: route}})
			resp, err := client(t).Get(srv.URL + "/chat/a/" + testInstance + "/events")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			line, err := br.ReadString('\n')
			if err != nil || line != "data: one\n" {
				t.Fatalf("first event %q, %v", line, err)
			}
			close(next)
			rest, _ := io.ReadAll(br)
			if string(rest) != "\ndata: two\n\n" {
				t.Fatalf("rest %q", rest)
			}
		})
	}
}

func TestErrorPages(t *testing.T) {
	refused := Route{WorkerID: "w-dead", Addr: refusedAddr(t)}
	resetter := resetWorker(t)
	tests := []struct {
		name        string
		path        string
		method      string
		accept      string
		route       Route
		err         error
		status      int
		contains    string
		retryAfter  bool
		hook        bool
		routerCalls int64
	}{
		{name: "unknown instance", path: "/chat/a/" + testInstance, err: fmt.Errorf("lookup: %w", ErrUnknownInstance),
			status: 404, contains: "This app instance does not exist (it may have been closed).", routerCalls: 1},
		{name: "unknown app", path: "/nope", err: ErrUnknownApp, status: 404, contains: "no application", routerCalls: 1},
		{name: "invalid id", path: "/chat/a/BAD_ID", status: 400, contains: "not a valid"},
		{name: "overlong path", path: "/chat/" + strings.Repeat("x", urlkind.MaxPathLen), status: 400},
		{name: "bad method", path: "/chat", method: "TRACE", status: 400},
		{name: "no workers", path: "/chat", err: ErrNoWorkers, status: 503, retryAfter: true, routerCalls: 1},
		{name: "master unavailable", path: "/chat", err: fmt.Errorf("rmi: %w", ErrMasterUnavailable),
			status: 503, contains: "master is unreachable, retry shortly", retryAfter: true, routerCalls: 1},
		{name: "worker gone", path: "/chat/a/" + testInstance, err: ErrWorkerGone, status: 502, routerCalls: 1},
		{name: "instance lost", path: "/chat/a/" + testInstance, err: ErrInstanceLost, status: 410,
			contains: `<a href="/chat">Start the application again</a>`, routerCalls: 1},
		{name: "empty route", path: "/chat/a/" + testInstance, route: Route{WorkerID: "w-x"}, status: 502, routerCalls: 1},
		{name: "unexpected router error", path: "/chat", err: errors.New("boom 10.1.2.3:99"), status: 502, routerCalls: 1},
		{name: "connection refused", path: "/chat/a/" + testInstance + "/x", route: refused, status: 502,
			contains: "The worker hosting this instance is not reachable", hook: true, routerCalls: 1},
		{name: "reset before response", path: "/chat/a/" + testInstance + "/x", route: resetter, status: 502, hook: true, routerCalls: 1},
		{name: "json error", path: "/chat/a/" + testInstance, accept: "application/json", err: ErrUnknownInstance,
			status: 404, contains: `"message":"This app instance does not exist (it may have been closed)."`, routerCalls: 1},
		{name: "text error", path: "/chat/a/" + testInstance, accept: "text/plain", err: ErrUnknownInstance,
			status: 404, contains: "App instance not found: This app", routerCalls: 1},
		{name: "reserved without fallback", path: "/admin", status: 404},
		{name: "home wrong method", path: "/", method: "DELETE", status: 405},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fr := &fakeRouter{route: tc.route, err: tc.err}
			var hr hookRecorder
			_, srv := startProxy(t, Config{Router: fr, OnWorkerUnreachable: hr.hook})
			method := tc.method
			if method == "" {
				method = "GET"
			}
			req, _ := http.NewRequest(method, srv.URL+tc.path, nil)
			if tc.accept != "" {
				req.Header.Set("Accept", tc.accept)
			}
			resp, err := client(t).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body := readAll(t, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status = %d, want %d; body %s", resp.StatusCode, tc.status, body)
			}
			if !strings.Contains(body, tc.contains) {
				t.Errorf("body lacks %q:\n%s", tc.contains, body)
			}
			id := resp.Header.Get("X-Request-Id")
			if id == "" || !strings.Contains(body, id) {
				t.Errorf("request id %q not in body", id)
			}
			for _, leak := range []string{"127.0.0.1", "10.1.2.3", "w-dead", "boom"} {
				if strings.Contains(body, leak) {
					t.Errorf("body leaks %q:\n%s", leak, body)
				}
			}
			if got := resp.Header.Get("Retry-After") != ""; got != tc.retryAfter {
				t.Errorf("Retry-After present = %v, want %v", got, tc.retryAfter)
			}
			hooked := hr.get()
			if tc.hook && (len(hooked) != 1 || hooked[0] != tc.route) {
				t.Errorf("hook calls = %v, want [%v]", hooked, tc.route)
			}
			if !tc.hook && len(hooked) != 0 {
				t.Errorf("unexpected hook calls %v", hooked)
			}
			if got := fr.calls.Load(); got != tc.routerCalls {
				t.Errorf("router calls = %d, want %d", got, tc.routerCalls)
			}
		})
	}
}

// resetWorker accepts connections and resets them without answering.
func resetWorker(t testing.TB) Route {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			// Read the request head so the reset hits an in-flight request.
			bufio.NewReader(c).ReadString('\n')
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return Route{WorkerID: "w-reset", Addr: ln.Addr().String()}
}

func TestWorkerTimeout(t *testing.T) {
	route := startWorker(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // never answers
	}))
	var hooked atomic.Bool
	_, srv := startProxy(t, Config{Router: &fakeRouter{route: route}, ResponseHeaderTimeout: 20 * time.Millisecond,
		OnWorkerUnreachable: func(Route) { hooked.Store(true) }})
	resp, err := client(t).Get(srv.URL + "/chat/a/" + testInstance)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusGatewayTimeout || hooked.Load() {
		t.Fatalf("status %d hooked %v, want 504 without hook", resp.StatusCode, hooked.Load())
	}
}

func TestHomePage(t *testing.T) {
	tests := []struct {
		name     string
		method   string
		apps     []AppLink
		err      error
		status   int
		contains []string
	}{
		{"lists apps", "GET", []AppLink{
			{Name: "Chat", MountPoint: "/chat", Description: "Talk <live>"},
			{Name: "", MountPoint: "docs"},
		}, nil, 200, []string{`<a href="/chat">Chat</a>`, "Talk &lt;live&gt;", `<a href="/docs">docs</a>`}},
		{"empty", "GET", nil, nil, 200, []string{"No applications"}},
		{"head", "HEAD", nil, nil, 200, nil},
		{"master down", "GET", nil, ErrMasterUnavailable, 503, []string{"retry shortly"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fr := &fakeRouter{apps: tc.apps, appsErr: tc.err}
			_, srv := startProxy(t, Config{Router: fr})
			req, _ := http.NewRequest(tc.method, srv.URL+"/", nil)
			resp, err := client(t).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body := readAll(t, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			for _, s := range tc.contains {
				if !strings.Contains(body, s) {
					t.Errorf("body lacks %q:\n%s", s, body)
				}
			}
			if tc.method == "HEAD" && body != "" {
				t.Error("HEAD returned a body")
			}
			if fr.calls.Load() != 0 {
				t.Error("home page must not call Route")
			}
		})
	}
}

func TestReservedFallback(t *testing.T) {
	fb := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "admin:%s:%s", r.URL.Path, r.Header.Get("X-Request-Id"))
	})
	fr := &fakeRouter{}
	_, srv := startProxy(t, Config{Router: fr, Fallback: fb})
	resp, err := client(t).Get(srv.URL + "/admin/workers")
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(t, resp.Body)
	resp.Body.Close()
	if want := "admin:/admin/workers:" + resp.Header.Get("X-Request-Id"); body != want {
		t.Fatalf("body %q, want %q", body, want)
	}
	if fr.calls.Load() != 0 {
		t.Fatal("reserved paths must not be routed")
	}
}

// Non-WebSocket upgrades are forwarded as plain requests without Upgrade.
func TestNonWebSocketUpgradeStripped(t *testing.T) {
	route := echoWorker(t)
	_, srv := startProxy(t, Config{Router: &fakeRouter{route: route}})
	req, _ := http.NewRequest("GET", srv.URL+"/chat/a/"+testInstance, nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "h2c")
	resp, err := client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s seen
	json.NewDecoder(resp.Body).Decode(&s)
	if resp.StatusCode != 200 || s.Header.Get("Upgrade") != "" {
		t.Fatalf("status %d, worker saw Upgrade %q", resp.StatusCode, s.Header.Get("Upgrade"))
	}
}

// A client whose upload breaks must not be blamed on the worker.
func TestClientBodyErrorIsNotWorkerFailure(t *testing.T) {
	route := echoWorker(t)
	var hooked atomic.Bool
	_, srv := startProxy(t, Config{Router: &fakeRouter{route: route}, OnWorkerUnreachable: func(Route) { hooked.Store(true) }})
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	// Promise 100 bytes, send 5, then half-close: the body read fails.
	fmt.Fprintf(conn, "POST /chat/a/%s/up HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nhello", testInstance)
	conn.(*net.TCPConn).CloseWrite()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	conn.Close()
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusBadGateway {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if hooked.Load() {
		t.Fatal("client body error reported as worker failure")
	}
}

func TestRequestIDGeneratedUnique(t *testing.T) {
	_, srv := startProxy(t, Config{Router: &fakeRouter{err: ErrUnknownApp}})
	c := client(t)
	ids := map[string]bool{}
	for i := 0; i < 20; i++ {
		resp, err := c.Get(srv.URL + "/x")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		ids[resp.Header.Get("X-Request-Id")] = true
	}
	if len(ids) != 20 {
		t.Fatalf("got %d distinct ids, want 20", len(ids))
	}
}

func TestNewRequiresRouter(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("New without Router should panic")
		}
	}()
	New(Config{})
}

// TestStartingPage: while the cluster comes up, an Application URL gets a
// self-reloading "starting" page, not "no workers".
func TestStartingPage(t *testing.T) {
	r := &fakeRouter{}
	r.set(Route{}, fmt.Errorf("%w: no worker yet", ErrStarting))
	p := New(Config{Router: r})
	w := httptest.NewRecorder()
	p.ServeHTTP(w, httptest.NewRequest("GET", "/hello", nil))
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Refresh") == "" || !strings.Contains(w.Body.String(), "starting") {
		t.Fatalf("%d Refresh=%q %s", w.Code, w.Header().Get("Refresh"), w.Body.String())
	}
}
