package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestMisdirectedDropsRoute: a worker that answers 421 (it does not host
// the instance: the cached route predates a move) makes the proxy forget
// the route, so the next request asks the master and reaches the new
// worker, for plain requests and WebSocket handshakes alike.
func TestMisdirectedDropsRoute(t *testing.T) {
	for _, tc := range []struct {
		name string
		ws   bool
	}{{"page", false}, {"websocket", true}} {
		t.Run(tc.name, func(t *testing.T) {
			old := startWorker(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusMisdirectedRequest)
			}))
			moved := startWorker(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Worker", "new")
			}))
			moved.WorkerID = "w-test2"
			up := &fakeRouter{route: old}
			p, srv := startProxy(t, Config{Router: NewCachingRouter(up, time.Hour)})
			get := func() *http.Response {
				req, _ := http.NewRequest(http.MethodGet, srv.URL+"/app/a/"+testInstance+"/b/"+testBrowser, nil)
				if tc.ws {
					req.URL.Path += "/ws"
					req.Header.Set("Connection", "Upgrade")
					req.Header.Set("Upgrade", "websocket")
					req.Header.Set("Sec-WebSocket-Version", "13")
					req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
				}
				resp, err := client(t).Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				return resp
			}
			if resp := get(); resp.StatusCode != http.StatusMisdirectedRequest {
				t.Fatalf("first answer %d, want the old worker's 421", resp.StatusCode)
			}
			up.set(moved, nil) // the master knows the move
			if resp := get(); resp.StatusCode != http.StatusOK || resp.Header.Get("X-Worker") != "new" {
				t.Fatalf("after a 421: %d from %q, want 200 from the new worker", resp.StatusCode, resp.Header.Get("X-Worker"))
			}
			if n := up.calls.Load(); n != 2 {
				t.Fatalf("master asked %d times, want 2 (the 421 dropped the cached route)", n)
			}
			if got := p.Stats().Misdirected; got != 1 {
				t.Fatalf("misdirected counter %d, want 1", got)
			}
		})
	}
}

// TestDeadWorkerEndsRequests: requests waiting on a worker the master
// then declares dead (a stall: it never answers) end at once with the
// moving page, which reloads itself, on the edge (GET) and on the net/http
// path (POST) alike, instead of hanging until the worker wakes up.
func TestDeadWorkerEndsRequests(t *testing.T) {
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		t.Run(method, func(t *testing.T) {
			stalled := make(chan struct{})
			arrived := make(chan struct{}, 1)
			route := startWorker(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				arrived <- struct{}{}
				select {
				case <-stalled:
				case <-r.Context().Done():
				}
			}))
			defer close(stalled)
			p, srv := startProxy(t, Config{Router: &fakeRouter{route: route}})
			type answer struct {
				resp *http.Response
				err  error
			}
			got := make(chan answer, 1)
			go func() {
				var body io.Reader
				if method == http.MethodPost {
					body = strings.NewReader("x")
				}
				req, _ := http.NewRequest(method, srv.URL+"/app/a/"+testInstance+"/b/"+testBrowser, body)
				resp, err := client(t).Do(req)
				if err == nil {
					resp.Body.Close()
				}
				got <- answer{resp, err}
			}()
			select {
			case <-arrived:
			case a := <-got:
				t.Fatalf("answered before the worker saw the request: %+v", a)
			}
			p.CloseWorker(testWorker)
			a := <-got
			if a.err != nil {
				t.Fatal(a.err)
			}
			if a.resp.StatusCode != http.StatusServiceUnavailable || a.resp.Header.Get("Refresh") != "1" {
				t.Fatalf("answer %d (Refresh %q), want 503 with Refresh 1", a.resp.StatusCode, a.resp.Header.Get("Refresh"))
			}
		})
	}
}
