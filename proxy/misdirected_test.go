package proxy

import (
	"net/http"
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
