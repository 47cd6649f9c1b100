//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

// Package reserve holds a TCP port without listening on it.
package reserve

import "errors"

// Port is unsupported here.
type Port struct{}

// Bind is unsupported here: the platform has no SO_REUSEPORT.
func Bind(addr string) (*Port, error) {
	return nil, errors.New("reserve: SO_REUSEPORT is not supported on this platform")
}

// Addr is empty.
func (r *Port) Addr() string { return "" }

// Close does nothing.
func (r *Port) Close() error { return nil }
