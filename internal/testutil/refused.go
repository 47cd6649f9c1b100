//go:build unix

package testutil

import (
	"net"
	"strconv"
	"syscall"
	"testing"
)

// RefusedAddr returns a loopback address where connections are refused,
// for as long as the test runs: a socket bound there, never listening,
// holds the port. (A port that was free a moment ago may be taken by
// anything by the time the test dials it.)
func RefusedAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("RefusedAddr: socket: %v", err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("RefusedAddr: bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("RefusedAddr: getsockname: %v", err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
}
