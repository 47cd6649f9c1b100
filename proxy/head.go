package proxy

import (
	"bufio"
	"net"
	"net/http"
	"net/textproto"
	"strings"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/proxy/edge"
)

// head is a relayed request's head as the net/http path and the
// WebSocket handshake write it: the edge's Head, whose own lines (signed)
// every relayed head ends with.
type head struct{ edge.Head }

// newHead builds the head of r relayed with method (the handshake always
// sends GET) to addr, signed with key unless key is nil.
func (p *Proxy) newHead(r *http.Request, id, method, addr string, key []byte) head {
	h := head{edge.Head{Method: method, URI: requestURI(r), Host: r.Host, ID: id, Proto: p.scheme().Proto(r)}}
	if h.Host == "" { // HTTP/1.0 without Host: name the worker, as a transport would
		h.Host = addr
	}
	if len(p.cfg.TrustedProxies) > 0 {
		// The user as the trusted proxies name them: the worker takes
		// the last entry as the client.
		h.ForwardedFor = p.scheme().Client(r)
	} else if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		h.ForwardedFor = ip
		if prior := r.Header["X-Forwarded-For"]; p.cfg.TrustForwardedFor && len(prior) > 0 {
			h.ForwardedFor = strings.Join(prior, ", ") + ", " + ip
		}
	}
	h.Key, h.At = key, time.Now()
	return h
}

// requestURI is the request target as the client sent it, so the worker
// parses the same bytes the proxy classified; absolute-form targets are
// reduced to origin form.
func requestURI(r *http.Request) string {
	if u := r.RequestURI; u != "" && u[0] == '/' {
		return u
	}
	return r.URL.RequestURI()
}

// connectionTokens returns the header names listed in Connection, which
// are hop-by-hop too; nil (no allocation) in the usual case.
func connectionTokens(h http.Header) map[string]bool {
	var m map[string]bool
	for _, v := range h["Connection"] {
		for _, tok := range strings.Split(v, ",") {
			tok = textproto.TrimString(tok)
			if tok == "" || strings.EqualFold(tok, "keep-alive") || strings.EqualFold(tok, "close") {
				continue
			}
			if m == nil {
				m = make(map[string]bool)
			}
			m[textproto.CanonicalMIMEHeaderKey(tok)] = true
		}
	}
	return m
}

// write writes the request line and headers: the client's end-to-end
// headers, then the proxy's own, then extra (already CRLF-terminated lines:
// body framing, the upgrade), then the blank line. Values come from the
// server's parser, which refuses CR and LF, so they are written as they are.
func (h *head) write(bw *bufio.Writer, in http.Header, extra string) {
	bw.WriteString(h.Method)
	bw.WriteByte(' ')
	bw.WriteString(h.URI)
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(h.Host)
	bw.WriteString("\r\n")
	conn := connectionTokens(in)
	for k, vv := range in {
		if edge.HopByHop(k) || edge.Replaced(k) || conn[k] {
			continue
		}
		for _, v := range vv {
			bw.WriteString(k)
			bw.WriteString(": ")
			bw.WriteString(v)
			bw.WriteString("\r\n")
		}
	}
	if teTrailers(in) {
		bw.WriteString("Te: trailers\r\n")
	}
	bw.Write(h.AppendOwn(bw.AvailableBuffer()))
	bw.WriteString(extra)
	bw.WriteString("\r\n")
}

// teTrailers: the client accepts trailers, which is end-to-end information
// carried in a hop-by-hop header (as httputil.ReverseProxy keeps it).
func teTrailers(h http.Header) bool {
	for _, v := range h["Te"] {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(textproto.TrimString(tok), "trailers") {
				return true
			}
		}
	}
	return false
}
