//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package proxy

import (
	"context"
	"fmt"
	"net"
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
