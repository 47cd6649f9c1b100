//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package proxy

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Listen opens a listener with SO_REUSEADDR and SO_REUSEPORT, so several
// proxy processes can bind the same public port and let the kernel spread
// incoming connections across them.
func Listen(ctx context.Context, network, addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); serr != nil {
				return
			}
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		}); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("setsockopt: %w", serr)
		}
		return nil
	}}
	ln, err := lc.Listen(ctx, network, addr)
	if err != nil {
		return nil, fmt.Errorf("proxy: listen %s %s: %w", network, addr, err)
	}
	return ln, nil
}

// Reservation holds a port for the proxies of one cluster: a TCP socket
// bound with SO_REUSEPORT (and not SO_REUSEADDR) that never listens. The
// kernel then refuses the port to any other program, lets our proxies bind
// it with SO_REUSEPORT, and never hands a connection to the reservation
// itself (only listening sockets receive connections).
type Reservation struct {
	fd   int
	addr string
}

// Reserve binds addr (typically with port 0) and keeps it. Addr reports
// the host as given and the port the kernel chose, so a wildcard stays a
// wildcard for the proxies that bind it next.
func Reserve(addr string) (*Reservation, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("proxy: reserve %q: %w", addr, err)
	}
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("proxy: reserve %q: %w", addr, err)
	}
	family, sa := unix.AF_INET6, unix.Sockaddr(&unix.SockaddrInet6{Port: ta.Port})
	if ip4 := ta.IP.To4(); ip4 != nil {
		s4 := &unix.SockaddrInet4{Port: ta.Port}
		copy(s4.Addr[:], ip4)
		family, sa = unix.AF_INET, s4
	} else if ta.IP != nil {
		s6 := sa.(*unix.SockaddrInet6)
		copy(s6.Addr[:], ta.IP.To16())
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("proxy: reserve %s: socket: %w", addr, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("proxy: reserve %s: setsockopt: %w", addr, err)
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("proxy: reserve %s: bind: %w", addr, err)
	}
	bound, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("proxy: reserve %s: getsockname: %w", addr, err)
	}
	port := 0
	switch b := bound.(type) {
	case *unix.SockaddrInet4:
		port = b.Port
	case *unix.SockaddrInet6:
		port = b.Port
	}
	return &Reservation{fd: fd, addr: net.JoinHostPort(host, strconv.Itoa(port))}, nil
}

// Addr is the reserved address: the host as given, the bound port.
func (r *Reservation) Addr() string { return r.addr }

// Close releases the port.
func (r *Reservation) Close() error { return unix.Close(r.fd) }
