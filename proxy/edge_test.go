//go:build linux

package proxy

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/hop"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/urlkind"
)

const edgePath = "/app/a/" + testInstance + "/b/" + testBrowser

// The edge's hand-off reasons, as cloudbrowser_proxy_edge_handoffs_total
// labels them (spelled out: they are what dashboards read), and its limit
// on a request head.
const (
	hoSyntax    = "syntax"
	hoMethod    = "method"
	hoFraming   = "framing"
	hoLarge     = "large"
	hoTarget    = "target"
	maxEdgeHead = 8 << 10
)

// rawExchange sends raw on a new connection and reads n answers.
func rawExchange(t *testing.T, addr, raw string, n int, head bool) []*http.Response {
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
	br := bufio.NewReader(c)
	var out []*http.Response
	for i := 0; i < n; i++ {
		method := http.MethodGet
		if head {
			method = http.MethodHead
		}
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("answer %d body: %v", i, err)
		}
		resp.Body = io.NopCloser(strings.NewReader(string(body)))
		out = append(out, resp)
	}
	return out
}

func body(t *testing.T, r *http.Response) string { t.Helper(); return readAll(t, r.Body) }

// edgeCounts is what the edge served and handed over.
func edgeCounts(p *Proxy) (served uint64, handed map[string]uint64) {
	handed = map[string]uint64{}
	for k, v := range p.EdgeHandoffs() {
		if v > 0 {
			handed[k] = v
		}
	}
	return p.edgeStats.Requests(), handed
}

// TestEdgeRelays: requests the edge serves itself, answered as the worker
// answered, with the proxy's headers, and never handed to net/http.
func TestEdgeRelays(t *testing.T) {
	key := make([]byte, hop.KeyLen)
	_, _ = rand.Read(key)
	var hopErrs atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if err := hop.Verify(key, time.Now(), r.Header.Get(hop.Header), hop.FieldsOf(r)); err != nil {
			hopErrs.Add(1)
		}
		w.Header().Set("X-Seen", r.Method+" "+r.RequestURI+" xff="+r.Header.Get("X-Forwarded-For")+
			" xfh="+r.Header.Get("X-Forwarded-Host")+" id="+r.Header.Get("X-Request-Id")+
			" conn="+r.Header.Get("Connection")+" keep="+r.Header.Get("Keep-Alive")+" cookie="+r.Header.Get("Cookie"))
		w.Header().Set("Connection", "X-Private")
		w.Header().Set("X-Private", "hop-by-hop")
		w.Header().Set("X-Request-Id", "worker-id")
		switch r.URL.Query().Get("a") {
		case "chunked":
			w.Write([]byte("first "))
			w.(http.Flusher).Flush()
			w.Write([]byte("second"))
		case "204":
			w.WriteHeader(http.StatusNoContent)
		case "304":
			w.WriteHeader(http.StatusNotModified)
		case "hints":
			w.Header().Set("Link", "</x.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.Write([]byte("after hints"))
		case "big":
			w.Write([]byte(strings.Repeat("x", 3<<20)))
		default:
			w.Write([]byte("hello " + r.URL.RawQuery))
		}
	})
	route := startWorker(t, mux)
	p, srv := startProxy(t, Config{Router: StaticRouter{To: route}, HopKey: func() []byte { return key }})

	get := func(q, extra string) string {
		return "GET " + edgePath + q + " HTTP/1.1\r\nHost: cb.test\r\n" + extra + "\r\n"
	}
	tests := []struct {
		name   string
		raw    string
		n      int
		head   bool
		status []int
		body   []string
		check  func(t *testing.T, rs []*http.Response)
	}{
		{name: "GET", raw: get("?q=%20a", "Cookie: s=1\r\nX-Forwarded-For: 6.6.6.6\r\nX-Request-Id: client-1\r\nKeep-Alive: 5\r\n"), n: 1,
			status: []int{200}, body: []string{"hello q=%20a"},
			check: func(t *testing.T, rs []*http.Response) {
				want := "GET " + edgePath + "?q=%20a xff=127.0.0.1 xfh= id=client-1 conn= keep= cookie=s=1"
				if got := rs[0].Header.Get("X-Seen"); got != want {
					t.Errorf("worker saw %q, want %q", got, want)
				}
				if got := rs[0].Header.Get("X-Request-Id"); got != "client-1" {
					t.Errorf("X-Request-Id %q", got)
				}
				if rs[0].Header.Get("X-Private") != "" || rs[0].Header.Get("Connection") != "" {
					t.Errorf("hop-by-hop headers relayed: %v", rs[0].Header)
				}
				if !strings.HasPrefix(rs[0].Header.Get("Server-Timing"), "route;dur=") {
					t.Errorf("Server-Timing %q", rs[0].Header.Get("Server-Timing"))
				}
			}},
		{name: "HEAD", raw: "HEAD " + edgePath + " HTTP/1.1\r\nHost: cb.test\r\n\r\n", n: 1, head: true,
			status: []int{200}, body: []string{""},
			check: func(t *testing.T, rs []*http.Response) {
				if rs[0].ContentLength != int64(len("hello ")) {
					t.Errorf("HEAD Content-Length %d", rs[0].ContentLength)
				}
			}},
		{name: "pipelined", raw: get("?n=1", "") + get("?n=2", "") + get("?n=3", "Connection: close\r\n"), n: 3,
			status: []int{200, 200, 200}, body: []string{"hello n=1", "hello n=2", "hello n=3"},
			check: func(t *testing.T, rs []*http.Response) {
				if !rs[2].Close {
					t.Error("the answer to Connection: close does not close")
				}
			}},
		{name: "chunked", raw: get("?a=chunked", ""), n: 1, status: []int{200}, body: []string{"first second"},
			check: func(t *testing.T, rs []*http.Response) {
				if len(rs[0].TransferEncoding) != 1 || rs[0].TransferEncoding[0] != "chunked" {
					t.Errorf("TransferEncoding %v", rs[0].TransferEncoding)
				}
			}},
		{name: "no content", raw: get("?a=204", "") + get("?a=304", ""), n: 2, status: []int{204, 304}, body: []string{"", ""}},
		{name: "early hints skipped", raw: get("?a=hints", ""), n: 1, status: []int{200}, body: []string{"after hints"}},
		{name: "home page", raw: "GET / HTTP/1.1\r\nHost: h\r\n\r\n", n: 1, status: []int{200}, body: []string{"*No applications are published yet."}},
		{name: "large answer", raw: get("?a=big", ""), n: 1, status: []int{200}, body: []string{strings.Repeat("x", 3<<20)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			served0, _ := edgeCounts(p)
			rs := rawExchange(t, srv.Addr, tt.raw, tt.n, tt.head)
			for i, r := range rs {
				if r.StatusCode != tt.status[i] {
					t.Errorf("answer %d: status %d, want %d", i, r.StatusCode, tt.status[i])
				}
				if b, want := body(t, r), tt.body[i]; b != want && !(strings.HasPrefix(want, "*") && strings.Contains(b, want[1:])) {
					t.Errorf("answer %d: body %.60q (%d bytes), want %.60q", i, b, len(b), tt.body[i])
				}
			}
			if tt.check != nil {
				tt.check(t, rs)
			}
			served, handed := edgeCounts(p)
			if served-served0 != uint64(tt.n) || len(handed) > 0 {
				t.Errorf("edge served %d of %d, handed over %v", served-served0, tt.n, handed)
			}
		})
	}
	if n := hopErrs.Load(); n > 0 {
		t.Errorf("%d relayed requests failed the worker's hop check", n)
	}
}

// TestEdgeHandsOver: whatever is outside the edge's strict subset reaches
// net/http with every byte, and gets the answer it always got.
func TestEdgeHandsOver(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %q", r.Method, r.URL.EscapedPath(), b)
	})
	route := startWorker(t, mux)
	p, srv := startProxy(t, Config{Router: StaticRouter{To: route}})

	tests := []struct {
		name, raw string
		status    int
		body      string // "" = not checked
		reason    string
	}{
		{"POST with a body", "POST " + edgePath + " HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello", 200, `POST ` + edgePath + ` "hello"`, hoMethod},
		{"GET with a body", "GET " + edgePath + " HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nhi", 200, `GET ` + edgePath + ` "hi"`, hoFraming},
		{"smuggling: both framings", "GET " + edgePath + " HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 200, `GET ` + edgePath + ` ""`, hoFraming},
		{"space before colon", "GET " + edgePath + " HTTP/1.1\r\nHost: h\r\nX-A : b\r\n\r\n", 400, "", hoSyntax},
		{"obs-fold", "GET " + edgePath + " HTTP/1.1\r\nHost: h\r\nX-A: b\r\n c\r\n\r\n", 200, "", hoSyntax},
		{"bare LF", "GET " + edgePath + " HTTP/1.1\nHost: h\n\n", 200, "", hoSyntax},
		{"two Hosts", "GET " + edgePath + " HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "", hoSyntax},
		{"no Host", "GET " + edgePath + " HTTP/1.1\r\n\r\n", 400, "", hoSyntax},
		{"HTTP/1.0", "GET " + edgePath + " HTTP/1.0\r\n\r\n", 200, `GET ` + edgePath + ` ""`, hoSyntax},
		{"escaped path", "GET " + edgePath + "/x%2Fy HTTP/1.1\r\nHost: h\r\n\r\n", 200, `GET ` + edgePath + `/x%2Fy ""`, hoSyntax},
		{"expect", "GET " + edgePath + " HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\n\r\n", 200, "", hoFraming},
		{"connection names a header", "GET " + edgePath + " HTTP/1.1\r\nHost: h\r\nConnection: X-A\r\n\r\n", 200, "", hoFraming},
		{"dot segment", "GET /app/a/../x HTTP/1.1\r\nHost: h\r\n\r\n", 400, "", hoTarget},
		{"huge head", "GET " + edgePath + " HTTP/1.1\r\nHost: h\r\nX-Big: " + strings.Repeat("b", maxEdgeHead) + "\r\n\r\n", 200, "", hoLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, before := edgeCounts(p)
			rs := rawExchange(t, srv.Addr, tt.raw, 1, false)
			if rs[0].StatusCode != tt.status {
				t.Errorf("status %d, want %d", rs[0].StatusCode, tt.status)
			}
			if b := body(t, rs[0]); tt.body != "" && b != tt.body {
				t.Errorf("body %q, want %q", b, tt.body)
			}
			if _, after := edgeCounts(p); after[tt.reason] != before[tt.reason]+1 {
				t.Errorf("hand-offs %v → %v, want one more %q", before, after, tt.reason)
			}
		})
	}
}

// TestEdgeThenHandOver: a keep-alive connection the edge served goes to
// net/http at its first request the edge does not take, and goes on there.
func TestEdgeThenHandOver(t *testing.T) {
	route := startWorker(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s", r.Method, b)
	}))
	p, srv := startProxy(t, Config{Router: StaticRouter{To: route}})
	get := "GET " + edgePath + " HTTP/1.1\r\nHost: h\r\n\r\n"
	post := "POST " + edgePath + " HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc"
	rs := rawExchange(t, srv.Addr, get+post+get, 3, false)
	for i, want := range []string{"GET ", "POST abc", "GET "} {
		if b := body(t, rs[i]); b != want {
			t.Errorf("answer %d: %q, want %q", i, b, want)
		}
	}
	if served, handed := edgeCounts(p); served != 1 || handed[hoMethod] != 1 {
		t.Errorf("edge served %d, handed over %v; want 1 and one for the POST", served, handed)
	}
}

// TestEdgeWorkerFailures: a worker that cannot be reached gets net/http's
// page (and the unreachable hook); one whose pooled connection died is
// asked again; one that cuts its answer off cuts the client off.
func TestEdgeWorkerFailures(t *testing.T) {
	t.Run("unreachable", func(t *testing.T) {
		var hook hookRecorder
		dead := Route{WorkerID: testWorker, Addr: refusedAddr(t)}
		p, srv := startProxy(t, Config{Router: StaticRouter{To: dead}, OnWorkerUnreachable: hook.hook})
		rs := rawExchange(t, srv.Addr, "GET "+edgePath+" HTTP/1.1\r\nHost: h\r\n\r\n", 1, false)
		if rs[0].StatusCode != http.StatusBadGateway && rs[0].StatusCode != http.StatusServiceUnavailable {
			t.Errorf("status %d, want the unreachable-worker page", rs[0].StatusCode)
		}
		if len(hook.get()) != 1 {
			t.Errorf("unreachable hook called %d times", len(hook.get()))
		}
		if served, handed := edgeCounts(p); served != 1 || len(handed) > 0 {
			t.Errorf("edge served %d, handed over %v", served, handed)
		}
	})
	t.Run("stale pooled connection", func(t *testing.T) {
		var conns atomic.Int64
		route := rawWorker(t, func(c net.Conn, br *bufio.Reader) {
			conns.Add(1)
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			// Answers keep-alive, then closes: the pooled connection is dead.
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		})
		p, srv := startProxy(t, Config{Router: StaticRouter{To: route}})
		for i := 0; i < 3; i++ {
			rs := rawExchange(t, srv.Addr, "GET "+edgePath+" HTTP/1.1\r\nHost: h\r\n\r\n", 1, false)
			if rs[0].StatusCode != 200 || body(t, rs[0]) != "ok" {
				t.Fatalf("request %d: %d", i, rs[0].StatusCode)
			}
		}
		if served, handed := edgeCounts(p); served != 3 || len(handed) > 0 {
			t.Errorf("edge served %d, handed over %v", served, handed)
		}
	})
	for _, tc := range []struct {
		name, answer string
		want         string // "page": a 5xx page; "broken": a body that breaks off; "either"
	}{
		{"answer cut off", "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this", "broken"},
		{"both framings", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc", "page"},
		// A page if the bad chunk came with the head, else the head is out
		// and the body breaks off.
		{"bad first chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "either"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			route := rawWorker(t, func(c net.Conn, br *bufio.Reader) {
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				io.WriteString(c, tc.answer)
			})
			_, srv := startProxy(t, Config{Router: StaticRouter{To: route}})
			c, err := net.Dial("tcp", srv.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, "GET "+edgePath+" HTTP/1.1\r\nHost: h\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			page, broken := resp.StatusCode >= 500 && err == nil, resp.StatusCode == 200 && err != nil
			if !(tc.want == "page" && page || tc.want == "broken" && broken || tc.want == "either" && (page || broken)) {
				t.Errorf("status %d, body %q, read error %v; want %s", resp.StatusCode, b, err, tc.want)
			}
		})
	}
}

// TestEdgeShutdown: an answer in flight completes; idle clients are closed;
// nothing is accepted after.
func TestEdgeShutdown(t *testing.T) {
	release := make(chan struct{})
	route := startWorker(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("slow") != "" {
			<-release
		}
		io.WriteString(w, "done")
	}))
	p, srv := startProxy(t, Config{Router: StaticRouter{To: route}})
	idle, err := net.Dial("tcp", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	busy, err := net.Dial("tcp", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	io.WriteString(busy, "GET "+edgePath+"?slow=1 HTTP/1.1\r\nHost: h\r\n\r\n")
	testutil.Eventually(t, 5*time.Second, func() error {
		if p.edgeStats.Requests() == 0 {
			return fmt.Errorf("request not relayed yet")
		}
		return nil
	})
	shut := make(chan error, 1)
	go func() {
		_ = srv.srv.Shutdown(context.Background())
		shut <- p.Shutdown(context.Background())
	}()
	// The idle connection is closed by the drain.
	_ = idle.SetReadDeadline(time.Now().Add(testutil.Scale(5 * time.Second)))
	if n, err := idle.Read(make([]byte, 1)); err == nil || n > 0 {
		t.Errorf("idle client not closed: %d, %v", n, err)
	}
	close(release)
	resp, err := http.ReadResponse(bufio.NewReader(busy), nil)
	if err != nil {
		t.Fatalf("the answer in flight was lost: %v", err)
	}
	if b := body(t, resp); b != "done" || !resp.Close {
		t.Errorf("answer %q (close %v), want done and a closing connection", b, resp.Close)
	}
	if err := <-shut; err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if c, err := net.Dial("tcp", srv.Addr); err == nil {
		c.Close()
		t.Error("a connection was accepted after shutdown")
	}
}

// TestEdgeMatchesNetHTTP: the same requests through the edge and through
// net/http alone get the same answers, header for header (but Date).
func TestEdgeMatchesNetHTTP(t *testing.T) {
	route := startWorker(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Add("Set-Cookie", "a=1")
		w.Header().Add("Set-Cookie", "b=2")
		w.Header().Add("Server-Timing", "place;dur=1")
		if r.URL.Query().Get("a") == "stream" {
			w.Write([]byte("part"))
			w.(http.Flusher).Flush()
		}
		fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.RawQuery, r.Header.Get("Accept"))
	}))
	answers := map[bool][]*http.Response{}
	for _, edge := range []bool{true, false} {
		p, srv := startProxy(t, Config{Router: StaticRouter{To: route}, DisableEdge: !edge})
		for _, q := range []string{"", "?a=stream"} {
			for _, m := range []string{"GET", "HEAD"} {
				raw := m + " " + edgePath + q + " HTTP/1.1\r\nHost: h\r\nAccept: text/html\r\nX-Request-Id: same\r\n\r\n"
				answers[edge] = append(answers[edge], rawExchange(t, srv.Addr, raw, 1, m == "HEAD")...)
			}
		}
		if served, _ := edgeCounts(p); (served > 0) != edge {
			t.Fatalf("edge %v served %d", edge, served)
		}
	}
	for i, a := range answers[true] {
		b := answers[false][i]
		a.Header.Del("Date")
		b.Header.Del("Date")
		a.Header.Del("Server-Timing") // the route's time differs; checked below
		st := b.Header.Values("Server-Timing")
		b.Header.Del("Server-Timing")
		if fmt.Sprint(a.Header) != fmt.Sprint(b.Header) {
			t.Errorf("answer %d headers:\n edge    %v\n net/http %v", i, a.Header, b.Header)
		}
		if len(st) != 2 || !strings.HasPrefix(st[0], "route;dur=") {
			t.Errorf("net/http Server-Timing %v", st)
		}
		if ab, bb := body(t, a), body(t, b); ab != bb || a.StatusCode != b.StatusCode {
			t.Errorf("answer %d: edge %d %q, net/http %d %q", i, a.StatusCode, ab, b.StatusCode, bb)
		}
	}
}

// TestEdgeRoutesOffTheLoop: a router that answers slowly holds up only its
// own request; its route and its errors reach the client as before.
func TestEdgeRoutesOffTheLoop(t *testing.T) {
	route := startWorker(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "routed") }))
	release := make(chan struct{})
	fr := &fakeRouter{fn: func(ctx context.Context, tg urlkind.Target) (Route, error) {
		switch tg.App {
		case "slow":
			select {
			case <-release:
			case <-ctx.Done():
				return Route{}, ctx.Err()
			}
		case "gone":
			return Route{}, ErrUnknownApp
		}
		return route, nil
	}}
	p, srv := startProxy(t, Config{Router: fr})
	slow := make(chan []*http.Response, 1)
	go func() { slow <- rawExchange(t, srv.Addr, "GET /slow HTTP/1.1\r\nHost: h\r\n\r\n", 1, false) }()
	// Meanwhile another request on the same loop is answered.
	rs := rawExchange(t, srv.Addr, "GET /fast HTTP/1.1\r\nHost: h\r\n\r\n", 1, false)
	if b := body(t, rs[0]); b != "routed" {
		t.Errorf("fast request: %d %q", rs[0].StatusCode, b)
	}
	close(release)
	if b := body(t, (<-slow)[0]); b != "routed" {
		t.Errorf("slow request: %q", b)
	}
	rs = rawExchange(t, srv.Addr, "GET /gone HTTP/1.1\r\nHost: h\r\nAccept: application/json\r\n\r\n", 1, false)
	if rs[0].StatusCode != http.StatusNotFound || !strings.Contains(body(t, rs[0]), `"request_id"`) {
		t.Errorf("unknown app: %d", rs[0].StatusCode)
	}
	if served, handed := edgeCounts(p); served != 3 || len(handed) > 0 {
		t.Errorf("edge served %d, handed over %v", served, handed)
	}
}
