package proxy

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"time"
)

// relayChunk is how much one splice round may move before the byte counters
// are updated; large enough to keep the per-chunk cost invisible.
const relayChunk = 1 << 20

// bytePump moves an established WebSocket's bytes both ways between the
// client and the worker, and counts them.
type bytePump struct {
	halfClose time.Duration  // Config.HalfCloseTimeout
	up, down  *atomic.Uint64 // Stats.BytesUp, Stats.BytesDown
}

// run relays both directions until both ended; it closes both conns.
func (bp *bytePump) run(cc, wc net.Conn) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		bp.copyHalf(wc, cc, bp.up)
	}()
	bp.copyHalf(cc, wc, bp.down)
	<-done
	cc.Close()
	wc.Close()
}

// copyHalf copies src to dst. io.Copy between two *net.TCPConn values uses
// splice(2) on Linux, so payload never enters user space. A clean EOF is
// propagated as a half-close and starts the linger timer on the opposite
// direction; an error aborts both.
func (bp *bytePump) copyHalf(dst, src net.Conn, counter *atomic.Uint64) {
	for {
		n, err := io.CopyN(dst, src, relayChunk)
		counter.Add(uint64(n))
		if err == nil {
			continue
		}
		if errors.Is(err, io.EOF) {
			if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
				_ = dst.SetReadDeadline(time.Now().Add(bp.halfClose))
				return
			}
		}
		src.Close()
		dst.Close()
		return
	}
}
