//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package proxy

// alive cannot peek without blocking here; a closed connection then fails
// the request (502) instead of being skipped.
func (c *upConn) alive() bool { return c.br.Buffered() == 0 }
