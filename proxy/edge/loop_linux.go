//go:build linux

package edge

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/cloudbrowser-go/cloudbrowser/internal/handoff"
	"github.com/cloudbrowser-go/cloudbrowser/internal/urlkind"
)

// Variables, so tests can shorten them.
var (
	// edgeHeadTimeout bounds a request head's arrival, as the server's
	// ReadHeaderTimeout does.
	edgeHeadTimeout = 10 * time.Second
	// edgeIdleTimeout closes a keep-alive client that sends nothing.
	edgeIdleTimeout = 2 * time.Minute
)

const (
	// edgeUpIdle closes a pooled worker connection unused this long.
	edgeUpIdle = 90 * time.Second
	// edgeOutHigh pauses reading a worker's answer while this much of it
	// waits for a slow client.
	edgeOutHigh = 256 << 10
	// edgeMaxPooled bounds a loop's idle connections per worker.
	edgeMaxPooled = 128
)

// Edge is one listener's event loops.
type Edge struct {
	cfg      Config
	host     Host
	log      zerolog.Logger
	ln       net.Listener
	hand     *handoffListener
	loops    []*loop
	fin      chan struct{} // closed when every loop has ended
	stopping atomic.Bool
	killing  atomic.Bool
	addrs    workerAddrs

	wakeMu sync.Mutex // the loops' eventfds stay open until the last loop ended
	ended  bool
}

// Start starts the event loops on ln's socket and returns them with the
// listener net/http serves from: what the edge hands over, and ln's
// closing. It returns nil and ln itself when the edge cannot run.
func Start(ln net.Listener, cfg Config) (*Edge, net.Listener) {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return nil, ln
	}
	raw, err := tl.SyscallConn()
	if err != nil {
		return nil, ln
	}
	e := &Edge{cfg: cfg, host: cfg.Host, log: cfg.Log, ln: ln, fin: make(chan struct{}),
		addrs: workerAddrs{dialTimeout: cfg.DialTimeout}}
	n := cfg.Loops
	if n <= 0 {
		n = max(1, runtime.GOMAXPROCS(0)/2)
	}
	var lerr error
	if cerr := raw.Control(func(fd uintptr) {
		for i := 0; i < n && lerr == nil; i++ {
			var l *loop
			l, lerr = newLoop(e, int(fd))
			e.loops = append(e.loops, l) // a failed one too: its descriptors are closed below
		}
	}); cerr != nil || lerr != nil {
		for _, l := range e.loops {
			l.release()
			if l.wake >= 0 {
				unix.Close(l.wake)
			}
		}
		e.log.Warn().AnErr("control", cerr).AnErr("loop", lerr).Msg("edge not started; net/http serves everything")
		return nil, ln
	}
	e.hand = newHandoffListener(ln.Addr(), e.Stop)
	var wg sync.WaitGroup
	for _, l := range e.loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.run()
		}()
	}
	go func() {
		wg.Wait()
		e.wakeMu.Lock()
		e.ended = true
		for _, l := range e.loops {
			unix.Close(l.wake)
		}
		e.wakeMu.Unlock()
		close(e.fin)
	}()
	e.log.Debug().Int("loops", len(e.loops)).Str("addr", ln.Addr().String()).Msg("edge serving")
	return e, e.hand
}

// Stop stops accepting and has the loops finish the answers in flight and
// end; Done is closed when they have.
func (e *Edge) Stop() {
	if e.stopping.CompareAndSwap(false, true) {
		e.wakeAll()
		_ = e.ln.Close()
		_ = e.hand.Close()
	}
}

// Kill stops the edge and has the loops close every connection at once.
func (e *Edge) Kill() {
	e.killing.Store(true)
	e.Stop()
	e.wakeAll()
}

// Done is closed when every loop has ended.
func (e *Edge) Done() <-chan struct{} { return e.fin }

func (e *Edge) wakeAll() {
	e.wakeMu.Lock()
	defer e.wakeMu.Unlock()
	if e.ended {
		return
	}
	one := []byte{1, 0, 0, 0, 0, 0, 0, 0}
	for _, l := range e.loops {
		_, _ = unix.Write(l.wake, one)
	}
}

// econn is one connection of a loop: a client's or a worker's.
type econn struct {
	fd       int
	up       bool
	in, out  []byte
	events   uint32
	deadline time.Time
	ex       *edgeEx

	// client side
	exch    edgeEx // the exchange in flight is this one (ex == &exch)
	ip      string
	req     edgeReq
	hbuf    []byte // the relayed request head, kept for a second attempt
	closing bool   // close once out is written
	waiting bool   // a request head has started arriving

	// worker side
	addr       string
	connecting bool
	paused     bool
	pooled     bool
}

// loop is one event loop: its own epoll set, its own accept on the shared
// listening socket, its own pool of worker connections.
type loop struct {
	e        *Edge
	ep       epollSet
	lfd      int
	wake     int
	conns    map[int]*econn
	idle     map[string][]*econn
	clients  int
	draining bool
	now      time.Time
	swept    time.Time
	acceptAt time.Time // accepting paused until then (out of descriptors)
	rbuf     []byte
	wbuf     []byte
	addrs    loopAddrs

	postMu sync.Mutex
	posted []edgeDone // off-loop work done, for the loop to continue
	gone   []string   // workers declared dead, whose exchanges end
}

func newLoop(e *Edge, lfd int) (*loop, error) {
	l := &loop{e: e, ep: epollSet{fd: -1}, lfd: -1, wake: -1, conns: map[int]*econn{}, idle: map[string][]*econn{},
		rbuf: make([]byte, 64<<10), addrs: loopAddrs{shared: &e.addrs, literal: map[string]unix.Sockaddr{}}}
	var err error
	if err = l.ep.open(); err != nil {
		return l, err
	}
	if l.lfd, err = unix.FcntlInt(uintptr(lfd), unix.F_DUPFD_CLOEXEC, 0); err != nil {
		return l, err
	}
	if l.wake, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		return l, err
	}
	if err = l.ep.addListener(l.lfd); err != nil {
		return l, err
	}
	return l, l.ep.add(l.wake, unix.EPOLLIN)
}

// release closes the loop's epoll set and listening socket; its eventfd
// is the edge's to close (wakeAll may still write to it).
func (l *loop) release() {
	l.ep.close()
	if l.lfd >= 0 {
		unix.Close(l.lfd)
	}
	l.lfd = -1
}

func (l *loop) run() {
	defer l.release()
	evs := make([]unix.EpollEvent, 256)
	l.swept = time.Now()
	l.now = l.swept
	for {
		// Ready events are taken without a scheduled call; only an idle
		// loop waits, parked (epollSet says why).
		n, err := l.ep.poll(evs), error(nil)
		if n == 0 {
			wait := time.Second
			if !l.acceptAt.IsZero() {
				wait = 100 * time.Millisecond
			}
			n, err = l.ep.wait(evs, l.now.Add(wait))
		}
		if err != nil {
			l.e.log.Error().Err(err).Msg("edge: wait for events")
			l.closeAll()
			return
		}
		l.now = time.Now()
		for _, ev := range evs[:max(n, 0)] {
			switch fd := int(ev.Fd); fd {
			case l.lfd:
				l.accept()
			case l.wake:
				var b [8]byte
				_, _ = unix.Read(l.wake, b[:])
				l.takePosted()
			default:
				c := l.conns[fd]
				if c == nil {
					continue
				}
				if ev.Events&(unix.EPOLLOUT|unix.EPOLLERR|unix.EPOLLHUP) != 0 && c.events&unix.EPOLLOUT != 0 {
					l.writable(c)
				}
				if ev.Events&(unix.EPOLLIN|unix.EPOLLERR|unix.EPOLLHUP) != 0 && l.conns[fd] == c && c.events&unix.EPOLLIN != 0 {
					l.readable(c)
				}
			}
		}
		if l.e.killing.Load() {
			l.closeAll()
			return
		}
		if l.e.stopping.Load() && !l.draining {
			l.drain()
		}
		if !l.acceptAt.IsZero() && !l.now.Before(l.acceptAt) && !l.draining {
			if l.ep.addListener(l.lfd) == nil {
				l.acceptAt = time.Time{}
			}
		}
		if l.now.Sub(l.swept) >= time.Second {
			l.sweep()
		}
		if l.draining && l.clients == 0 {
			l.closeAll()
			return
		}
	}
}

// drain stops accepting and closes every client not in the middle of an
// answer; those close when their answer is out.
func (l *loop) drain() {
	l.draining = true
	_ = l.ep.del(l.lfd)
	for _, c := range l.conns {
		switch {
		case c.up && c.ex == nil:
			l.closeUp(c)
		case !c.up && c.ex == nil && len(c.out) == 0:
			l.closeClient(c)
		case !c.up:
			c.closing = true
		}
	}
}

func (l *loop) closeAll() {
	for _, c := range l.conns {
		if c.up {
			l.closeUp(c)
		} else {
			l.closeClient(c)
		}
	}
}

// sweep enforces the timeouts, once a second.
func (l *loop) sweep() {
	l.swept = l.now
	for _, c := range l.conns {
		if c.deadline.IsZero() || l.now.Before(c.deadline) {
			continue
		}
		switch {
		case c.up && c.connecting:
			l.upFailed(c.ex, &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded})
		case c.up && c.pooled:
			l.closeUp(c)
		case !c.up && c.ex == nil && len(c.out) == 0:
			l.closeClient(c)
		}
	}
}

func (l *loop) accept() {
	for i := 0; i < 64; i++ {
		fd, sa, err := unix.Accept4(l.lfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		switch {
		case err == unix.EAGAIN:
			return
		case err == unix.ECONNABORTED || err == unix.EINTR:
			continue
		case err != nil:
			// Out of descriptors, most likely. The socket stays readable, so
			// accepting pauses instead of spinning on the same error.
			l.e.log.Warn().Err(err).Msg("edge: accept failed; pausing accepts for 100ms")
			if l.ep.del(l.lfd) == nil {
				l.acceptAt = l.now.Add(100 * time.Millisecond)
			}
			return
		}
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		keepAlive(fd, 15)
		c := &econn{fd: fd, ip: sockaddrIP(sa), deadline: l.now.Add(edgeHeadTimeout)}
		if !l.register(c, unix.EPOLLIN) {
			continue
		}
		l.clients++
	}
}

// keepAlive turns TCP keep-alives on as net's listeners and dialers do.
func keepAlive(fd, secs int) {
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1)
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, secs)
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, secs)
}

func sockaddrIP(sa unix.Sockaddr) string {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrFrom4(a.Addr).String()
	case *unix.SockaddrInet6:
		return netip.AddrFrom16(a.Addr).Unmap().String()
	}
	return ""
}

func (l *loop) register(c *econn, events uint32) bool {
	if err := l.ep.add(c.fd, events); err != nil {
		unix.Close(c.fd)
		return false
	}
	c.events = events
	l.conns[c.fd] = c
	return true
}

func (l *loop) closeClient(c *econn) {
	if l.conns[c.fd] != c {
		return
	}
	delete(l.conns, c.fd)
	l.clients--
	unix.Close(c.fd) // also leaves the epoll set: nobody else holds it
}

func (l *loop) closeUp(u *econn) {
	if l.conns[u.fd] != u {
		return
	}
	if u.pooled {
		s := l.idle[u.addr]
		for i, x := range s {
			if x == u {
				l.idle[u.addr] = append(s[:i], s[i+1:]...)
				break
			}
		}
		u.pooled = false
	}
	delete(l.conns, u.fd)
	unix.Close(u.fd)
}

// write sends b now as far as the socket takes it and queues the rest.
func (l *loop) write(c *econn, b []byte) error {
	if len(c.out) == 0 && !c.connecting {
		for len(b) > 0 {
			n, err := rawWrite(c.fd, b)
			if err == unix.EINTR {
				continue
			}
			if err == unix.EAGAIN {
				break
			}
			if err != nil {
				return err
			}
			b = b[n:]
		}
	}
	if len(b) > 0 {
		c.out = append(c.out, b...)
		l.ep.want(c)
	}
	return nil
}

func (l *loop) readable(c *econn) {
	if c.up {
		l.upReadable(c)
		return
	}
	n, err := rawRead(c.fd, l.rbuf)
	if err == unix.EAGAIN || err == unix.EINTR {
		return
	}
	if n <= 0 || err != nil {
		l.clientGone(c)
		return
	}
	c.in = append(c.in, l.rbuf[:n]...)
	if c.ex == nil && len(c.out) == 0 {
		l.next(c)
	} else {
		l.ep.want(c)
	}
}

// clientGone: the client closed or broke its connection; an answer in
// flight is abandoned with its worker connection.
func (l *loop) clientGone(c *econn) {
	if ex := c.ex; ex != nil {
		if ex.u != nil {
			l.closeUp(ex.u)
		}
		c.ex = nil
	}
	l.closeClient(c)
}

// next starts the client's next request if its head is in.
func (l *loop) next(c *econn) {
	if c.closing {
		l.closeClient(c)
		return
	}
	if len(c.in) == 0 {
		c.waiting = false
		c.deadline = l.now.Add(edgeIdleTimeout)
		l.ep.want(c)
		return
	}
	err := parseEdgeRequest(c.in, &c.req)
	switch {
	case err == errIncomplete:
		if !c.waiting {
			c.waiting = true
			c.deadline = l.now.Add(edgeHeadTimeout)
		}
		l.ep.want(c)
		return
	case err != nil:
		l.handoff(c, string(err.(edgeHandoff)))
		return
	}
	c.waiting = false
	l.start(c)
}

// start relays the parsed request c.req, answers it with the proxy's own
// page, or hands c over. A route the router cannot give at once, and a
// worker host name not yet resolved, are waited for off the loop.
func (l *loop) start(c *econn) {
	e := l.e
	r := &c.req
	method := "GET"
	if r.head1 {
		method = "HEAD"
	}
	// One string of the target serves the route (its path) and the
	// relayed head (all of it).
	uri := string(r.target)
	path, _, _ := strings.Cut(uri, "?")
	t := urlkind.Classify(method, path, false)
	switch t.Kind {
	case urlkind.KindInvalid, urlkind.KindReserved, urlkind.KindWebSocket:
		l.handoff(c, hoTarget)
		return
	}
	id := e.cfg.IDs.For(string(r.requestID))
	e.cfg.Requests.Add(1)
	e.cfg.Stats.requests.Add(1)
	// The client's one exchange struct is reused, and with it the answer
	// parser's slices: nothing per request is left for the collector.
	ex := &c.exch
	*ex = edgeEx{c: c, seq: ex.seq + 1, id: id, method: method, uri: uri, head1: r.head1, cliClose: r.close, t: t,
		page: IsPage(t.Kind), resp: edgeResp{keep: ex.resp.keep[:0], conn: ex.resp.conn[:0]}}
	c.ex = ex
	seq := ex.seq
	if t.Kind == urlkind.KindHome {
		req, rec := ex.pageRequest()
		go func() {
			e.host.ServeHome(rec, req, id)
			l.post(edgeDone{ex: ex, seq: seq, rec: rec})
		}()
		return
	}
	if ir := e.cfg.Instant; ir != nil {
		t0 := time.Now()
		if route, answered, err := ir.RouteNow(t); answered {
			d := edgeDone{ex: ex, seq: seq, route: route, err: err, dur: time.Since(t0)}
			if err != nil || route.Addr == "" {
				l.routed(d)
				return
			}
			if d.sa = l.addrs.sockaddr(route.Addr); d.sa != nil {
				l.routed(d)
				return
			}
			go func(d edgeDone) { // resolve the worker's host name (d copied: the usual case stays off the heap)
				d.sa = e.addrs.resolve(d.route.Addr)
				l.post(d)
			}(d)
			return
		}
	}
	go func() {
		t0 := time.Now()
		d := edgeDone{ex: ex, seq: seq}
		d.route, d.err = e.host.Route(context.Background(), t)
		d.dur = time.Since(t0)
		if d.err == nil && d.route.Addr != "" {
			d.sa = e.addrs.resolve(d.route.Addr)
		}
		l.post(d)
	}()
}

// edgeDone is the result of work done off the loop for a request.
type edgeDone struct {
	ex    *edgeEx
	seq   uint64
	route Route
	err   error
	dur   time.Duration
	sa    unix.Sockaddr
	rec   *pageRecorder // a page to answer with instead
	// paired: a worker connection over a unix socket pair was asked for
	// (pair); upFD is its end, -1 if the worker did not take the other.
	paired bool
	upFD   int
}

// closePair closes the pair's end made for d when nothing will use it.
func (d edgeDone) closePair() {
	if d.paired && d.upFD >= 0 {
		unix.Close(d.upFD)
	}
}

// post hands d to the loop; dropped if the loop has ended.
func (l *loop) post(d edgeDone) {
	e := l.e
	e.wakeMu.Lock()
	defer e.wakeMu.Unlock()
	if e.ended {
		d.closePair()
		return
	}
	l.postMu.Lock()
	l.posted = append(l.posted, d)
	l.postMu.Unlock()
	_, _ = unix.Write(l.wake, []byte{1, 0, 0, 0, 0, 0, 0, 0})
}

// CloseWorker ends the exchanges in flight with a worker the master
// declared dead: every loop ends its exchanges with worker wid (an answer
// not begun gets the moving page).
func (e *Edge) CloseWorker(wid string) {
	e.wakeMu.Lock()
	defer e.wakeMu.Unlock()
	if e.ended {
		return
	}
	for _, l := range e.loops {
		l.postMu.Lock()
		l.gone = append(l.gone, wid)
		l.postMu.Unlock()
		_, _ = unix.Write(l.wake, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	}
}

// endExchangesWith ends the exchanges in flight with worker wid: a worker
// the master declared dead (stalled, cut off) may never answer, and its
// instances are placed elsewhere; the client gets the moving page, or is
// cut off if the answer had begun.
func (l *loop) endExchangesWith(wid string) {
	var ended []*edgeEx
	for _, c := range l.conns {
		if c.up && c.ex != nil && c.ex.route.WorkerID == wid {
			ended = append(ended, c.ex)
		}
	}
	for _, ex := range ended {
		ex.retried = true // not sent again to the same worker
		l.upFailed(ex, ErrWorkerDead)
	}
}

// takePosted continues the requests whose off-loop work is done.
func (l *loop) takePosted() {
	l.postMu.Lock()
	ds, gone := l.posted, l.gone
	l.posted, l.gone = nil, nil
	l.postMu.Unlock()
	for _, wid := range gone {
		l.endExchangesWith(wid)
	}
	for _, d := range ds {
		c := d.ex.c
		if l.conns[c.fd] != c || c.ex != d.ex || d.ex.seq != d.seq {
			d.closePair()
			continue // the client left meanwhile
		}
		switch {
		case d.rec != nil:
			l.page(d.ex, d.rec)
		case d.paired:
			l.sendPaired(d)
		default:
			l.routed(d)
		}
	}
}

// routed continues a request once its route is known.
func (l *loop) routed(d edgeDone) {
	e, ex, c := l.e, d.ex, d.ex.c
	ex.routeDur = d.dur
	if d.err != nil || d.route.Addr == "" {
		req, rec := ex.pageRequest()
		e.host.RouteError(rec, req, ex.id, ex.t, d.route, d.err)
		l.page(ex, rec)
		return
	}
	var key []byte
	if e.cfg.HopKey != nil {
		if key = e.cfg.HopKey(); len(key) == 0 {
			req, rec := ex.pageRequest()
			e.host.NoHopKey(rec, req, ex.id)
			l.page(ex, rec)
			return
		}
	}
	ex.addr, ex.route = d.route.Addr, d.route
	if d.sa == nil {
		l.upFailed(ex, &net.OpError{Op: "dial", Net: "tcp", Err: fmt.Errorf("cannot resolve %q", d.route.Addr)})
		return
	}
	c.hbuf = ex.requestHead(c.hbuf[:0], key, l.now, e.cfg.PublicHTTPS)
	e.log.Debug().Str("request_id", ex.id).Str("kind", ex.t.Kind.String()).Str("app", ex.t.App).
		Str("instance", ex.t.InstanceID).Str("worker", d.route.WorkerID).Str("method", ex.method).Msg("forward")
	l.send(ex, d.route.Addr, d.sa)
}

// page answers ex with a page the proxy rendered.
func (l *loop) page(ex *edgeEx, rec *pageRecorder) {
	c := ex.c
	ex.cliClose = ex.cliClose || l.draining
	ex.relayed = true
	if err := l.write(c, rec.answer(ex.head1, ex.cliClose)); err != nil {
		l.clientGone(c)
		return
	}
	l.finish(ex)
}

// send writes the request on a pooled worker connection or a new one: a
// unix socket pair to a worker on this host, else TCP.
func (l *loop) send(ex *edgeEx, addr string, sa unix.Sockaddr) {
	if s := l.idle[addr]; len(s) > 0 && !ex.retried {
		u := s[len(s)-1]
		l.idle[addr] = s[:len(s)-1]
		u.pooled, u.deadline = false, time.Time{}
		ex.reused = true
		l.sendOn(ex, u)
		return
	}
	if !ex.retried && l.e.host.CanHandOff(ex.route) {
		l.pair(ex, sa)
		return
	}
	l.dialSend(ex, addr, sa)
}

// dialSend sends ex's request on a new TCP connection to addr.
func (l *loop) dialSend(ex *edgeEx, addr string, sa unix.Sockaddr) {
	u, err := l.dial(addr, sa)
	if err != nil {
		ex.u = nil
		l.upFailed(ex, err)
		return
	}
	ex.reused = false
	l.sendOn(ex, u)
}

// sendOn writes ex's request head on the worker connection u.
func (l *loop) sendOn(ex *edgeEx, u *econn) {
	ex.u, u.ex = u, ex
	if err := l.write(u, ex.c.hbuf); err != nil {
		l.upFailed(ex, err)
		return
	}
	l.ep.want(ex.c)
}

// pair connects to a worker on this host without TCP: one end of a unix
// socket pair is handed to the worker's handoff socket (internal/handoff),
// which serves it like a connection it accepted, and the other end is the
// loop's worker connection, pooled as any. A unix socket costs both sides
// less than loopback TCP per request (docs/benchmarks.md, "HTTP"). The
// handoff waits for the worker's acknowledgement, so it runs off the loop;
// sendPaired continues. A worker that does not take it is reached over TCP,
// and its handoff socket is left alone for a while (as for WebSockets).
func (l *loop) pair(ex *edgeEx, sa unix.Sockaddr) {
	e, seq, route := l.e, ex.seq, ex.route
	go func() {
		d := edgeDone{ex: ex, seq: seq, route: route, sa: sa, paired: true, upFD: -1}
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			theirs := os.NewFile(uintptr(fds[1]), "worker-pair")
			err = handoff.Send(context.Background(), route.Handoff, theirs, nil)
			theirs.Close() // the worker has its own descriptor now, or nothing
			if err == nil {
				d.upFD = fds[0]
				e.cfg.WorkerPairs.Add(1)
			} else {
				unix.Close(fds[0])
			}
		}
		if err != nil {
			e.host.HandoffFailed(route.Handoff)
			e.log.Warn().Err(err).Str("socket", route.Handoff).Str("worker", route.WorkerID).
				Msg("worker connection over a unix socket failed: using TCP")
		}
		l.post(d)
	}()
}

// sendPaired sends ex's request on the connection pair made, or over TCP
// if it made none.
func (l *loop) sendPaired(d edgeDone) {
	ex := d.ex
	if d.upFD < 0 {
		l.dialSend(ex, ex.addr, d.sa)
		return
	}
	u := &econn{fd: d.upFD, up: true, addr: ex.addr}
	if !l.register(u, unix.EPOLLIN) {
		unix.Close(d.upFD)
		l.upFailed(ex, errors.New("edge: epoll_ctl"))
		return
	}
	ex.reused = false
	l.sendOn(ex, u)
}

// dial starts a non-blocking connect; writable() completes it.
func (l *loop) dial(addr string, sa unix.Sockaddr) (*econn, error) {
	family := unix.AF_INET
	if _, v6 := sa.(*unix.SockaddrInet6); v6 {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	keepAlive(fd, 30)
	u := &econn{fd: fd, up: true, addr: addr}
	err = unix.Connect(fd, sa)
	switch {
	case err == unix.EINPROGRESS:
		u.connecting = true
		u.deadline = l.now.Add(l.e.cfg.DialTimeout)
	case err != nil:
		unix.Close(fd)
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", err)}
	}
	events := uint32(unix.EPOLLIN)
	if u.connecting {
		events = unix.EPOLLOUT
	}
	if !l.register(u, events) {
		return nil, errors.New("edge: epoll_ctl")
	}
	return u, nil
}

func (l *loop) writable(c *econn) {
	if c.connecting {
		c.connecting = false
		c.deadline = time.Time{}
		if serr, err := unix.GetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil || serr != 0 {
			if err == nil {
				err = &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", unix.Errno(serr))}
			}
			l.upFailed(c.ex, err)
			return
		}
	}
	for len(c.out) > 0 {
		n, err := rawWrite(c.fd, c.out)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			break
		}
		if err != nil {
			if c.up {
				l.upFailed(c.ex, err)
			} else {
				l.clientGone(c)
			}
			return
		}
		c.out = c.out[:copy(c.out, c.out[n:])]
	}
	l.ep.want(c)
	if c.up || len(c.out) > 0 {
		return
	}
	if ex := c.ex; ex != nil && ex.u != nil && ex.u.paused {
		ex.u.paused = false
		l.ep.want(ex.u)
	} else if c.ex == nil {
		l.next(c)
	}
}

func (l *loop) upReadable(u *econn) {
	n, err := rawRead(u.fd, l.rbuf)
	if err == unix.EAGAIN || err == unix.EINTR {
		return
	}
	ex := u.ex
	if ex == nil { // pooled: the worker closed it, or spoke out of turn
		l.closeUp(u)
		return
	}
	if n <= 0 || err != nil {
		if err == nil {
			err = errUpEOF
		}
		l.upFailed(ex, err)
		return
	}
	ex.answered = true
	if ex.haveHead {
		l.body(ex, l.rbuf[:n], nil)
		return
	}
	u.in = append(u.in, l.rbuf[:n]...)
	for {
		err := parseEdgeResponse(u.in, &ex.resp)
		if err == errIncomplete {
			return
		}
		if err == nil && ex.resp.status == 101 {
			err = ErrSwitched
		}
		if err != nil {
			l.upFailed(ex, err)
			return
		}
		if ex.resp.status >= 200 {
			break
		}
		u.in = u.in[:copy(u.in, u.in[ex.resp.head:])] // informational: skipped
	}
	ex.haveHead = true
	rs := &ex.resp
	if rs.status == http.StatusMisdirectedRequest {
		l.e.host.Misdirected(ex.t, rs.status)
	}
	switch {
	case ex.head1 || rs.status == 204 || rs.status == 304:
		ex.mode = bodyNone
	case rs.chunked:
		ex.mode = bodyChunked
	case rs.length >= 0:
		ex.mode, ex.left = bodyLength, rs.length
	default:
		ex.mode, ex.cliClose = bodyEOF, true
	}
	ex.upClose = rs.close
	l.wbuf = ex.answerHead(l.wbuf[:0], l.draining)
	l.body(ex, u.in[rs.head:], l.wbuf)
	u.in = u.in[:0] // relayed or queued: whatever it held is written out
}

var errUpEOF = errors.New("worker closed the connection")

// body relays b, a part of the answer's body, after head (the answer's
// head with the body's first part: one write), and ends the exchange with
// the body's last byte.
func (l *loop) body(ex *edgeEx, b, head []byte) {
	c, u := ex.c, ex.u
	var k int
	switch ex.mode {
	case bodyNone:
		k = 0
	case bodyLength:
		k = int(min(int64(len(b)), ex.left))
		ex.left -= int64(k)
	case bodyChunked:
		var err error
		if k, err = ex.cs.scan(b); err != nil {
			l.upFailed(ex, err)
			return
		}
	case bodyEOF:
		k = len(b)
	}
	out := b[:k]
	if head != nil {
		out = append(head, out...)
		l.wbuf = out[:0] // keeps the grown buffer for the next answer
	}
	if len(out) > 0 {
		ex.relayed = true
		if err := l.write(c, out); err != nil {
			l.clientGone(c)
			return
		}
	}
	if k < len(b) {
		ex.upClose = true // bytes past the answer: the connection is out of step
	}
	switch {
	case ex.mode == bodyNone, ex.mode == bodyLength && ex.left == 0, ex.mode == bodyChunked && ex.cs.done():
		l.finish(ex)
	case len(c.out) > edgeOutHigh && !u.paused:
		u.paused = true
		l.ep.want(u)
	}
}

// finish ends an exchange whose answer is complete.
func (l *loop) finish(ex *edgeEx) {
	c, u := ex.c, ex.u
	c.ex = nil
	switch {
	case u == nil: // a page of the proxy's own
	case ex.upClose || l.draining || len(l.idle[u.addr]) >= edgeMaxPooled:
		u.ex = nil
		l.closeUp(u)
	default:
		u.ex = nil
		u.in, u.paused, u.pooled = u.in[:0], false, true
		u.deadline = l.now.Add(edgeUpIdle)
		l.idle[u.addr] = append(l.idle[u.addr], u)
		l.ep.want(u)
	}
	c.in = c.in[:copy(c.in, c.in[c.req.head:])]
	if ex.cliClose || l.draining {
		c.closing = true
	}
	if len(c.out) == 0 {
		l.next(c)
	} else {
		l.ep.want(c)
	}
}

// upFailed handles a failed worker exchange: an answer of unknown length
// ends with the worker's close; a request on a reused connection that got
// no answer is sent again once; a request whose answer has not begun gets
// the proxy's page for the failure (as net/http's path answers it); an
// answer cut off mid-way cuts the client off, so it cannot pass for a
// complete one.
func (l *loop) upFailed(ex *edgeEx, err error) {
	if ex == nil {
		return
	}
	c := ex.c
	if u := ex.u; u != nil {
		u.ex = nil
		l.closeUp(u)
		ex.u = nil
	}
	switch {
	case ex.haveHead && ex.mode == bodyEOF && err == errUpEOF:
		l.finish(ex) // the client closes after it (cliClose)
	case ex.relayed:
		l.e.cfg.UpstreamErrors.Add(1)
		l.e.log.Warn().Str("request_id", ex.id).Err(err).Msg("worker answer cut off")
		c.ex = nil
		l.closeClient(c)
	case ex.reused && !ex.answered && !ex.retried && !IsTimeout(err):
		ex.retried = true
		if sa := l.addrs.sockaddr(ex.addr); sa != nil {
			l.send(ex, ex.addr, sa)
			return
		}
		fallthrough
	default:
		if IsDialError(err) {
			l.e.addrs.forget(ex.addr)
		}
		if Unreachable(err) {
			for _, x := range append([]*econn(nil), l.idle[ex.addr]...) {
				l.closeUp(x) // the worker may be gone: do not offer them to the next request
			}
		}
		req, rec := ex.pageRequest()
		l.e.host.UpstreamFailed(rec, req, ex.id, ex.t, ex.route, err)
		l.page(ex, rec)
	}
}

// handoff gives c, with every byte read from it so far, to net/http.
func (l *loop) handoff(c *econn, reason string) {
	delete(l.conns, c.fd)
	l.clients--
	// Explicitly: the registration would outlive this descriptor through
	// the duplicate FileConn makes.
	_ = l.ep.del(c.fd)
	l.e.cfg.Stats.handoff(reason)
	f := os.NewFile(uintptr(c.fd), "edge")
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		l.e.log.Warn().Err(err).Msg("edge: hand-off")
		return
	}
	l.e.hand.give(&handoff.PrefixedConn{Conn: nc, Pre: c.in})
}
