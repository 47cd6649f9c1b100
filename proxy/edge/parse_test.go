package edge

import (
	"bufio"
	"bytes"
	"net/http"
	"strings"
	"testing"
)

// FuzzEdgeRequest: whatever head the edge accepts, net/http reads the same
// way (method, target, Host, every relayed header) and as a request without
// a body. The edge never decides a framing question net/http would decide
// differently: that is what keeps requests from being smuggled past it.
func FuzzEdgeRequest(f *testing.F) {
	for _, s := range []string{
		"GET /a/a/w-1.abcdefghijkl HTTP/1.1\r\nHost: h\r\n\r\n",
		"HEAD /x?q=%20 HTTP/1.1\r\nHost: h:80\r\nConnection: close\r\nTe: trailers\r\nX-Request-Id: a\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"GET / HTTP/1.1\r\nhost: h\r\nX-A: b\r\n c\r\n\r\n",
		"GET / HTTP/1.1\nHost: h\n\n",
		"GET / HTTP/1.1\r\nHost: h\r\nCookie: a=b; c=d\r\nAccept: */*\r\n\r\nGET / HTTP/1.1\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var r edgeReq
		if err := parseEdgeRequest(b, &r); err != nil {
			return
		}
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(b[:r.head])))
		if err != nil {
			t.Fatalf("edge took a head net/http refuses (%v): %q", err, b[:r.head])
		}
		if req.ContentLength != 0 || len(req.TransferEncoding) > 0 || (req.Body != nil && req.Body != http.NoBody) {
			t.Fatalf("edge took a request net/http reads with a body: %q", b[:r.head])
		}
		method := "GET"
		if r.head1 {
			method = "HEAD"
		}
		if req.Method != method || req.RequestURI != string(r.target) || req.Host != string(r.host) {
			t.Fatalf("edge read %s %q host %q; net/http %s %q host %q", method, r.target, r.host, req.Method, req.RequestURI, req.Host)
		}
		if req.Close != r.close {
			t.Fatalf("Connection: close: edge %v, net/http %v", r.close, req.Close)
		}
		for _, kv := range r.keep {
			name := http.CanonicalHeaderKey(string(kv[0]))
			found := false
			for _, v := range req.Header.Values(name) {
				found = found || v == string(kv[1])
			}
			if !found {
				t.Fatalf("header %s: edge %q, net/http %q", name, kv[1], req.Header.Values(name))
			}
		}
		for name := range req.Header {
			if dropped([]byte(name)) || strings.EqualFold(name, "X-Request-Id") {
				continue
			}
			n := 0
			for _, kv := range r.keep {
				if strings.EqualFold(string(kv[0]), name) {
					n++
				}
			}
			if n != len(req.Header.Values(name)) {
				t.Fatalf("header %s: edge keeps %d lines, net/http reads %d", name, n, len(req.Header.Values(name)))
			}
		}
	})
}

func TestChunkScan(t *testing.T) {
	tests := []struct {
		name, in string
		n        int // bytes of the body; -1: malformed
		done     bool
	}{
		{"one chunk", "5\r\nhello\r\n0\r\n\r\nNEXT", 15, true},
		{"extension and trailer", "3;x=y\r\nabc\r\n0\r\nT: v\r\n\r\n", 23, true},
		{"unfinished", "5\r\nhel", 6, false},
		{"bad size", "x\r\n", -1, false},
		{"bare LF", "3\nabc", -1, false},
		{"data without CRLF", "1\r\naXX", -1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, split := range []int{1, 2, 7, len(tt.in)} {
				var s chunkScan
				total, bad := 0, false
				for in := []byte(tt.in); len(in) > 0 && !s.done(); {
					part := in[:min(split, len(in))]
					n, err := s.scan(part)
					if err != nil {
						bad = true
						break
					}
					total += n
					in = in[len(part):]
				}
				if tt.n < 0 != bad || (!bad && (total != tt.n || s.done() != tt.done)) {
					t.Errorf("split %d: %d bytes (bad %v, done %v), want %d (done %v)", split, total, bad, s.done(), tt.n, tt.done)
				}
			}
		})
	}
}
