//go:build !linux

package proxy

import "net"

// startEdge: the event-loop edge is Linux only; net/http serves everything.
func (p *Proxy) startEdge(ln net.Listener) net.Listener { return ln }
