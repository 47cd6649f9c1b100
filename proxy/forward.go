package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httputil"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/proxy/edge"
)

// The forwarding core. It does what httputil.ReverseProxy with an
// http.Transport did, on the request's own goroutine: the request head is
// written to a pooled worker connection, the answer is read back from it
// and copied to the client. The transport's two goroutines per connection
// and the channel hand-offs between them were most of the proxy's cost per
// request (docs/benchmarks.md); a request with a body still sends it from
// a second goroutine, so an early answer (413) is read while it uploads.

// forward relays a plain HTTP request to st.route and its answer back.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, st *reqState) {
	r, done := p.flight.trackForward(r, st.route.WorkerID)
	defer done()
	if hasBody(r) {
		// Tell client body errors apart from worker failures.
		st.body = &bodyWatch{ReadCloser: r.Body}
		r.Body = st.body
	}
	p.log.Debug().Str("request_id", st.id).Str("kind", st.target.Kind.String()).
		Str("app", st.target.App).Str("instance", st.target.InstanceID).
		Str("worker", st.route.WorkerID).Str("method", r.Method).Msg("forward")
	h := p.newHead(r, st.id, r.Method, st.route.Addr, st.hopKey)
	ex, err := p.roundTrip(r, st, &h)
	if err != nil {
		p.forwardFailed(w, r, st, err)
		return
	}
	p.relayResponse(w, r, st, ex)
}

// exchange is one request on one worker connection.
type exchange struct {
	uc   *upConn
	resp *http.Response
	sent chan error // the body sender's result; nil without a body
	stop func() bool
}

// done ends the exchange: the connection goes back to the pool only if the
// whole answer was read, the body was sent and the client did not leave
// (its cancellation may have poisoned the connection's deadline).
func (ex *exchange) done(p *Proxy, clean bool) {
	if !ex.stop() {
		clean = false
	}
	if ex.sent != nil {
		select {
		case err := <-ex.sent:
			clean = clean && err == nil
		default:
			clean = false // still uploading: the worker answered early
		}
	}
	if clean && !ex.resp.Close {
		p.up.put(ex.uc) // the body is at EOF: nothing left to close
		return
	}
	ex.uc.Close()        // also ends a sender still writing
	ex.resp.Body.Close() // after the conn: never drains a long answer nobody reads
}

// roundTrip sends the request and reads the answer's head. A pooled
// connection may have been closed by the worker since its last use (it
// restarted): an idempotent request without a body is then sent again,
// once, on a new connection; any other request is only sent on a pooled
// connection that is seen open first, since it must not run twice.
func (p *Proxy) roundTrip(r *http.Request, st *reqState, h *head) (*exchange, error) {
	replay := st.body == nil && idempotent(r.Method)
	for attempt := 0; ; attempt++ {
		uc, err := p.up.get(r.Context(), st.route.Addr)
		if err != nil {
			return nil, err
		}
		if !replay && uc.reused && !uc.alive() {
			uc.Close()
			p.up.drop(st.route.Addr)
			continue // the next get dials
		}
		ex, err := p.send(r, h, uc)
		if err == nil {
			return ex, nil
		}
		uc.Close()
		var na noAnswer
		if !replay || !uc.reused || attempt > 0 || !errors.As(err, &na) || isTimeout(err) || r.Context().Err() != nil {
			return nil, err
		}
		p.up.drop(st.route.Addr)
	}
}

func idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// noAnswer: the connection failed before a byte of the answer arrived.
type noAnswer struct{ err error }

func (e noAnswer) Error() string { return e.err.Error() }
func (e noAnswer) Unwrap() error { return e.err }

func (p *Proxy) send(r *http.Request, h *head, uc *upConn) (*exchange, error) {
	ex := &exchange{uc: uc}
	// A client that leaves aborts the exchange wherever it is.
	ex.stop = context.AfterFunc(r.Context(), func() { uc.SetDeadline(time.Unix(1, 0)) })
	h.write(uc.bw, r.Header, framing(r))
	if r.Body != nil && r.Body != http.NoBody {
		ex.sent = make(chan error, 1)
		go func() { ex.sent <- sendBody(uc, r.Body, r.ContentLength) }()
	} else if err := uc.bw.Flush(); err != nil {
		ex.stop()
		return nil, noAnswer{err}
	}
	if t := p.cfg.ResponseHeaderTimeout; t > 0 {
		uc.SetReadDeadline(time.Now().Add(t))
	}
	resp, err := readResponse(uc.br, r)
	if err != nil {
		ex.stop()
		return nil, err
	}
	if p.cfg.ResponseHeaderTimeout > 0 {
		uc.SetReadDeadline(time.Time{})
	}
	ex.resp = resp
	return ex, nil
}

// errSwitched: a worker answered a plain request with 101, which the proxy
// never asked for (it drops Upgrade).
var errSwitched = edge.ErrSwitched

// readResponse reads the final answer; informational ones are skipped: the
// proxy never sends Expect, and early hints are only an optimisation.
func readResponse(br *bufio.Reader, r *http.Request) (*http.Response, error) {
	if _, err := br.Peek(1); err != nil {
		return nil, noAnswer{err}
	}
	for {
		resp, err := http.ReadResponse(br, r)
		switch {
		case err != nil:
			return nil, err
		case resp.StatusCode == http.StatusSwitchingProtocols:
			return nil, errSwitched
		case resp.StatusCode >= 200:
			return resp, nil
		}
	}
}

// framing is the body framing line of the relayed request. Content-Length
// is always known or the body is chunked: the server already decoded the
// client's framing, so a conflicting one never reaches a worker.
func framing(r *http.Request) string {
	switch {
	case r.Body != nil && r.Body != http.NoBody && r.ContentLength > 0:
		return "Content-Length: " + strconv.FormatInt(r.ContentLength, 10) + "\r\n"
	case r.Body != nil && r.Body != http.NoBody:
		return "Transfer-Encoding: chunked\r\n"
	case r.Method == http.MethodPost || r.Method == http.MethodPut || r.Method == http.MethodPatch:
		return "Content-Length: 0\r\n"
	}
	return ""
}

// sendBody writes the request body after the head; on failure the
// connection is closed, so the worker sees a broken request and the answer
// read fails instead of waiting.
func sendBody(uc *upConn, body io.Reader, n int64) (err error) {
	defer func() {
		if err != nil {
			uc.Close()
		}
	}()
	if n > 0 {
		if _, err := io.CopyN(uc.bw, body, n); err != nil {
			return fmt.Errorf("request body: %w", err)
		}
		return uc.bw.Flush()
	}
	cw := httputil.NewChunkedWriter(uc.bw)
	if _, err := io.Copy(cw, body); err != nil {
		return fmt.Errorf("request body: %w", err)
	}
	if err := cw.Close(); err != nil {
		return err
	}
	uc.bw.WriteString("\r\n") // no trailers
	return uc.bw.Flush()
}

// relayResponse copies the worker's answer to the client.
func (p *Proxy) relayResponse(w http.ResponseWriter, r *http.Request, st *reqState, ex *exchange) {
	resp := ex.resp
	p.misdirected(st.target, resp.StatusCode)
	out := w.Header()
	conn := connectionTokens(resp.Header)
	for k, vv := range resp.Header {
		switch prior, ok := out[k]; {
		case edge.HopByHop(k) || conn[k] || k == "X-Request-Id": // the proxy's id is already set
		case ok && k == "Server-Timing": // the route's step comes first
			out[k] = append(prior, vv...)
		default:
			out[k] = vv
		}
	}
	if len(resp.Trailer) > 0 {
		out["Trailer"] = []string{trailerKeys(resp.Trailer)}
	}
	w.WriteHeader(resp.StatusCode)
	readErr, writeErr := copyBody(w, resp.Body, streamed(resp))
	for k, vv := range resp.Trailer {
		out[k] = vv
	}
	ex.done(p, readErr == nil && writeErr == nil)
	if readErr != nil && (r.Context().Err() == nil || errors.Is(context.Cause(r.Context()), errWorkerDead)) {
		p.st.upstreamErrors.Add(1)
		p.log.Warn().Str("request_id", st.id).Str("worker", st.route.WorkerID).Err(readErr).Msg("worker answer cut off")
		// The status is out; abort the client connection so the truncated
		// answer cannot pass for a complete one.
		panic(http.ErrAbortHandler)
	}
}

// streamed answers are flushed as they come (as ReverseProxy does): event
// streams and anything of unknown length.
func streamed(resp *http.Response) bool {
	if resp.ContentLength == -1 {
		return true
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return mt == "text/event-stream"
}

func trailerKeys(t http.Header) string {
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ", ")
}

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// copyBody copies an answer body, telling the worker's failures (read)
// from the client's (write).
func copyBody(w http.ResponseWriter, body io.Reader, flush bool) (readErr, writeErr error) {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	f, _ := w.(http.Flusher)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return nil, werr
			}
			if flush && f != nil {
				f.Flush()
			}
		}
		if err == io.EOF {
			return nil, nil
		}
		if err != nil {
			return err, nil
		}
	}
}

// forwardFailed answers a request the worker could not be asked.
func (p *Proxy) forwardFailed(w http.ResponseWriter, r *http.Request, st *reqState, err error) {
	if errors.Is(context.Cause(r.Context()), errWorkerDead) {
		p.upstreamFailed(w, r, st.id, st.target, st.route, errWorkerDead)
		return
	}
	if r.Context().Err() != nil || (st.body != nil && st.body.failed.Load()) {
		// The client went away or broke its upload; nobody to answer.
		p.log.Debug().Str("request_id", st.id).Err(err).Msg("client aborted")
		if r.Context().Err() == nil {
			p.st.badRequests.Add(1)
			p.page(w, r, st.id, http.StatusBadRequest, "Bad request", "The request body could not be read.")
		}
		return
	}
	if unreachable(err) {
		p.up.drop(st.route.Addr)
	}
	p.upstreamFailed(w, r, st.id, st.target, st.route, err)
}

func hasBody(r *http.Request) bool { return r.Body != nil && r.Body != http.NoBody }

// bodyWatch records the client's request body read error.
// The body is read on the sender's goroutine, hence the atomic.
type bodyWatch struct {
	io.ReadCloser
	failed atomic.Bool
}

func (b *bodyWatch) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.failed.Store(true)
	}
	return n, err
}
