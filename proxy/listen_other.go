//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package proxy

import (
	"context"
	"errors"
	"net"
)

// Listen is unsupported here: the platform has no SO_REUSEPORT.
func Listen(ctx context.Context, network, addr string) (net.Listener, error) {
	return nil, errors.New("proxy: SO_REUSEPORT listeners are not supported on this platform")
}
