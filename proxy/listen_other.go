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

// Reservation is unsupported here, like Listen.
type Reservation struct{}

// Reserve is unsupported here: the platform has no SO_REUSEPORT.
func Reserve(addr string) (*Reservation, error) {
	return nil, errors.New("proxy: SO_REUSEPORT reservations are not supported on this platform")
}

// Addr is empty.
func (r *Reservation) Addr() string { return "" }

// Close does nothing.
func (r *Reservation) Close() error { return nil }
