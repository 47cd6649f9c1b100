//go:build !linux

package proxy

import (
	"net"

	"github.com/rs/zerolog"
)

// handedSockets: handoff is Linux only (internal/handoff), so there is
// nothing to watch elsewhere.
type handedSockets struct{}

func newHandedSockets(zerolog.Logger) *handedSockets    { return &handedSockets{} }
func (h *handedSockets) add(net.Conn, string, int) bool { return false }
func (h *handedSockets) closeWorker(string) int         { return 0 }
func (h *handedSockets) stop()                          {}

// shutdownFD is never reached: only handed sockets are shut down.
func shutdownFD(uintptr) {}
