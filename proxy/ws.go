package proxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/urlkind"
	"github.com/cloudbrowser-go/cloudbrowser/proxy/edge"
)

// relay is one WebSocket connection pair, tracked so Shutdown, or the
// master's word that its worker is gone (CloseWorker), can close it.
type relay struct {
	workerID string
	mu       sync.Mutex
	worker   net.Conn
	client   net.Conn // nil until hijacked
	closed   bool
}

// close aborts the relay (or its handshake); safe to call repeatedly.
func (rl *relay) close() {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	rl.closed = true
	rl.worker.Close()
	if rl.client != nil {
		rl.client.Close()
	}
}

// setClient attaches the hijacked client conn unless the relay was already
// closed (by Shutdown), in which case the caller must drop it.
func (rl *relay) setClient(c net.Conn) bool {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if rl.closed {
		return false
	}
	rl.client = c
	return true
}

// CloseWorker closes every WebSocket relayed or handed to worker wid: the master
// declared it dead (a crash, a stall, a cut), so what its users see is no
// longer live, and their input would be lost there. Their client engines
// reconnect at once and reach the instance's new copy. Plain requests in
// flight with it end too (the moving page), since a stalled worker may
// never answer them. It returns how many sockets it closed.
func (p *Proxy) CloseWorker(wid string) int {
	relayed := p.flight.closeRelays(wid)
	handed := p.handed.closeWorker(wid)
	p.flight.endForwards(wid)
	p.edges.closeWorker(wid)
	n := relayed + handed
	if n > 0 {
		p.st.wsWorkerGone.Add(uint64(n))
		p.log.Info().Str("worker", wid).Int("relayed", relayed).Int("handed", handed).Msg("websockets to a dead worker closed")
	}
	return n
}

// serveWebSocket forwards an upgrade to the routed worker and, once the
// worker agreed (101), relays raw bytes until both sides are done. The
// Router is never consulted again for this connection. reached reports
// that the client's socket got to the worker (101 relayed, or handed
// over): false when the worker never took it.
func (p *Proxy) serveWebSocket(w http.ResponseWriter, r *http.Request, id string, t urlkind.Target, route Route, hopKey []byte) (reached bool) {
	log := p.log.With().Str("request_id", id).Str("instance", t.InstanceID).Str("worker", route.WorkerID).Logger()
	if p.flight.isClosing() {
		p.page(w, r, id, http.StatusServiceUnavailable, "Service unavailable", "The proxy is shutting down, retry shortly.")
		return false
	}
	// A TLS connection cannot be handed over: its session (keys,
	// sequence numbers) lives in this process, so it is relayed.
	if r.TLS == nil && p.handoffs.allows(route) {
		return p.handOff(w, r, id, route, hopKey, log)
	}
	wc, err := p.dialer.DialContext(r.Context(), "tcp", route.Addr)
	if err != nil {
		if r.Context().Err() == nil {
			p.upstreamFailed(w, r, id, t, route, err)
		}
		return false
	}
	rl := &relay{worker: wc, workerID: route.WorkerID}
	if !p.flight.track(rl) {
		wc.Close()
		p.page(w, r, id, http.StatusServiceUnavailable, "Service unavailable", "The proxy is shutting down, retry shortly.")
		return false
	}
	defer p.flight.untrack(rl)

	resp, wbr, err := p.handshake(r, id, wc, route.Addr, hopKey)
	if err != nil {
		rl.close()
		switch {
		case r.Context().Err() != nil:
			log.Debug().Err(err).Msg("client left during websocket handshake")
		case p.flight.isClosing():
			p.page(w, r, id, http.StatusServiceUnavailable, "Service unavailable", "The proxy is shutting down, retry shortly.")
		default:
			p.upstreamFailed(w, r, id, t, route, err)
		}
		return false
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		p.misdirected(t, resp.StatusCode)
		p.relayRefusal(w, resp, wc, id)
		rl.close()
		log.Debug().Int("status", resp.StatusCode).Msg("worker refused websocket")
		return false
	}

	cc, cbr, err := http.NewResponseController(w).Hijack()
	if err != nil {
		rl.close()
		log.Error().Err(err).Msg("cannot hijack client connection")
		p.page(w, r, id, http.StatusInternalServerError, "Internal error", "The WebSocket could not be established.")
		return false
	}
	if !rl.setClient(cc) {
		cc.Close()  // Shutdown raced us
		return true // after its 101: the worker hears the client leave
	}
	_ = cc.SetDeadline(time.Time{}) // the server's deadlines are not ours to keep
	if err := p.finishHandshake(cc, cbr, wc, wbr, resp, id); err != nil {
		rl.close()
		log.Debug().Err(err).Msg("websocket handshake relay failed")
		return true // the worker took it, and hears the client leave
	}
	p.st.wsTotal.Add(1)
	log.Debug().Msg("websocket relay open")
	p.pump.run(unwrapConn(cc), wc)
	log.Debug().Msg("websocket relay closed")
	return true
}

// handshake sends the upgrade request to the worker and reads its answer.
func (p *Proxy) handshake(r *http.Request, id string, wc net.Conn, addr string, hopKey []byte) (*http.Response, *bufio.Reader, error) {
	// Abort a stalled handshake if the client leaves; after return the relay
	// owns the connection, so the hook must be stopped first.
	stop := context.AfterFunc(r.Context(), func() { wc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	_ = wc.SetDeadline(time.Now().Add(p.cfg.HandshakeTimeout))

	bw := bufio.NewWriterSize(wc, 4096)
	p.writeUpgradeHead(bw, r, id, addr, hopKey)
	if err := bw.Flush(); err != nil {
		return nil, nil, err
	}
	br := bufio.NewReaderSize(wc, 4096)
	resp, err := http.ReadResponse(br, r)
	if err != nil {
		return nil, nil, err
	}
	if !stop() {
		resp.Body.Close()
		return nil, nil, context.Cause(r.Context())
	}
	_ = wc.SetDeadline(time.Time{})
	return resp, br, nil
}

// writeUpgradeHead writes the upgrade request as relayed to addr: the same
// head whether it goes to the worker or is handed over with the socket.
func (p *Proxy) writeUpgradeHead(bw *bufio.Writer, r *http.Request, id, addr string, hopKey []byte) {
	hd := p.newHead(r, id, http.MethodGet, addr, hopKey)
	hd.write(bw, r.Header, "Connection: Upgrade\r\nUpgrade: websocket\r\n") // an upgrade GET never carries a body
}

// relayRefusal passes a worker's non-101 answer to the client as an ordinary
// HTTP response (the client connection stays usable).
func (p *Proxy) relayRefusal(w http.ResponseWriter, resp *http.Response, wc net.Conn, id string) {
	defer resp.Body.Close()
	_ = wc.SetReadDeadline(time.Now().Add(p.cfg.HandshakeTimeout))
	h := w.Header()
	conn := connectionTokens(resp.Header)
	for k, v := range resp.Header {
		if !edge.HopByHop(k) && !conn[k] {
			h[k] = v
		}
	}
	h.Set("X-Request-Id", id)
	w.WriteHeader(resp.StatusCode)
	// Bounded in size and time: this is an error page, not a download.
	_, _ = io.Copy(w, io.LimitReader(resp.Body, 1<<20))
}

// finishHandshake writes the 101 to the client and hands over any bytes
// either side's buffered reader already consumed past the headers.
func (p *Proxy) finishHandshake(cc net.Conn, cbr *bufio.ReadWriter, wc net.Conn, wbr *bufio.Reader, resp *http.Response, id string) error {
	_ = wc.SetDeadline(time.Now().Add(p.cfg.HandshakeTimeout))
	_ = cc.SetDeadline(time.Now().Add(p.cfg.HandshakeTimeout))
	defer wc.SetDeadline(time.Time{})
	defer cc.SetDeadline(time.Time{})

	resp.Header.Set("X-Request-Id", id)
	bw := cbr.Writer
	bw.WriteString("HTTP/1.1 " + resp.Status + "\r\n")
	if err := resp.Header.Write(bw); err != nil {
		return err
	}
	bw.WriteString("\r\n")
	if n := wbr.Buffered(); n > 0 {
		b, _ := wbr.Peek(n)
		bw.Write(b)
		p.st.bytesDown.Add(uint64(n))
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if n := cbr.Reader.Buffered(); n > 0 {
		b, _ := cbr.Reader.Peek(n)
		if _, err := wc.Write(b); err != nil {
			return err
		}
		p.st.bytesUp.Add(uint64(n))
	}
	return nil
}
