//go:build !linux

package edge

import "net"

// Edge is the event-loop edge, Linux only: elsewhere none ever runs.
type Edge struct{}

// Start returns ln itself: net/http serves everything.
func Start(ln net.Listener, cfg Config) (*Edge, net.Listener) { return nil, ln }

// Stop, Kill, Done and CloseWorker are never called: Start makes no Edge.
func (e *Edge) Stop()                 {}
func (e *Edge) Kill()                 {}
func (e *Edge) Done() <-chan struct{} { return nil }
func (e *Edge) CloseWorker(string)    {}
