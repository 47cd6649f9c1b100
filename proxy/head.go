package proxy

import (
	"bufio"
	"net"
	"net/http"
	"net/textproto"
	"strings"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/hop"
)

// head is what the proxy puts in place of the client's own forwarding
// headers on a relayed request. Plain HTTP and the WebSocket handshake
// write their request heads through it, so both sign the same fields.
type head struct {
	method, uri, host string
	forwardedFor      string // X-Forwarded-For
	proto             string // X-Forwarded-Proto
	id                string // X-Request-Id
	// key signs the head (X-CB-Hop) as at, when it is written; nil: the
	// proxy signs nothing.
	key []byte
	at  time.Time
}

// newHead builds the head of r relayed with method (the handshake always
// sends GET) to addr, signed with key unless key is nil.
func (p *Proxy) newHead(r *http.Request, id, method, addr string, key []byte) head {
	h := head{method: method, uri: requestURI(r), host: r.Host, id: id, proto: p.scheme().Proto(r)}
	if h.host == "" { // HTTP/1.0 without Host: name the worker, as a transport would
		h.host = addr
	}
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		h.forwardedFor = ip
		if prior := r.Header["X-Forwarded-For"]; p.cfg.TrustForwardedFor && len(prior) > 0 {
			h.forwardedFor = strings.Join(prior, ", ") + ", " + ip
		}
	}
	h.key, h.at = key, time.Now()
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

// hopByHop are connection-specific headers (RFC 9110 §7.6.1), never
// relayed; Connection may name more.
var hopByHop = map[string]bool{
	"Connection": true, "Proxy-Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

// replaced are request headers the proxy sets itself (head) or frames
// itself (Content-Length, Expect): the client's values never reach a worker.
var replaced = map[string]bool{
	"Forwarded": true, "X-Forwarded-For": true, "X-Forwarded-Host": true, "X-Forwarded-Proto": true,
	"X-Request-Id": true, textproto.CanonicalMIMEHeaderKey(hop.Header): true,
	"Content-Length": true, "Expect": true, "Host": true,
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
	bw.WriteString(h.method)
	bw.WriteByte(' ')
	bw.WriteString(h.uri)
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(h.host)
	bw.WriteString("\r\n")
	conn := connectionTokens(in)
	for k, vv := range in {
		if hopByHop[k] || replaced[k] || conn[k] {
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
	bw.Write(h.appendOwn(bw.AvailableBuffer()))
	bw.WriteString(extra)
	bw.WriteString("\r\n")
}

// appendOwn appends the proxy's own header lines (forwarding, request id,
// signature over the relayed fields) to b: what both the net/http path and
// the edge put last, so both sign the same fields.
func (h *head) appendOwn(b []byte) []byte {
	b = appendLine(b, "X-Forwarded-For", h.forwardedFor)
	b = appendLine(b, "X-Forwarded-Proto", h.proto)
	b = appendLine(b, "X-Request-Id", h.id)
	if h.key == nil {
		return b
	}
	b = append(b, hop.Header+": "...)
	b = hop.AppendSign(b, h.key, h.at, hop.Fields{Method: h.method, Host: h.host, URI: h.uri,
		ForwardedFor: h.forwardedFor, Proto: h.proto})
	return append(b, "\r\n"...)
}

func appendLine(b []byte, k, v string) []byte {
	if v == "" {
		return b
	}
	b = append(b, k...)
	b = append(b, ": "...)
	b = append(b, v...)
	return append(b, "\r\n"...)
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
