package httpsec

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Who may say where a request came from. A load balancer in front of the
// proxies terminates TLS and connects from its own address: the user's
// address and scheme reach us only in its X-Forwarded-For and
// X-Forwarded-Proto, which any client can also send. Scheme.TrustedProxies
// names the peers whose word counts; everyone else's is ignored (and the
// proxies overwrite both headers on every request they relay).

// ParsePrefixes reads --trusted-proxies values: CIDRs or single addresses
// (a /32 or /128), each value possibly a comma-separated list.
func ParsePrefixes(values []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range values {
		for _, s := range strings.Split(v, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			if !strings.Contains(s, "/") {
				a, err := netip.ParseAddr(s)
				if err != nil {
					return nil, fmt.Errorf("%q: want a CIDR (10.0.0.0/8) or an address: %w", s, err)
				}
				out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
				continue
			}
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return nil, fmt.Errorf("%q: want a CIDR (10.0.0.0/8) or an address: %w", s, err)
			}
			if p.Addr().Is4In6() { // ::ffff:10.0.0.0/104 matches what Unmap gives
				p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
			}
			out = append(out, p.Masked())
		}
	}
	return out, nil
}

// trusts: a is one of the trusted proxies.
func (s Scheme) trusts(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range s.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// peer is the address of the connection r came on (invalid if unknown).
func peer(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// believesProto: r's X-Forwarded-Proto counts. With TrustedProxies only
// theirs; without, everyone's under TrustForwardedProto (the older flag,
// meant for a port only a load balancer can reach).
func (s Scheme) believesProto(r *http.Request) bool {
	if len(s.TrustedProxies) > 0 {
		return s.trusts(peer(r))
	}
	return s.TrustForwardedProto
}

// lastValue is the last entry of a header that may be repeated and
// comma-separated: the one the nearest hop added.
func lastValue(h http.Header, name string) string {
	vv := h.Values(name)
	if len(vv) == 0 {
		return ""
	}
	last := vv[len(vv)-1]
	if i := strings.LastIndexByte(last, ','); i >= 0 {
		last = last[i+1:]
	}
	return strings.TrimSpace(last)
}

// forwardedAddr parses one X-Forwarded-For entry: an address, possibly
// with a port (some balancers add it), IPv6 possibly in brackets.
func forwardedAddr(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return a.Unmap(), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	return netip.Addr{}, false
}

// Client is the user's address: the peer's, or, when the peer is a
// trusted proxy, the nearest X-Forwarded-For entry that is not one (read
// from the right: entries left of it were written by the client and prove
// nothing). "" if unknown.
func (s Scheme) Client(r *http.Request) string {
	if f, ok := r.Context().Value(frontKey{}).(front); ok {
		return f.client
	}
	return s.client(r)
}

func (s Scheme) client(r *http.Request) string {
	hop := peer(r)
	if !hop.IsValid() {
		return ""
	}
	if !s.trusts(hop) {
		return hop.String()
	}
	vv := r.Header.Values("X-Forwarded-For")
	for i := len(vv) - 1; i >= 0; i-- {
		entries := strings.Split(vv[i], ",")
		for j := len(entries) - 1; j >= 0; j-- {
			a, ok := forwardedAddr(entries[j])
			if !ok {
				return hop.String() // garbage: the last address we could trust
			}
			hop = a
			if !s.trusts(a) {
				return a.String()
			}
		}
	}
	return hop.String() // all trusted: the farthest one
}

type frontKey struct{}

// front is what the public front concluded of a request (Resolved).
type front struct {
	https  bool
	client string
}

// Resolved returns r as seen by handlers behind a front that already
// applied s (a proxy's fallback, the master's pages on its public port):
// HTTPS and Client answer what s concluded, whatever scheme the handler's
// own configuration says, and RemoteAddr is the user's address when a
// trusted proxy named it. The forwarded headers are dropped: their word
// is in the conclusion.
func (s Scheme) Resolved(r *http.Request) *http.Request {
	f := front{https: s.HTTPS(r), client: s.client(r)}
	r = r.WithContext(context.WithValue(r.Context(), frontKey{}, f))
	if f.client != "" && f.client != peer(r).String() {
		_, port, _ := net.SplitHostPort(r.RemoteAddr)
		r.RemoteAddr = net.JoinHostPort(f.client, port)
	}
	r.Header.Del("X-Forwarded-For")
	r.Header.Del("X-Forwarded-Proto")
	return r
}
