//go:build linux

package edge

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// epollSet is a loop's epoll set: the descriptors it watches, what each
// connection in it waits for, and the wait for ready events.
//
// An idle loop waits in the Go runtime's poller, on a duplicate of the
// epoll descriptor (ready when the set has ready events), and not in
// epoll_wait on a thread of its own: a thread blocked in a system call
// keeps its P, so the runtime's monitor keeps polling to take it back (a
// wake-up on the proxy's CPUs per request or more at low load) and every
// wake pays the way back into Go. Parked, the loop's P is free and the
// monitor sleeps. Under load the loop never waits: poll finds events
// first.
type epollSet struct {
	fd int // -1 until open

	park    *os.File
	parkRC  syscall.RawConn
	parkFn  func(uintptr) bool // made once: a closure per wait would allocate
	parkN   int
	parkEvs []unix.EpollEvent
}

// open creates the set and the descriptor an idle loop parks on: that one
// non-blocking, so os.NewFile registers it in the runtime's poller
// (checked: only a registered file takes a deadline).
func (s *epollSet) open() error {
	var err error
	if s.fd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return err
	}
	fd, err := unix.FcntlInt(uintptr(s.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("edge: duplicate epoll descriptor: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return fmt.Errorf("edge: epoll descriptor non-blocking: %w", err)
	}
	s.park = os.NewFile(uintptr(fd), "edge-epoll")
	if err := s.park.SetReadDeadline(time.Time{}); err != nil {
		return fmt.Errorf("edge: epoll descriptor not in the runtime's poller: %w", err)
	}
	if s.parkRC, err = s.park.SyscallConn(); err != nil {
		return fmt.Errorf("edge: epoll descriptor: %w", err)
	}
	s.parkFn = func(uintptr) bool {
		s.parkN = pollNow(s.fd, s.parkEvs)
		return s.parkN > 0
	}
	return nil
}

// close closes the parked duplicate and the set.
func (s *epollSet) close() {
	if s.park != nil {
		s.park.Close()
		s.park = nil
	}
	if s.fd >= 0 {
		unix.Close(s.fd)
	}
	s.fd = -1
}

func (s *epollSet) add(fd int, events uint32) error {
	return unix.EpollCtl(s.fd, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: events, Fd: int32(fd)})
}

// addListener adds a listening socket every loop's set watches;
// exclusive: one loop wakes per new connection, not all of them.
func (s *epollSet) addListener(fd int) error {
	return s.add(fd, unix.EPOLLIN|unix.EPOLLEXCLUSIVE)
}

func (s *epollSet) del(fd int) error {
	return unix.EpollCtl(s.fd, unix.EPOLL_CTL_DEL, fd, nil)
}

// set makes c wait for events.
func (s *epollSet) set(c *econn, events uint32) {
	if c.events == events {
		return
	}
	if unix.EpollCtl(s.fd, unix.EPOLL_CTL_MOD, c.fd, &unix.EpollEvent{Events: events, Fd: int32(c.fd)}) == nil {
		c.events = events
	}
}

// want sets c's interest from its state: read unless paused (a worker whose
// client is slow; a client that sent far ahead), write while output waits.
func (s *epollSet) want(c *econn) {
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
	s.set(c, ev)
}

// poll returns the ready events without waiting.
func (s *epollSet) poll(evs []unix.EpollEvent) int { return pollNow(s.fd, evs) }

// wait parks the loop until the set has ready events or until has come,
// and returns the events taken into evs.
func (s *epollSet) wait(evs []unix.EpollEvent, until time.Time) (int, error) {
	s.parkEvs, s.parkN = evs, 0
	if err := s.park.SetReadDeadline(until); err != nil {
		return 0, err
	}
	if err := s.parkRC.Read(s.parkFn); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return 0, err
	}
	return s.parkN, nil
}
