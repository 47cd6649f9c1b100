//go:build linux

package edge

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// workerAddrs is what an edge knows of its workers' addresses, as
// connect(2) takes them, shared by its loops. A failed connection forgets
// a resolved name (forget), so a worker that moved is found again.
type workerAddrs struct {
	dialTimeout time.Duration // bounds a lookup
	m           sync.Map      // worker address → netip.AddrPort
}

// sockaddr returns the worker address to connect to if it is known
// without asking DNS; nil means resolve (off the loop). Each call returns
// a new value: connect(2)'s wrapper writes into it.
func (a *workerAddrs) sockaddr(addr string) unix.Sockaddr {
	if v, ok := a.m.Load(addr); ok {
		return toSockaddr(v.(netip.AddrPort))
	}
	if ap, err := netip.ParseAddrPort(addr); err == nil {
		a.m.Store(addr, ap)
		return toSockaddr(ap)
	}
	return nil
}

// resolve is sockaddr with DNS.
func (a *workerAddrs) resolve(addr string) unix.Sockaddr {
	if sa := a.sockaddr(addr); sa != nil {
		return sa
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.dialTimeout)
	defer cancel()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	pn, perr := strconv.ParseUint(port, 10, 16)
	if err != nil || perr != nil || len(ips) == 0 {
		return nil
	}
	ap := netip.AddrPortFrom(ips[0], uint16(pn))
	a.m.Store(addr, ap)
	return toSockaddr(ap)
}

// forget drops what is known of addr: the next request resolves it again.
func (a *workerAddrs) forget(addr string) { a.m.Delete(addr) }

func toSockaddr(ap netip.AddrPort) unix.Sockaddr {
	if a := ap.Addr().Unmap(); a.Is4() {
		return &unix.SockaddrInet4{Addr: a.As4(), Port: int(ap.Port())}
	}
	return &unix.SockaddrInet6{Addr: ap.Addr().As16(), Port: int(ap.Port())}
}

// loopAddrs is a loop's view of the edge's worker addresses. It keeps
// those that are IP literals itself: they never change, so each is made
// once per loop (and only the loop's thread uses them), and a request to a
// known worker allocates nothing for its address.
type loopAddrs struct {
	shared  *workerAddrs
	literal map[string]unix.Sockaddr
}

// maxLiteral bounds a loop's literal addresses (workers come and go): the
// map starts again when full.
const maxLiteral = 1024

// sockaddr is workerAddrs.sockaddr, kept for an IP literal.
func (a *loopAddrs) sockaddr(addr string) unix.Sockaddr {
	if sa, ok := a.literal[addr]; ok {
		return sa
	}
	sa := a.shared.sockaddr(addr)
	if _, err := netip.ParseAddrPort(addr); err == nil && sa != nil {
		if len(a.literal) >= maxLiteral {
			clear(a.literal)
		}
		a.literal[addr] = sa
	}
	return sa
}
