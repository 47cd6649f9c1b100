//go:build linux

package edge

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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
	addrs    sync.Map // worker address → netip.AddrPort

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
	e := &Edge{cfg: cfg, host: cfg.Host, log: cfg.Log, ln: ln, fin: make(chan struct{})}
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

// sockaddr returns the worker address to connect to if it is known
// without asking DNS; nil means resolve (off the loop). Each call returns
// a new value: connect(2)'s wrapper writes into it.
func (e *Edge) sockaddr(addr string) unix.Sockaddr {
	if v, ok := e.addrs.Load(addr); ok {
		return toSockaddr(v.(netip.AddrPort))
	}
	if ap, err := netip.ParseAddrPort(addr); err == nil {
		e.addrs.Store(addr, ap)
		return toSockaddr(ap)
	}
	return nil
}

// sockaddr is the edge's sockaddr, kept by the loop for an IP literal: a
// request to a known worker allocates nothing for it.
func (l *loop) sockaddr(addr string) unix.Sockaddr {
	if sa, ok := l.literal[addr]; ok {
		return sa
	}
	sa := l.e.sockaddr(addr)
	if _, err := netip.ParseAddrPort(addr); err == nil && sa != nil {
		if len(l.literal) >= maxLiteral {
			clear(l.literal)
		}
		l.literal[addr] = sa
	}
	return sa
}

// maxLiteral bounds a loop's literal addresses (workers come and go): the
// map starts again when full.
const maxLiteral = 1024

// resolve is sockaddr with DNS; a failed connection forgets a resolved
// name (upFailed), so a worker that moved is found again.
func (e *Edge) resolve(addr string) unix.Sockaddr {
	if sa := e.sockaddr(addr); sa != nil {
		return sa
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.DialTimeout)
	defer cancel()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	pn, perr := strconv.ParseUint(port, 10, 16)
	if err != nil || perr != nil || len(ips) == 0 {
		return nil
	}
	ap := netip.AddrPortFrom(ips[0], uint16(pn))
	e.addrs.Store(addr, ap)
	return toSockaddr(ap)
}

func toSockaddr(ap netip.AddrPort) unix.Sockaddr {
	if a := ap.Addr().Unmap(); a.Is4() {
		return &unix.SockaddrInet4{Addr: a.As4(), Port: int(ap.Port())}
	}
	return &unix.SockaddrInet6{Addr: ap.Addr().As16(), Port: int(ap.Port())}
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

// edgeEx is one request relayed by a loop.
type edgeEx struct {
	c, u     *econn
	seq      uint64 // tells a reused exchange's requests apart
	id       string
	addr     string // the worker's
	method   string
	uri      string // the request's target
	t        urlkind.Target
	route    Route
	head1    bool // HEAD: the answer has no body
	page     bool // an app page: the answer gets the route's Server-Timing
	routeDur time.Duration
	reused   bool
	retried  bool
	answered bool // a byte of the answer arrived
	relayed  bool // a byte of the answer went to the client
	haveHead bool
	resp     edgeResp
	mode     int
	left     int64
	cs       chunkScan
	upClose  bool // the worker connection cannot be reused
	cliClose bool // the client connection ends after this answer
}

const (
	bodyNone = iota
	bodyLength
	bodyChunked
	bodyEOF
)

// loop is one event loop: its own epoll set, its own accept on the shared
// listening socket, its own pool of worker connections.
type loop struct {
	e        *Edge
	ep, lfd  int
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
	// literal are worker addresses that are IP literals, as connect(2)
	// takes them: they never change, so each is made once per loop (and
	// only the loop's thread uses them).
	literal map[string]unix.Sockaddr

	postMu sync.Mutex
	posted []edgeDone // off-loop work done, for the loop to continue
	gone   []string   // workers declared dead, whose exchanges end

	// An idle loop waits in the Go runtime's poller, on a duplicate of
	// its epoll descriptor (ready when the set has ready events), and not
	// in epoll_wait on a thread of its own: a thread blocked in a system
	// call keeps its P, so the runtime's monitor keeps polling to take it
	// back (a wake-up on the proxy's CPUs per request or more at low load)
	// and every wake pays the way back into Go. Parked, the loop's P is
	// free and the monitor sleeps. Under load the loop never waits: pollNow
	// finds events first.
	park    *os.File
	parkRC  syscall.RawConn
	parkFn  func(uintptr) bool // made once: a closure per wait would allocate
	parkN   int
	parkEvs []unix.EpollEvent
}

func newLoop(e *Edge, lfd int) (*loop, error) {
	l := &loop{e: e, ep: -1, lfd: -1, wake: -1, conns: map[int]*econn{}, idle: map[string][]*econn{},
		rbuf: make([]byte, 64<<10), literal: map[string]unix.Sockaddr{}}
	var err error
	if l.ep, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return l, err
	}
	if l.lfd, err = unix.FcntlInt(uintptr(lfd), unix.F_DUPFD_CLOEXEC, 0); err != nil {
		return l, err
	}
	if l.wake, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		return l, err
	}
	if err = l.watchListener(); err != nil {
		return l, err
	}
	if err = unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, l.wake, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(l.wake)}); err != nil {
		return l, err
	}
	return l, l.openPark()
}

// openPark makes the descriptor an idle loop waits on in the runtime's
// poller: non-blocking, so os.NewFile registers it there (checked: only a
// registered file takes a deadline).
func (l *loop) openPark() error {
	fd, err := unix.FcntlInt(uintptr(l.ep), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("edge: duplicate epoll descriptor: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return fmt.Errorf("edge: epoll descriptor non-blocking: %w", err)
	}
	l.park = os.NewFile(uintptr(fd), "edge-epoll")
	if err := l.park.SetReadDeadline(time.Time{}); err != nil {
		return fmt.Errorf("edge: epoll descriptor not in the runtime's poller: %w", err)
	}
	if l.parkRC, err = l.park.SyscallConn(); err != nil {
		return fmt.Errorf("edge: epoll descriptor: %w", err)
	}
	l.parkFn = func(uintptr) bool {
		l.parkN = pollNow(l.ep, l.parkEvs)
		return l.parkN > 0
	}
	return nil
}

// wait parks the loop until its epoll set has ready events or ms
// milliseconds have passed, and returns the events taken into evs.
func (l *loop) wait(evs []unix.EpollEvent, ms int) (int, error) {
	l.parkEvs, l.parkN = evs, 0
	if err := l.park.SetReadDeadline(l.now.Add(time.Duration(ms) * time.Millisecond)); err != nil {
		return 0, err
	}
	if err := l.parkRC.Read(l.parkFn); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return 0, err
	}
	return l.parkN, nil
}

// watchListener adds the listening socket to the loop's epoll set;
// exclusive: one loop wakes per new connection, not all of them.
func (l *loop) watchListener() error {
	return unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, l.lfd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLEXCLUSIVE, Fd: int32(l.lfd)})
}

// release closes the loop's epoll set and listening socket; its eventfd
// is the edge's to close (wakeAll may still write to it).
func (l *loop) release() {
	if l.park != nil {
		l.park.Close()
		l.park = nil
	}
	for _, fd := range []int{l.lfd, l.ep} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	l.lfd, l.ep = -1, -1
}

func (l *loop) run() {
	defer l.release()
	evs := make([]unix.EpollEvent, 256)
	l.swept = time.Now()
	l.now = l.swept
	for {
		// Ready events are taken without a scheduled call; only an idle
		// loop waits, parked (loop.park says why).
		n, err := pollNow(l.ep, evs), error(nil)
		if n == 0 {
			wait := 1000
			if !l.acceptAt.IsZero() {
				wait = 100
			}
			n, err = l.wait(evs, wait)
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
			if l.watchListener() == nil {
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
	_ = unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, l.lfd, nil)
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
			if unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, l.lfd, nil) == nil {
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
	if err := unix.EpollCtl(l.ep, unix.EPOLL_CTL_ADD, c.fd, &unix.EpollEvent{Events: events, Fd: int32(c.fd)}); err != nil {
		unix.Close(c.fd)
		return false
	}
	c.events = events
	l.conns[c.fd] = c
	return true
}

func (l *loop) setEvents(c *econn, events uint32) {
	if c.events == events {
		return
	}
	if unix.EpollCtl(l.ep, unix.EPOLL_CTL_MOD, c.fd, &unix.EpollEvent{Events: events, Fd: int32(c.fd)}) == nil {
		c.events = events
	}
}

// want sets c's interest from its state: read unless paused (a worker whose
// client is slow; a client that sent far ahead), write while output waits.
func (l *loop) want(c *econn) {
	var ev uint32 = unix.EPOLLIN
	switch {
	case c.up && (c.paused || c.connecting):
		ev = 0
	case !c.up && (c.ex != nil || len(c.out) > 0) && len(c.in) > 2*maxEdgeHead:
		ev = 0
	}
	if len(c.out) > 0 || c.connecting {
		ev |= unix.EPOLLOUT
	}
	l.setEvents(c, ev)
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
		l.want(c)
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
		l.want(c)
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
		l.want(c)
		return
	}
	err := parseEdgeRequest(c.in, &c.req)
	switch {
	case err == errIncomplete:
		if !c.waiting {
			c.waiting = true
			c.deadline = l.now.Add(edgeHeadTimeout)
		}
		l.want(c)
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
		req, rec := l.pageRequest(ex)
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
			if d.sa = l.sockaddr(route.Addr); d.sa != nil {
				l.routed(d)
				return
			}
			go func(d edgeDone) { // resolve the worker's host name (d copied: the usual case stays off the heap)
				d.sa = e.resolve(d.route.Addr)
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
			d.sa = e.resolve(d.route.Addr)
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
		req, rec := l.pageRequest(ex)
		e.host.RouteError(rec, req, ex.id, ex.t, d.route, d.err)
		l.page(ex, rec)
		return
	}
	var key []byte
	if e.cfg.HopKey != nil {
		if key = e.cfg.HopKey(); len(key) == 0 {
			req, rec := l.pageRequest(ex)
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
	c.hbuf = l.requestHead(c.hbuf[:0], ex, key)
	e.log.Debug().Str("request_id", ex.id).Str("kind", ex.t.Kind.String()).Str("app", ex.t.App).
		Str("instance", ex.t.InstanceID).Str("worker", d.route.WorkerID).Str("method", ex.method).Msg("forward")
	l.send(ex, d.route.Addr, d.sa)
}

// pageRequest is the request as the proxy's page handlers read it, and
// the recorder they write to.
func (l *loop) pageRequest(ex *edgeEx) (*http.Request, *pageRecorder) {
	r := &ex.c.req
	h := make(http.Header, len(r.keep))
	for _, kv := range r.keep {
		h.Add(string(kv[0]), string(kv[1]))
	}
	u, err := url.ParseRequestURI(string(r.target))
	if err != nil {
		u = &url.URL{Path: "/"}
	}
	req := (&http.Request{Method: ex.method, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h,
		Host: string(r.host), RequestURI: string(r.target), RemoteAddr: net.JoinHostPort(ex.c.ip, "0"),
		Body: http.NoBody}).WithContext(context.Background())
	rec := &pageRecorder{h: http.Header{"X-Request-Id": {ex.id}}}
	if ex.page {
		rec.h.Set("Server-Timing", RouteTiming(ex.routeDur))
	}
	return req, rec
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

// requestHead writes the relayed head as the proxy's net/http path does:
// the same own lines, signed by the same code (Head).
func (l *loop) requestHead(b []byte, ex *edgeEx, key []byte) []byte {
	r, method := &ex.c.req, ex.method
	h := Head{Method: method, URI: ex.uri, Host: string(r.host), ForwardedFor: ex.c.ip, Proto: "http", ID: ex.id,
		Key: key, At: l.now}
	if l.e.cfg.PublicHTTPS {
		h.Proto = "https"
	}
	b = append(b, method...)
	b = append(b, ' ')
	b = append(b, r.target...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, r.host...)
	b = append(b, "\r\n"...)
	for _, kv := range r.keep {
		b = append(b, kv[0]...)
		b = append(b, ": "...)
		b = append(b, kv[1]...)
		b = append(b, "\r\n"...)
	}
	if r.teTrailers {
		b = append(b, "Te: trailers\r\n"...)
	}
	return append(h.AppendOwn(b), "\r\n"...)
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
	l.want(ex.c)
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
	l.want(c)
	if c.up || len(c.out) > 0 {
		return
	}
	if ex := c.ex; ex != nil && ex.u != nil && ex.u.paused {
		ex.u.paused = false
		l.want(ex.u)
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
	l.wbuf = l.answerHead(l.wbuf[:0], ex)
	l.body(ex, u.in[rs.head:], l.wbuf)
	u.in = u.in[:0] // relayed or queued: whatever it held is written out
}

var errUpEOF = errors.New("worker closed the connection")

// answerHead writes the client's answer head as the proxy's net/http path
// (relayResponse) does.
func (l *loop) answerHead(b []byte, ex *edgeEx) []byte {
	rs := &ex.resp
	b = append(b, "HTTP/1.1 "...)
	b = append(b, rs.statusRaw...)
	b = append(b, "\r\n"...)
	if ex.page {
		b = appendLine(b, "Server-Timing", RouteTiming(ex.routeDur))
	}
outer:
	for _, h := range rs.keep {
		for _, tok := range rs.conn {
			if asciiEq(h[0], string(tok)) {
				continue outer
			}
		}
		b = append(b, h[0]...)
		b = append(b, ": "...)
		b = append(b, h[1]...)
		b = append(b, "\r\n"...)
	}
	if ex.mode == bodyChunked {
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	}
	if ex.cliClose || l.draining {
		ex.cliClose = true
		b = append(b, "Connection: close\r\n"...)
	}
	b = appendLine(b, "X-Request-Id", ex.id)
	return append(b, "\r\n"...)
}

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
		l.want(u)
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
		l.want(u)
	}
	c.in = c.in[:copy(c.in, c.in[c.req.head:])]
	if ex.cliClose || l.draining {
		c.closing = true
	}
	if len(c.out) == 0 {
		l.next(c)
	} else {
		l.want(c)
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
		if sa := l.sockaddr(ex.addr); sa != nil {
			l.send(ex, ex.addr, sa)
			return
		}
		fallthrough
	default:
		if IsDialError(err) {
			l.e.addrs.Delete(ex.addr)
		}
		if Unreachable(err) {
			for _, x := range append([]*econn(nil), l.idle[ex.addr]...) {
				l.closeUp(x) // the worker may be gone: do not offer them to the next request
			}
		}
		req, rec := l.pageRequest(ex)
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
	_ = unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, c.fd, nil)
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
