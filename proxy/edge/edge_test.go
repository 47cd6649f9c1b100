//go:build linux

package edge

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/urlkind"
)

// The tests here run an edge on its own, in front of a net/http server
// that answers 404, with a host that routes everything to one worker.
// What needs the proxy's pages and routing is tested in package proxy.

func TestMain(m *testing.M) { testutil.Main(m) }

const edgePath = "/app/a/w-test1.abcdefghijkl/b/bqwertyuiop1"

// testHost routes every request to one worker, from memory, and renders
// its pages as bare status codes.
type testHost struct{ to Route }

func (h *testHost) RouteNow(urlkind.Target) (Route, bool, error) { return h.to, true, nil }
func (h *testHost) Route(context.Context, urlkind.Target) (Route, error) {
	return h.to, nil
}
func (h *testHost) CanHandOff(Route) bool           { return false }
func (h *testHost) HandoffFailed(string)            {}
func (h *testHost) Misdirected(urlkind.Target, int) {}
func (h *testHost) ServeHome(w http.ResponseWriter, _ *http.Request, _ string) {
	io.WriteString(w, "home")
}
func (h *testHost) RouteError(w http.ResponseWriter, _ *http.Request, _ string, _ urlkind.Target, _ Route, _ error) {
	w.WriteHeader(http.StatusBadGateway)
}
func (h *testHost) NoHopKey(w http.ResponseWriter, _ *http.Request, _ string) {
	w.WriteHeader(http.StatusServiceUnavailable)
}
func (h *testHost) UpstreamFailed(w http.ResponseWriter, _ *http.Request, _ string, _ urlkind.Target, _ Route, _ error) {
	w.WriteHeader(http.StatusBadGateway)
}

// startWorker runs h on a loopback server and returns a Route to it.
func startWorker(t testing.TB, h http.Handler) Route {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return Route{WorkerID: "w-test1", Addr: srv.Listener.Addr().String()}
}

// startEdge serves an edge on loopback that relays to route; it returns
// the edge's address.
func startEdge(t testing.TB, route Route) (*Edge, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host := &testHost{to: route}
	var requests, upErrs, pairs atomic.Uint64
	e, hl := Start(ln, Config{Host: host, Instant: host, IDs: NewRequestIDs("t-"), Stats: &Stats{},
		Requests: &requests, UpstreamErrors: &upErrs, WorkerPairs: &pairs, Log: testutil.Logger(t),
		DialTimeout: 5 * time.Second})
	if e == nil {
		t.Fatal("the edge did not start")
	}
	srv := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(hl) }()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
		e.Kill()
		<-e.Done()
	})
	return e, ln.Addr().String()
}

// rawExchange sends raw on a new connection and reads one answer.
func rawExchange(t *testing.T, addr, raw string) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(testutil.Scale(10 * time.Second)))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// TestEdgeSlowClient: a client that reads slowly gets the whole answer;
// the worker's side waits for it (the edge does not buffer it all).
func TestEdgeSlowClient(t *testing.T) {
	const size = 8 << 20
	route := startWorker(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(strings.Repeat("y", size)))
	}))
	_, addr := startEdge(t, route)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*net.TCPConn).SetReadBuffer(64 << 10)
	io.WriteString(c, "GET "+edgePath+" HTTP/1.1\r\nHost: h\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	total := 0
	for total < size {
		n, err := resp.Body.Read(buf)
		total += n
		if err != nil {
			break
		}
		if total < 1<<20 {
			time.Sleep(time.Millisecond) // reads slowly at first
		}
	}
	if total != size {
		t.Errorf("read %d of %d bytes", total, size)
	}
}

// TestEdgeTimeouts: a client that never finishes its head, and one that
// stays idle, are closed.
func TestEdgeTimeouts(t *testing.T) {
	head, idle := edgeHeadTimeout, edgeIdleTimeout
	edgeHeadTimeout, edgeIdleTimeout = 200*time.Millisecond, 200*time.Millisecond
	t.Cleanup(func() { edgeHeadTimeout, edgeIdleTimeout = head, idle })
	route := startWorker(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	_, addr := startEdge(t, route)
	for _, tc := range []struct{ name, raw string }{
		{"partial head", "GET " + edgePath + " HTTP/1.1\r\nHost: h\r\n"},
		{"idle after an answer", "GET " + edgePath + " HTTP/1.1\r\nHost: h\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, tc.raw)
			_ = c.SetReadDeadline(time.Now().Add(testutil.Scale(10 * time.Second)))
			rest, err := io.ReadAll(c) // ends when the edge closes
			if err != nil {
				t.Fatalf("not closed: %v (read %q)", err, rest)
			}
		})
	}
}

// TestEdgeLoopParksWhenIdle: an idle event loop waits in the runtime's
// poller ("IO wait"), not in a system call on a thread of its own, which
// would keep a P and the runtime's monitor polling; and it still serves
// the next request.
func TestEdgeLoopParksWhenIdle(t *testing.T) {
	route := startWorker(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	e, addr := startEdge(t, route)
	get := func() {
		t.Helper()
		resp, got := rawExchange(t, addr, "GET "+edgePath+" HTTP/1.1\r\nHost: h\r\n\r\n")
		if resp.StatusCode != http.StatusOK || got != "ok" {
			t.Fatalf("answer %d %q, want 200 ok", resp.StatusCode, got)
		}
	}
	get()
	testutil.Eventually(t, testutil.Scale(10*time.Second), func() error {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		loops, parked := 0, 0
		for _, g := range strings.Split(string(buf), "\n\n") {
			if !strings.Contains(g, "edge.(*loop).run(") {
				continue
			}
			loops++
			head, _, _ := strings.Cut(g, "\n")
			if strings.Contains(head, "[IO wait") && !strings.Contains(head, "locked to thread") {
				parked++
			}
		}
		if loops == 0 || parked != loops {
			return fmt.Errorf("%d of %d event loops parked in the runtime's poller", parked, loops)
		}
		return nil
	})
	get()
	if served := e.cfg.Stats.Requests(); served < 2 {
		t.Fatalf("edge served %d requests, want 2", served)
	}
}
