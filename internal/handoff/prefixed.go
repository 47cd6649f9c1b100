package handoff

import "net"

// PrefixedConn is a connection whose first bytes were read before it
// changed hands (by a proxy's edge, or by the proxy that handed it over):
// Read returns them first.
type PrefixedConn struct {
	net.Conn
	Pre []byte
}

func (c *PrefixedConn) Read(b []byte) (int, error) {
	if len(c.Pre) > 0 {
		n := copy(b, c.Pre)
		c.Pre = c.Pre[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

// CloseWrite lets a server half-close as it does a *net.TCPConn.
func (c *PrefixedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Close shuts the socket down before closing it: the proxy that handed it
// over keeps a descriptor of it (to end it if this worker is declared
// dead), which would otherwise hold the connection open.
func (c *PrefixedConn) Close() error {
	if sd, ok := c.Conn.(interface {
		CloseRead() error
		CloseWrite() error
	}); ok {
		_ = sd.CloseWrite()
		_ = sd.CloseRead()
	}
	return c.Conn.Close()
}
