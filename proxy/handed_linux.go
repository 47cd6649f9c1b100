package proxy

import (
	"errors"
	"net"
	"sync"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// handedSockets keeps the proxy's own descriptor of every WebSocket it
// handed to a worker on this host (handoff.go). The socket is the worker's,
// but when the master declares that worker dead (a stall, a cut) nobody
// there will end it, and its user would watch a frozen screen: the proxy
// shuts it down (CloseWorker), the client engine reconnects and finds the
// instance's new copy. The descriptor must not keep a finished connection
// open, so one goroutine watches them all (epoll, hang-ups only: no data
// is ever read here) and closes each as soon as the connection ends, by
// the client or by the worker (which shuts the socket down before closing:
// internal/handoff.PrefixedConn). The worker process is watched too (a
// pidfd in the same epoll set): when it ends (kill -9, a crash), its
// kernel-closed descriptors would leave the sockets open on the proxy's,
// so the proxy shuts them down itself, master or no master.
type handedSockets struct {
	log zerolog.Logger

	mu      sync.Mutex
	ep      int // -1 until the first socket
	wake    int // eventfd: stops the watcher
	byFD    map[int]*handedSock
	procs   map[int]*workerProc // by pidfd
	byPID   map[int]*workerProc
	stopped bool
	done    chan struct{}
}

type handedSock struct {
	c        net.Conn // the proxy's descriptor of the client's socket
	workerID string
	pid      int // the worker process that took it (0: unknown)
}

// workerProc is a worker process watched through its pidfd.
type workerProc struct {
	pid, pidfd int
	socks      int // handed sockets that name it
}

func newHandedSockets(log zerolog.Logger) *handedSockets {
	return &handedSockets{log: log, ep: -1, wake: -1, byFD: map[int]*handedSock{},
		procs: map[int]*workerProc{}, byPID: map[int]*workerProc{}}
}

// add keeps c (the proxy's descriptor of a socket handed to worker wid);
// false if it cannot be watched (the caller closes it as before).
func (h *handedSockets) add(c net.Conn, wid string, pid int) bool {
	tc, ok := c.(*net.TCPConn) // shutdown needs a TCP socket
	if !ok {
		return false
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return false
	}
	fd := -1
	if raw.Control(func(f uintptr) { fd = int(f) }) != nil || fd < 0 {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return false
	}
	if h.ep < 0 {
		if err := h.startLocked(); err != nil {
			h.log.Warn().Err(err).Msg("cannot watch handed-off websockets")
			return false
		}
	}
	ev := unix.EpollEvent{Events: unix.EPOLLRDHUP | unix.EPOLLET, Fd: int32(fd)}
	if err := unix.EpollCtl(h.ep, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return false
	}
	h.byFD[fd] = &handedSock{c: c, workerID: wid, pid: pid}
	h.watchProcLocked(pid)
	return true
}

// watchProcLocked counts one more socket of worker process pid, watching
// the process from its first.
func (h *handedSockets) watchProcLocked(pid int) {
	if pid <= 0 {
		return
	}
	if wp := h.byPID[pid]; wp != nil {
		wp.socks++
		return
	}
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return // gone already, or no pidfd here: the master's verdict still ends them
	}
	if err := unix.EpollCtl(h.ep, unix.EPOLL_CTL_ADD, pidfd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(pidfd)}); err != nil {
		unix.Close(pidfd)
		return
	}
	wp := &workerProc{pid: pid, pidfd: pidfd, socks: 1}
	h.procs[pidfd], h.byPID[pid] = wp, wp
}

// unwatchProcLocked counts one socket of pid less, and stops watching the
// process with its last (or at once: gone).
func (h *handedSockets) unwatchProcLocked(pid int, gone bool) {
	wp := h.byPID[pid]
	if wp == nil {
		return
	}
	if wp.socks--; wp.socks > 0 && !gone {
		return
	}
	_ = unix.EpollCtl(h.ep, unix.EPOLL_CTL_DEL, wp.pidfd, nil)
	unix.Close(wp.pidfd)
	delete(h.procs, wp.pidfd)
	delete(h.byPID, pid)
}

func (h *handedSockets) startLocked() error {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(ep)
		return err
	}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, wake, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wake)}); err != nil {
		unix.Close(ep)
		unix.Close(wake)
		return err
	}
	h.ep, h.wake, h.done = ep, wake, make(chan struct{})
	go h.watch(ep, wake, h.done)
	return nil
}

// watch closes each watched descriptor whose connection ended, until
// stopped. It blocks in epoll_wait (one thread for all handed sockets).
func (h *handedSockets) watch(ep, wake int, done chan struct{}) {
	defer close(done)
	evs := make([]unix.EpollEvent, 64)
	for {
		n, err := unix.EpollWait(ep, evs, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			h.log.Error().Err(err).Msg("handed-off websocket watch stopped")
			return
		}
		for _, ev := range evs[:n] {
			fd := int(ev.Fd)
			if fd == wake {
				return
			}
			h.mu.Lock()
			if wp, ok := h.procs[fd]; ok {
				// The worker process ended: end its sockets (their hang-ups
				// then close the descriptors).
				gone := h.socksLocked(func(s *handedSock) bool { return s.pid == wp.pid })
				h.unwatchProcLocked(wp.pid, true)
				h.mu.Unlock()
				shutdown(gone)
				h.log.Info().Int("worker_pid", wp.pid).Int("websockets", len(gone)).Msg("worker process ended: its handed websockets closed")
				continue
			}
			s, ok := h.byFD[fd]
			if ok {
				delete(h.byFD, fd)
				_ = unix.EpollCtl(ep, unix.EPOLL_CTL_DEL, fd, nil)
				h.unwatchProcLocked(s.pid, false)
			}
			h.mu.Unlock()
			if ok {
				s.c.Close() // ended: the proxy's descriptor no longer holds it open
			}
		}
	}
}

// closeWorker shuts down every socket handed to worker wid: its client
// sees the connection end (the worker's descriptor, if its process still
// lives, sees it too). The watcher then closes the descriptors.
func (h *handedSockets) closeWorker(wid string) int {
	h.mu.Lock()
	gone := h.socksLocked(func(s *handedSock) bool { return s.workerID == wid })
	h.mu.Unlock()
	for _, c := range gone {
		h.log.Debug().Str("worker", wid).Str("client", c.RemoteAddr().String()).Msg("handed websocket shut down")
	}
	shutdown(gone)
	return len(gone)
}

// socksLocked lists the kept descriptors of the sockets match picks.
func (h *handedSockets) socksLocked(match func(*handedSock) bool) []net.Conn {
	var out []net.Conn
	for _, s := range h.byFD {
		if match(s) {
			out = append(out, s.c)
		}
	}
	return out
}

// stop ends the watcher and lets go of every descriptor, without ending
// the sockets: they are the workers' (a proxy restart must not cut them).
func (h *handedSockets) stop() {
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return
	}
	h.stopped = true
	ep, wake, done := h.ep, h.wake, h.done
	socks := h.byFD
	h.byFD = map[int]*handedSock{}
	for _, wp := range h.procs {
		unix.Close(wp.pidfd)
	}
	h.procs, h.byPID = map[int]*workerProc{}, map[int]*workerProc{}
	h.mu.Unlock()
	if ep < 0 {
		return
	}
	var one [8]byte
	one[0] = 1 // eventfd counters are host-endian; any non-zero value wakes it
	_, _ = unix.Write(wake, one[:])
	<-done
	unix.Close(ep)
	unix.Close(wake)
	for _, s := range socks {
		s.c.Close()
	}
}

// count is how many descriptors are kept (tests).
func (h *handedSockets) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.byFD)
}

func shutdownFD(fd uintptr) { _ = unix.Shutdown(int(fd), unix.SHUT_RDWR) }
