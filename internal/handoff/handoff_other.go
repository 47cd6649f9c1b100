//go:build !linux

package handoff

import (
	"context"
	"errors"
	"net"
	"syscall"
)

// Handoffs need SCM_RIGHTS and SO_PEERCRED as Linux has them; elsewhere
// proxies relay every connection.

var (
	ErrRefused   = errors.New("handoff: refused")
	ErrSent      = errors.New("handoff: sent but not acknowledged")
	ErrNotSocket = errors.New("handoff: connection has no socket")
)

const MaxPayload = 64 << 10

type Listener struct{ net.Listener }

func (l *Listener) Path() string { return "" }

func Listen(string, func(error)) (*Listener, error) {
	return nil, errors.New("handoff: not supported on this system")
}

func Send(context.Context, string, syscall.Conn, []byte) error { return ErrNotSocket }

func SendToPID(context.Context, string, syscall.Conn, []byte) (int, error) { return 0, ErrNotSocket }

func HostID() string { return "" }

func PrivateDir(string) error { return errors.New("handoff: not supported on this system") }

func CleanStale(string) {}
