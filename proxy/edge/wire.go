package edge

import (
	"errors"
	"io"
	"net"
	"net/textproto"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/hop"
	"github.com/cloudbrowser-go/cloudbrowser/internal/urlkind"
)

// What the proxy's net/http path and the edge both put on the wire, kept
// here once so the two relay the same bytes: package proxy uses these too.

// Route says where a request goes.
type Route struct {
	WorkerID string
	Addr     string // worker HTTP host:port
	// Handoff is the worker's handoff socket, usable by a proxy whose
	// handoff.HostID is Host: a WebSocket is then handed to the worker
	// instead of relayed ("" = relay).
	Handoff, Host string
}

// InstantRouter is a router that can answer some targets from memory. The
// proxy asks RouteNow first and, when it answered, skips Route and the
// timer that bounds it: most requests of a page load take this path.
type InstantRouter interface {
	// RouteNow answers t without blocking, or reports answered false.
	RouteNow(t urlkind.Target) (r Route, answered bool, err error)
}

// Head is what the proxy puts in place of the client's own forwarding
// headers on a relayed request. The net/http path, the WebSocket handshake
// and the edge write their request heads through it, so all sign the same
// fields.
type Head struct {
	Method, URI, Host string
	ForwardedFor      string // X-Forwarded-For
	Proto             string // X-Forwarded-Proto
	ID                string // X-Request-Id
	// Key signs the head (X-CB-Hop) as At, when it is written; nil: the
	// proxy signs nothing.
	Key []byte
	At  time.Time
}

// AppendOwn appends the proxy's own header lines (forwarding, request id,
// signature over the relayed fields) to b: what every relayed head puts
// last, so all sign the same fields.
func (h *Head) AppendOwn(b []byte) []byte {
	b = appendLine(b, "X-Forwarded-For", h.ForwardedFor)
	b = appendLine(b, "X-Forwarded-Proto", h.Proto)
	b = appendLine(b, "X-Request-Id", h.ID)
	if h.Key == nil {
		return b
	}
	b = append(b, hop.Header+": "...)
	b = hop.AppendSign(b, h.Key, h.At, hop.Fields{Method: h.Method, Host: h.Host, URI: h.URI,
		ForwardedFor: h.ForwardedFor, Proto: h.Proto})
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

// HopByHop: k (canonical) is a connection-specific header (RFC 9110
// §7.6.1), never relayed; Connection may name more.
func HopByHop(k string) bool { return hopByHop[k] }

// Replaced: k (canonical) is a request header the proxy sets itself (Head)
// or frames itself (Content-Length, Expect): the client's values never
// reach a worker.
func Replaced(k string) bool { return replaced[k] }

var hopByHop = map[string]bool{
	"Connection": true, "Proxy-Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

var replaced = map[string]bool{
	"Forwarded": true, "X-Forwarded-For": true, "X-Forwarded-Host": true, "X-Forwarded-Proto": true,
	"X-Request-Id": true, textproto.CanonicalMIMEHeaderKey(hop.Header): true,
	"Content-Length": true, "Expect": true, "Host": true,
}

// RequestIDs makes a proxy's request ids.
type RequestIDs struct {
	prefix string
	seq    atomic.Uint64
}

// NewRequestIDs returns ids that start with prefix.
func NewRequestIDs(prefix string) *RequestIDs { return &RequestIDs{prefix: prefix} }

// For is a request's id: the client's if it is sane, else a new one.
func (s *RequestIDs) For(client string) string {
	if id := requestID(client); id != "" {
		return id
	}
	var b [48]byte // the prefix and a base-36 uint64: one allocation, the string
	return string(strconv.AppendUint(append(b[:0], s.prefix...), s.seq.Add(1), 36))
}

// requestID returns the client's id if it is sane (short, printable, no
// separators that could forge log fields), else "".
func requestID(s string) string {
	if len(s) == 0 || len(s) > 64 {
		return ""
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
			return ""
		}
	}
	return s
}

// IsPage: the route's time goes in the answer's Server-Timing for pages
// only (not assets or sockets); the first-frame breakdown reads it, the
// worker's own steps follow it.
func IsPage(k urlkind.Kind) bool {
	return k == urlkind.KindApp || k == urlkind.KindInstance || k == urlkind.KindBrowser
}

// RouteTiming is the route's Server-Timing entry.
func RouteTiming(d time.Duration) string {
	return "route;dur=" + strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 1, 64)
}

// ErrWorkerDead ends the exchanges with a worker the master declared dead.
var ErrWorkerDead = errors.New("the master declared the worker dead")

// ErrSwitched: a worker answered a plain request with 101, which the proxy
// never asks for (it drops Upgrade).
var ErrSwitched = errors.New("worker switched protocols on a plain request")

// IsTimeout: err is a network timeout.
func IsTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// IsDialError: err is a failure to connect.
func IsDialError(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

// Unreachable reports failures that suggest the worker is down, as opposed
// to a slow or misbehaving one.
func Unreachable(err error) bool {
	return IsDialError(err) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
