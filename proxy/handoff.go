package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/handoff"
)

// handOff gives a WebSocket upgrade's client connection to its worker on
// this host (internal/handoff), with the head the proxy would have relayed
// (signed as usual): the worker answers the handshake on it and serves it
// from then on, so no byte of the WebSocket passes through the proxy. If
// the worker does not take it, the connection is relayed as it is.
func (p *Proxy) handOff(w http.ResponseWriter, r *http.Request, id string, route Route, hopKey []byte, log zerolog.Logger) (reached bool) {
	cc, cbr, err := http.NewResponseController(w).Hijack()
	if err != nil {
		log.Error().Err(err).Msg("cannot hijack client connection")
		p.page(w, r, id, http.StatusInternalServerError, "Internal error", "The WebSocket could not be established.")
		return false
	}
	_ = cc.SetDeadline(time.Time{})
	var head bytes.Buffer
	bw := bufio.NewWriter(&head)
	p.writeUpgradeHead(bw, r, id, route.Addr, hopKey)
	_ = bw.Flush()
	if n := cbr.Reader.Buffered(); n > 0 { // sent early: the worker reads it after the head
		b, _ := cbr.Reader.Peek(n)
		head.Write(b)
	}
	// Only the socket itself can go (not a connection with bytes of the
	// edge's still to read in front of it).
	if sc, ok := unwrapConn(cc).(syscall.Conn); ok && head.Len() <= handoff.MaxPayload {
		var pid int
		pid, err = handoff.SendToPID(r.Context(), route.Handoff, sc, head.Bytes())
		if err == nil {
			// The socket is the worker's now. The proxy keeps its own
			// descriptor only to end the socket if the master declares
			// that worker dead (CloseWorker).
			if !p.handed.add(unwrapConn(cc), route.WorkerID, pid) {
				log.Debug().Msg("handed websocket not watched: the master's verdict cannot end it")
				cc.Close()
			}
			p.st.wsHandedOff.Add(1)
			log.Debug().Msg("websocket handed to the worker")
			return true
		}
		if r.Context().Err() != nil {
			cc.Close() // the client left
			return false
		}
		p.handoffs.failed(route.Handoff)
		if errors.Is(err, handoff.ErrSent) {
			// The worker may still take it (it is stopped, not gone):
			// relaying it too would put two servers on one socket. End it;
			// the client reconnects.
			shutdown([]net.Conn{unwrapConn(cc)})
			cc.Close()
			log.Warn().Err(err).Str("socket", route.Handoff).Msg("websocket handoff not acknowledged: connection ended")
			return true // perhaps: the worker may have it
		}
		log.Warn().Err(err).Str("socket", route.Handoff).Msg("websocket handoff failed: relaying")
	}
	return p.relayRaw(r.Context(), cc, head.Bytes(), route, log)
}

// relayRaw relays a hijacked upgrade whose head is built: the worker's
// answer, 101 or not, and everything after pass through as bytes. reached
// reports that the worker answered 101.
func (p *Proxy) relayRaw(ctx context.Context, cc net.Conn, head []byte, route Route, log zerolog.Logger) (reached bool) {
	wc, err := p.dialer.DialContext(ctx, "tcp", route.Addr)
	if err != nil {
		p.st.upstreamErrors.Add(1)
		if p.cfg.OnWorkerUnreachable != nil {
			p.cfg.OnWorkerUnreachable(route)
		}
		_, _ = cc.Write([]byte("HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
		cc.Close()
		log.Debug().Err(err).Msg("worker unreachable for a websocket")
		return false
	}
	rl := &relay{worker: wc, workerID: route.WorkerID}
	if !p.flight.track(rl) {
		wc.Close()
		cc.Close()
		return false
	}
	defer p.flight.untrack(rl)
	if !rl.setClient(cc) { // Shutdown closed the relay meanwhile
		cc.Close()
		return false
	}
	if _, err := wc.Write(head); err != nil {
		rl.close()
		return false
	}
	// A stopped worker takes the connection (the kernel does) but never
	// answers: its answer is bounded as a relayed handshake's is, and the
	// client told, instead of waiting for ever.
	_ = wc.SetReadDeadline(time.Now().Add(p.cfg.HandshakeTimeout))
	first := make([]byte, 4096)
	n, err := wc.Read(first)
	if err != nil {
		p.st.upstreamErrors.Add(1)
		if isTimeout(err) {
			_, _ = cc.Write([]byte("HTTP/1.1 504 Gateway Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
		}
		rl.close()
		log.Debug().Err(err).Msg("worker did not answer a relayed websocket upgrade")
		return false
	}
	_ = wc.SetReadDeadline(time.Time{})
	reached = bytes.HasPrefix(first[:n], []byte("HTTP/1.1 101"))
	if _, err := cc.Write(first[:n]); err != nil {
		rl.close()
		return reached
	}
	p.st.wsTotal.Add(1)
	p.pump.run(unwrapConn(cc), wc)
	return reached
}

// shutdown ends each socket for both of its holders, in one shutdown(2)
// call: as two (CloseRead, then CloseWrite), the read half's hang-up woke
// the handed-socket watcher, which closed the proxy's descriptor before
// the write half, so the client never got its FIN and watched a frozen
// screen (TestStalledWorker, under load).
func shutdown(socks []net.Conn) {
	for _, c := range socks {
		sc, ok := c.(syscall.Conn)
		if !ok {
			continue
		}
		if rc, err := sc.SyscallConn(); err == nil {
			// Control holds the descriptor open against a concurrent Close.
			_ = rc.Control(func(fd uintptr) { shutdownFD(fd) })
		}
	}
}
