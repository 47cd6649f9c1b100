//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package proxy

import (
	"errors"
	"syscall"
)

// alive reports whether an idle connection is still open: the worker may
// have closed it while it sat in the pool, and a request with a body cannot
// be replayed on another one. One non-blocking peek, no data consumed.
func (c *upConn) alive() bool {
	if c.br.Buffered() > 0 {
		return false // an idle connection has nothing to say
	}
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	err = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = errors.Is(rerr, syscall.EAGAIN) // nothing to read; not EOF, not data
		return true
	})
	return err == nil && open
}
