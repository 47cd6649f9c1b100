package edge

import (
	"bytes"
	"errors"
)

// The event-loop edge's HTTP/1.1 heads. The edge relays only requests whose
// head is in a strict subset of HTTP/1.1 that every parser reads the same
// way; anything else, however legal, is handed with its bytes to net/http,
// which then answers it as it always did. So the edge never has to decide
// a framing question (request smuggling lives in such questions): requests
// it keeps have no body by construction.

// maxEdgeHead bounds a request head the edge parses; longer ones go to
// net/http, whose limit is larger.
const maxEdgeHead = 8 << 10

// maxEdgeHeaders bounds the header lines the edge keeps track of.
const maxEdgeHeaders = 64

// handoff reasons, the label of cloudbrowser_proxy_edge_handoffs_total.
const (
	hoSyntax  = "syntax"  // outside the strict subset (also: errors net/http reports)
	hoMethod  = "method"  // not GET or HEAD
	hoFraming = "framing" // a body, an upgrade or an expectation
	hoLarge   = "large"   // head over maxEdgeHead or too many lines
	hoTarget  = "target"  // a socket, a reserved or an invalid URL
)

// edgeReq is a parsed request head; its byte slices point into the
// connection's buffer.
type edgeReq struct {
	head       int // length of the head with its blank line
	head1      bool
	target     []byte
	host       []byte
	requestID  []byte
	close      bool // Connection: close
	teTrailers bool
	keep       [][2][]byte // end-to-end header lines, name and value
}

// errIncomplete: the head's end has not arrived yet.
var errIncomplete = errors.New("incomplete head")

// edgeHandoff is why a request is left to net/http.
type edgeHandoff string

func (e edgeHandoff) Error() string { return "hand off: " + string(e) }

// parseEdgeRequest parses b's leading request head into r (reusing r.keep).
// It returns errIncomplete, an edgeHandoff, or nil.
func parseEdgeRequest(b []byte, r *edgeReq) error {
	end := bytes.Index(b, crlfcrlf)
	if end < 0 {
		switch {
		case len(b) > maxEdgeHead:
			return edgeHandoff(hoLarge)
		case bareLF(b):
			return edgeHandoff(hoSyntax) // its end may never be a CRLF pair
		}
		return errIncomplete
	}
	if end+4 > maxEdgeHead {
		return edgeHandoff(hoLarge)
	}
	*r = edgeReq{keep: r.keep[:0], head: end + 4}
	line, rest := cutLine(b[:end+2])
	switch {
	case bytes.HasPrefix(line, []byte("GET ")):
		line = line[4:]
	case bytes.HasPrefix(line, []byte("HEAD ")):
		r.head1 = true
		line = line[5:]
	default:
		if len(line) == 0 || !isToken(line[:max(bytes.IndexByte(line, ' '), 0)]) {
			return edgeHandoff(hoSyntax)
		}
		return edgeHandoff(hoMethod)
	}
	sp := bytes.IndexByte(line, ' ')
	if sp < 0 || string(line[sp+1:]) != "HTTP/1.1" || !edgeTarget(line[:sp]) {
		return edgeHandoff(hoSyntax)
	}
	r.target = line[:sp]
	hosts := 0
	for len(rest) > 0 {
		line, rest = cutLine(rest)
		if line == nil {
			return edgeHandoff(hoSyntax) // a bare CR or LF
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 || !isToken(line[:colon]) {
			return edgeHandoff(hoSyntax) // also obs-fold and a space before the colon
		}
		name, value := line[:colon], trimOWS(line[colon+1:])
		if !fieldValue(value) {
			return edgeHandoff(hoSyntax)
		}
		switch {
		case asciiEq(name, "Host"):
			if hosts++; hosts > 1 || !hostValue(value) {
				return edgeHandoff(hoSyntax)
			}
			r.host = value
		case asciiEq(name, "Content-Length"), asciiEq(name, "Transfer-Encoding"), asciiEq(name, "Upgrade"),
			asciiEq(name, "Expect"), asciiEq(name, "Trailer"), asciiEq(name, "HTTP2-Settings"):
			return edgeHandoff(hoFraming)
		case asciiEq(name, "Connection"):
			for _, tok := range bytes.Split(value, []byte(",")) {
				switch tok = trimOWS(tok); {
				case asciiEq(tok, "close"):
					r.close = true
				case asciiEq(tok, "keep-alive"), len(tok) == 0:
				default:
					return edgeHandoff(hoFraming) // names more hop-by-hop headers
				}
			}
		case asciiEq(name, "Te"):
			for _, tok := range bytes.Split(value, []byte(",")) {
				if asciiEq(trimOWS(tok), "trailers") {
					r.teTrailers = true
				}
			}
		case asciiEq(name, "X-Request-Id"):
			r.requestID = value
		case dropped(name):
		default:
			if len(r.keep) == maxEdgeHeaders {
				return edgeHandoff(hoLarge)
			}
			r.keep = append(r.keep, [2][]byte{name, value})
		}
	}
	if hosts == 0 {
		return edgeHandoff(hoSyntax) // HTTP/1.1 requires Host (net/http: 400)
	}
	return nil
}

// dropped are request headers never relayed as the client sent them:
// hop-by-hop ones and those the proxy sets itself (HopByHop, Replaced).
func dropped(name []byte) bool { return inNames(name, droppedNames) }

// inNames: name is one of names, case-insensitively.
func inNames(name []byte, names []string) bool {
	for _, k := range names {
		if asciiEq(name, k) {
			return true
		}
	}
	return false
}

var droppedNames = func() []string {
	var s []string
	for k := range hopByHop {
		s = append(s, k)
	}
	for k := range replaced {
		s = append(s, k)
	}
	return s
}()

// answerHopByHop are an answer's hop-by-hop headers other than the framing
// ones. Trailer stays: a chunked body is relayed with its trailers as they
// are.
func answerHopByHop(name []byte) bool { return inNames(name, answerHopNames) }

var answerHopNames = func() []string {
	var s []string
	for k := range hopByHop {
		if k != "Trailer" {
			s = append(s, k)
		}
	}
	return s
}()

var crlfcrlf = []byte("\r\n\r\n")

// bareLF: b has an LF without its CR.
func bareLF(b []byte) bool {
	for i := bytes.IndexByte(b, '\n'); i >= 0; {
		if i == 0 || b[i-1] != '\r' {
			return true
		}
		j := bytes.IndexByte(b[i+1:], '\n')
		if j < 0 {
			return false
		}
		i += 1 + j
	}
	return false
}

// cutLine splits b (which ends in CRLF) after its first CRLF; line is nil
// when a CR or LF stands anywhere else in it.
func cutLine(b []byte) (line, rest []byte) {
	i := bytes.IndexByte(b, '\n')
	if i < 1 || b[i-1] != '\r' || bytes.IndexByte(b[:i-1], '\r') >= 0 {
		return nil, nil
	}
	return b[:i-1], b[i+1:]
}

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// asciiEq compares a header name or token case-insensitively.
func asciiEq(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c, d := b[i], s[i]
		if c|0x20 != d|0x20 || (c|0x20 < 'a' || c|0x20 > 'z') && c != d {
			return false
		}
	}
	return true
}

// isToken: RFC 9110 tchar+.
func isToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !tchar[c] {
			return false
		}
	}
	return true
}

var tchar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-32] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// fieldValue: visible ASCII, space and tab only (no obs-text, no controls).
func fieldValue(b []byte) bool {
	for _, c := range b {
		if (c < 0x20 && c != '\t') || c > 0x7e {
			return false
		}
	}
	return true
}

// hostValue: a host name or address with an optional port, nothing else.
func hostValue(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '.' || c == '-' || c == ':' || c == '[' || c == ']') {
			return false
		}
	}
	return true
}

// edgeTarget: an origin-form target of unreserved characters, sub-delims,
// ':', '@', '/', a query, and percent-escapes in the query only (a path with
// escapes is classified from net/http's decoded form, so it is left there).
func edgeTarget(b []byte) bool {
	if len(b) == 0 || b[0] != '/' {
		return false
	}
	query := false
	for _, c := range b {
		switch {
		case c == '?':
			query = true
		case c == '%':
			if !query {
				return false
			}
		case !targetChar[c]:
			return false
		}
	}
	return true
}

var targetChar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-32] = true, true
	}
	for _, c := range "-._~!$&'()*+,;=:@/" {
		t[c] = true
	}
	return t
}()

// edgeResp is a parsed answer head from a worker.
type edgeResp struct {
	head      int // length of the head with its blank line
	status    int
	statusRaw []byte // "200 OK"
	length    int64  // Content-Length, -1 when absent
	chunked   bool
	close     bool // Connection: close, or HTTP/1.0 without keep-alive
	conn      [][]byte
	keep      [][2][]byte
}

var errBadAnswer = errors.New("proxy: malformed answer from worker")

// parseEdgeResponse parses b's leading answer head (reusing r's slices).
func parseEdgeResponse(b []byte, r *edgeResp) error {
	end := bytes.Index(b, crlfcrlf)
	if end < 0 {
		if len(b) > 64<<10 {
			return errBadAnswer
		}
		return errIncomplete
	}
	*r = edgeResp{keep: r.keep[:0], conn: r.conn[:0], head: end + 4, length: -1}
	line, rest := cutLine(b[:end+2])
	var http10 bool
	switch {
	case bytes.HasPrefix(line, []byte("HTTP/1.1 ")):
	case bytes.HasPrefix(line, []byte("HTTP/1.0 ")):
		http10 = true
	default:
		return errBadAnswer
	}
	r.statusRaw = line[9:]
	if len(r.statusRaw) < 3 || (len(r.statusRaw) > 3 && r.statusRaw[3] != ' ') || !fieldValue(r.statusRaw) {
		return errBadAnswer
	}
	for _, c := range r.statusRaw[:3] {
		if c < '0' || c > '9' {
			return errBadAnswer
		}
		r.status = r.status*10 + int(c-'0')
	}
	if r.status < 100 {
		return errBadAnswer
	}
	keepAlive := false
	for len(rest) > 0 {
		line, rest = cutLine(rest)
		if line == nil {
			return errBadAnswer
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 || !isToken(line[:colon]) {
			return errBadAnswer
		}
		name, value := line[:colon], trimOWS(line[colon+1:])
		if !fieldValue(value) {
			return errBadAnswer
		}
		switch {
		case asciiEq(name, "Content-Length"):
			n, ok := parseLength(value)
			if !ok || (r.length >= 0 && r.length != n) {
				return errBadAnswer
			}
			r.length = n
			r.keep = append(r.keep, [2][]byte{name, value}) // relayed as it is
		case asciiEq(name, "Transfer-Encoding"):
			if r.chunked || !asciiEq(value, "chunked") {
				return errBadAnswer // only a single chunked coding is relayed as it is
			}
			r.chunked = true
		case asciiEq(name, "Connection"):
			for _, tok := range bytes.Split(value, []byte(",")) {
				switch tok = trimOWS(tok); {
				case asciiEq(tok, "close"):
					r.close = true
				case asciiEq(tok, "keep-alive"):
					keepAlive = true
				case len(tok) > 0:
					r.conn = append(r.conn, tok)
				}
			}
		case asciiEq(name, "X-Request-Id"): // the proxy's own id replaces it
		case answerHopByHop(name):
		default:
			if len(r.keep) == 256 {
				return errBadAnswer
			}
			r.keep = append(r.keep, [2][]byte{name, value})
		}
	}
	if r.chunked && r.length >= 0 {
		return errBadAnswer // both framings: refuse rather than pick one
	}
	if http10 && !keepAlive {
		r.close = true
	}
	return nil
}

// parseLength: a non-negative decimal without sign or spaces.
func parseLength(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// chunkScan follows a chunked body byte by byte as it passes through, to
// find where it ends; the bytes themselves are relayed unchanged.
type chunkScan struct {
	state int
	size  int64 // of the current chunk, then what is left of it
	digit bool
}

const (
	csSize    = iota // hex digits
	csExt            // chunk extension up to CR
	csSizeLF         // LF after the size line
	csData           // chunk bytes
	csDataCR         // CR after data
	csDataLF         // LF after data
	csTrailer        // start of a trailer line (or the final CRLF)
	csTrLine         // inside a trailer line
	csTrLF           // LF ending a trailer line
	csEndLF          // LF ending the body
	csDone
)

var errBadChunk = errors.New("proxy: malformed chunked answer from worker")

// scan consumes b and returns how many of its bytes belong to the body
// (all of them unless the body ended inside b).
func (s *chunkScan) scan(b []byte) (int, error) {
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch s.state {
		case csSize:
			switch v := unhex(c); {
			case v >= 0:
				if s.size > 1<<40 {
					return 0, errBadChunk
				}
				s.size, s.digit = s.size<<4|int64(v), true
			case !s.digit:
				return 0, errBadChunk
			case c == ';' || c == ' ' || c == '\t':
				s.state = csExt
			case c == '\r':
				s.state = csSizeLF
			default:
				return 0, errBadChunk
			}
		case csExt:
			switch {
			case c == '\r':
				s.state = csSizeLF
			case c == '\n' || (c < 0x20 && c != '\t') || c == 0x7f:
				return 0, errBadChunk
			}
		case csSizeLF:
			if c != '\n' {
				return 0, errBadChunk
			}
			s.digit = false
			if s.size == 0 {
				s.state = csTrailer
			} else {
				s.state = csData
			}
		case csData:
			n := min(int64(len(b)-i), s.size)
			s.size -= n
			i += int(n) - 1
			if s.size == 0 {
				s.state = csDataCR
			}
		case csDataCR:
			if c != '\r' {
				return 0, errBadChunk
			}
			s.state = csDataLF
		case csDataLF:
			if c != '\n' {
				return 0, errBadChunk
			}
			s.state = csSize
		case csTrailer:
			if c == '\r' {
				s.state = csEndLF
			} else {
				s.state = csTrLine
			}
		case csTrLine:
			if c == '\r' {
				s.state = csTrLF
			} else if c == '\n' {
				return 0, errBadChunk
			}
		case csTrLF:
			if c != '\n' {
				return 0, errBadChunk
			}
			s.state = csTrailer
		case csEndLF:
			if c != '\n' {
				return 0, errBadChunk
			}
			s.state = csDone
			return i + 1, nil
		}
	}
	return len(b), nil
}

func (s *chunkScan) done() bool { return s.state == csDone }

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
