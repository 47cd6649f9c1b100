package egress

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Rule allows one kind of destination:
//
//	10.1.2.3          an address, any port
//	10.0.0.0/8        a prefix, any port
//	10.1.2.3:8080     an address and port ([::1]:8080 for IPv6)
//	10.0.0.0/8:443    a prefix and port
//	intranet.example  a host name (whatever it resolves to), any port
//	*.corp.example    any name under corp.example
//	intranet.example:8443
//
// Names are matched on the host the browser asked for, lower-cased and
// without a trailing dot; addresses on the address actually connected to.
type Rule struct {
	prefix   netip.Prefix // valid for address rules
	host     string       // name rules: the name, or the suffix after "*."
	wildcard bool
	port     int // 0 = any
	text     string
}

// String is the rule as written.
func (r Rule) String() string { return r.text }

// ParseRule parses one rule.
func ParseRule(s string) (Rule, error) {
	r := Rule{text: s}
	s = strings.TrimSpace(s)
	if s == "" {
		return r, fmt.Errorf("empty rule")
	}
	if p, err := netip.ParsePrefix(s); err == nil {
		r.prefix = unmapPrefix(p)
		return r, nil
	}
	if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		r.prefix = unmapPrefix(netip.PrefixFrom(a, a.BitLen()))
		return r, nil
	}
	// With a port: the port follows the last colon.
	hostPart, portPart := s, ""
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		hostPart, portPart = s[:i], s[i+1:]
	}
	if portPart != "" {
		p, err := strconv.Atoi(portPart)
		if err != nil || p < 1 || p > 65535 {
			return r, fmt.Errorf("rule %q: bad port %q", s, portPart)
		}
		r.port = p
	}
	if p, err := netip.ParsePrefix(strings.Trim(hostPart, "[]")); err == nil && portPart != "" {
		r.prefix = unmapPrefix(p)
		return r, nil
	}
	if a, err := netip.ParseAddr(strings.Trim(hostPart, "[]")); err == nil && portPart != "" {
		r.prefix = unmapPrefix(netip.PrefixFrom(a, a.BitLen()))
		return r, nil
	}
	if strings.Contains(s, ":") && portPart == "" {
		return r, fmt.Errorf("rule %q: not an address, prefix or host[:port]", s)
	}
	name := normalizeHost(hostPart)
	if after, ok := strings.CutPrefix(name, "*."); ok {
		r.wildcard, name = true, after
	}
	if !validName(name) {
		return r, fmt.Errorf("rule %q: not an address, prefix or host name", s)
	}
	r.host = name
	return r, nil
}

// unmapPrefix turns ::ffff:a.b.c.d/n (n >= 96) into a.b.c.d/(n-96), so
// rules and addresses compare in one form.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96).Masked()
	}
	return p.Masked()
}

// ParseRules parses a list; errors name the index.
func ParseRules(field string, list []string) ([]Rule, error) {
	out := make([]Rule, 0, len(list))
	for i, s := range list {
		r, err := ParseRule(s)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", field, i, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// Match reports whether the rule allows connecting to ip:port for a
// request to host.
func (r Rule) Match(host string, ip netip.Addr, port int) bool {
	if r.port != 0 && r.port != port {
		return false
	}
	if r.prefix.IsValid() {
		return r.prefix.Contains(ip.Unmap())
	}
	host = normalizeHost(host)
	if r.wildcard {
		return strings.HasSuffix(host, "."+r.host)
	}
	return host == r.host
}

// normalizeHost lower-cases a host, strips brackets and one trailing dot.
func normalizeHost(h string) string {
	h = strings.ToLower(strings.Trim(h, "[]"))
	return strings.TrimSuffix(h, ".")
}

func validName(n string) bool {
	if n == "" || len(n) > 253 {
		return false
	}
	for _, label := range strings.Split(n, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// splitHostPort splits "host:port" with a default port.
func splitHostPort(hostport string, def int) (string, int, error) {
	host, ps, err := net.SplitHostPort(hostport)
	if err != nil {
		if strings.Contains(err.Error(), "missing port") {
			return normalizeHost(hostport), def, nil
		}
		return "", 0, err
	}
	p, err := strconv.Atoi(ps)
	if err != nil || p < 1 || p > 65535 {
		return "", 0, fmt.Errorf("bad port %q", ps)
	}
	return normalizeHost(host), p, nil
}
