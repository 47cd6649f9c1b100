//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

// Package reserve holds a TCP port without listening on it.
package reserve

import (
	"fmt"
	"net"
	"strconv"

	"golang.org/x/sys/unix"
)

// Port holds a port: a TCP socket bound with SO_REUSEPORT (and not
// SO_REUSEADDR) that never listens. The kernel then refuses the port to any
// other program, lets the same user's SO_REUSEPORT listeners (a cluster's
// proxies) bind it, and never hands a connection to the socket itself
// (only listening sockets receive connections): until one listens, a
// connection there is refused, which tests use too.
type Port struct {
	fd   int
	addr string
}

// Bind binds addr (typically with port 0) and keeps it. Addr reports
// the host as given and the port the kernel chose, so a wildcard stays a
// wildcard for the proxies that bind it next.
func Bind(addr string) (*Port, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("reserve: %q: %w", addr, err)
	}
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("reserve: %q: %w", addr, err)
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
		return nil, fmt.Errorf("reserve: %s: socket: %w", addr, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("reserve: %s: setsockopt: %w", addr, err)
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("reserve: %s: bind: %w", addr, err)
	}
	bound, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("reserve: %s: getsockname: %w", addr, err)
	}
	port := 0
	switch b := bound.(type) {
	case *unix.SockaddrInet4:
		port = b.Port
	case *unix.SockaddrInet6:
		port = b.Port
	}
	return &Port{fd: fd, addr: net.JoinHostPort(host, strconv.Itoa(port))}, nil
}

// Addr is the reserved address: the host as given, the bound port.
func (r *Port) Addr() string { return r.addr }

// Close releases the port.
func (r *Port) Close() error { return unix.Close(r.fd) }
