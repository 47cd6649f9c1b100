package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// rawWorker serves each connection with handle, speaking HTTP by hand so a
// test can answer in ways net/http never would.
func rawWorker(t *testing.T, handle func(c net.Conn, br *bufio.Reader)) Route {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handle(c, bufio.NewReader(c))
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return Route{WorkerID: testWorker, Addr: ln.Addr().String()}
}

// TestWorkerAnswers: what a client sees for answers a worker should not
// give, or gives rarely.
func TestWorkerAnswers(t *testing.T) {
	tests := []struct {
		name       string
		answer     string
		wantStatus int
		wantBody   string
		wantErr    bool // the client must see a broken answer, not a complete one
	}{
		{name: "early hints skipped", answer: "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n" +
			"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", wantStatus: 200, wantBody: "ok"},
		{name: "switching protocols unasked", answer: "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n", wantStatus: 502},
		{name: "garbage", answer: "SSH-2.0-OpenSSH\r\n\r\n", wantStatus: 502},
		{name: "length cut off", answer: "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b", wantStatus: 200, wantErr: true},
		{name: "chunks cut off", answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", wantStatus: 200, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			route := rawWorker(t, func(c net.Conn, br *bufio.Reader) {
				if _, err := http.ReadRequest(br); err == nil {
					io.WriteString(c, tc.answer)
				}
			})
			_, srv := startProxy(t, Config{Router: &fakeRouter{route: route}})
			resp, err := client(t).Get(srv.URL + "/chat/a/" + testInstance + "/x")
			if err != nil && tc.wantErr {
				return // cut off before the head was flushed: as broken as it gets
			}
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.wantStatus || (err != nil) != tc.wantErr {
				t.Fatalf("status %d, body %q, read error %v; want %d, error %v", resp.StatusCode, body, err, tc.wantStatus, tc.wantErr)
			}
			if tc.wantBody != "" && string(body) != tc.wantBody {
				t.Fatalf("body %q, want %q", body, tc.wantBody)
			}
		})
	}
}

// TestPooledConnectionClosed: the worker closed the pooled connection since
// its last answer (it restarted). Requests that may run twice are sent
// again on a new connection; the others are never sent on a closed one;
// either way the worker sees each request once.
func TestPooledConnectionClosed(t *testing.T) {
	tests := []struct {
		method, body string
		chunked      bool
	}{
		{method: "GET"},
		{method: "HEAD"},
		{method: "POST"},
		{method: "POST", body: "a=1"},
		{method: "PUT", body: strings.Repeat("x", 10000), chunked: true},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s %d chunked=%v", tc.method, len(tc.body), tc.chunked), func(t *testing.T) {
			var seen atomic.Int64
			closed := make(chan struct{}, 4)
			// One answer per connection, announced as keep-alive, then close.
			route := rawWorker(t, func(c net.Conn, br *bufio.Reader) {
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				b, _ := io.ReadAll(req.Body)
				seen.Add(1)
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(b), b)
				c.Close()
				closed <- struct{}{}
			})
			_, srv := startProxy(t, Config{Router: &fakeRouter{route: route}})
			c := client(t)
			for i := range 2 {
				var body io.Reader = strings.NewReader(tc.body)
				if tc.chunked {
					body = io.MultiReader(body) // unknown length: sent chunked
				}
				if tc.body == "" {
					body = nil
				}
				req, _ := http.NewRequest(tc.method, srv.URL+"/chat/a/"+testInstance+"/x", body)
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				got, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				want := tc.body
				if tc.method == "HEAD" {
					want = ""
				}
				if resp.StatusCode != 200 || string(got) != want {
					t.Fatalf("request %d: status %d, body of %d bytes, want 200 with %d", i, resp.StatusCode, len(got), len(want))
				}
				<-closed
			}
			if n := seen.Load(); n != 2 {
				t.Fatalf("worker saw %d requests, want 2", n)
			}
		})
	}
}

// A worker that read a request and died before answering: a GET may be
// sent again, a POST must not (it may have run).
func TestNoReplayOfUnsafeRequests(t *testing.T) {
	for _, method := range []string{"GET", "POST"} {
		t.Run(method, func(t *testing.T) {
			var seen atomic.Int64
			route := rawWorker(t, func(c net.Conn, br *bufio.Reader) {
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					if seen.Add(1) == 2 {
						return // dies with the request unanswered
					}
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			})
			_, srv := startProxy(t, Config{Router: &fakeRouter{route: route}})
			c := client(t)
			var status []int
			for range 2 {
				req, _ := http.NewRequest(method, srv.URL+"/chat/a/"+testInstance+"/x", nil)
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				// Read to the end, so the client keeps its connection: the
				// edge's worker connections are pooled per event loop.
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				status = append(status, resp.StatusCode)
			}
			want, wantSeen := []int{200, 200}, int64(3) // the GET ran again on a new connection
			if method == "POST" {
				want, wantSeen = []int{200, 502}, 2
			}
			if fmt.Sprint(status) != fmt.Sprint(want) || seen.Load() != wantSeen {
				t.Fatalf("statuses %v, worker saw %d; want %v and %d", status, seen.Load(), want, wantSeen)
			}
		})
	}
}

func TestTrailersRelayed(t *testing.T) {
	route := startWorker(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Checksum")
		io.WriteString(w, "data")
		w.Header().Set("X-Checksum", "abc")
	}))
	_, srv := startProxy(t, Config{Router: &fakeRouter{route: route}})
	resp, err := client(t).Get(srv.URL + "/chat/a/" + testInstance + "/x")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if body := readAll(t, resp.Body); body != "data" || resp.Trailer.Get("X-Checksum") != "abc" {
		t.Fatalf("body %q, trailer %v", body, resp.Trailer)
	}
}

// A worker may refuse an upload before reading it; the client gets the
// refusal, and the proxy's sender ends (goleak checks at exit).
func TestEarlyAnswerDuringUpload(t *testing.T) {
	route := startWorker(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "too large", http.StatusRequestEntityTooLarge)
	}))
	_, srv := startProxy(t, Config{Router: &fakeRouter{route: route}})
	big := bytes.Repeat([]byte("x"), 8<<20)
	resp, err := client(t).Post(srv.URL+"/chat/a/"+testInstance+"/up", "application/octet-stream", bytes.NewReader(big))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d", resp.StatusCode)
	}
}
