//go:build linux

package edge

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/urlkind"
)

// edgeEx is one request relayed by a loop. It writes its own heads, the
// one relayed to the worker and the client's answer head, and the request
// the proxy's pages read: they depend on the exchange alone, not on the
// loop's connections.
type edgeEx struct {
	c, u     *econn
	seq      uint64 // tells a reused exchange's requests apart
	id       string
	addr     string // the worker's
	method   string
	uri      string // the request's target
	t        urlkind.Target
	route    Route
	head1    bool // HEAD: the answer has no body
	page     bool // an app page: the answer gets the route's Server-Timing
	routeDur time.Duration
	reused   bool
	retried  bool
	answered bool // a byte of the answer arrived
	relayed  bool // a byte of the answer went to the client
	haveHead bool
	resp     edgeResp
	mode     int
	left     int64
	cs       chunkScan
	upClose  bool // the worker connection cannot be reused
	cliClose bool // the client connection ends after this answer
}

const (
	bodyNone = iota
	bodyLength
	bodyChunked
	bodyEOF
)

// pageRequest is the request as the proxy's page handlers read it, and
// the recorder they write to.
func (ex *edgeEx) pageRequest() (*http.Request, *pageRecorder) {
	r := &ex.c.req
	h := make(http.Header, len(r.keep))
	for _, kv := range r.keep {
		h.Add(string(kv[0]), string(kv[1]))
	}
	u, err := url.ParseRequestURI(string(r.target))
	if err != nil {
		u = &url.URL{Path: "/"}
	}
	req := (&http.Request{Method: ex.method, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h,
		Host: string(r.host), RequestURI: string(r.target), RemoteAddr: net.JoinHostPort(ex.c.ip, "0"),
		Body: http.NoBody}).WithContext(context.Background())
	rec := &pageRecorder{h: http.Header{"X-Request-Id": {ex.id}}}
	if ex.page {
		rec.h.Set("Server-Timing", RouteTiming(ex.routeDur))
	}
	return req, rec
}

// requestHead writes the relayed head as the proxy's net/http path does:
// the same own lines, signed by the same code (Head).
func (ex *edgeEx) requestHead(b, key []byte, at time.Time, https bool) []byte {
	r, method := &ex.c.req, ex.method
	h := Head{Method: method, URI: ex.uri, Host: string(r.host), ForwardedFor: ex.c.ip, Proto: "http", ID: ex.id,
		Key: key, At: at}
	if https {
		h.Proto = "https"
	}
	b = append(b, method...)
	b = append(b, ' ')
	b = append(b, r.target...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, r.host...)
	b = append(b, "\r\n"...)
	for _, kv := range r.keep {
		b = append(b, kv[0]...)
		b = append(b, ": "...)
		b = append(b, kv[1]...)
		b = append(b, "\r\n"...)
	}
	if r.teTrailers {
		b = append(b, "Te: trailers\r\n"...)
	}
	return append(h.AppendOwn(b), "\r\n"...)
}

// answerHead writes the client's answer head as the proxy's net/http path
// (relayResponse) does.
func (ex *edgeEx) answerHead(b []byte, draining bool) []byte {
	rs := &ex.resp
	b = append(b, "HTTP/1.1 "...)
	b = append(b, rs.statusRaw...)
	b = append(b, "\r\n"...)
	if ex.page {
		b = appendLine(b, "Server-Timing", RouteTiming(ex.routeDur))
	}
outer:
	for _, h := range rs.keep {
		for _, tok := range rs.conn {
			if asciiEq(h[0], string(tok)) {
				continue outer
			}
		}
		b = append(b, h[0]...)
		b = append(b, ": "...)
		b = append(b, h[1]...)
		b = append(b, "\r\n"...)
	}
	if ex.mode == bodyChunked {
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	}
	if ex.cliClose || draining {
		ex.cliClose = true
		b = append(b, "Connection: close\r\n"...)
	}
	b = appendLine(b, "X-Request-Id", ex.id)
	return append(b, "\r\n"...)
}
