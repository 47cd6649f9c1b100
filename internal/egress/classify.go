// Package egress is the virtual browsers' network exit. Every browser
// context of a worker's Chromium is forced through a local forward proxy
// (one endpoint per browser), and the proxy decides each connection on the
// address it is about to connect to, after name resolution, so neither
// URL tricks (userinfo, trailing dots, IPv4-mapped IPv6, decimal hosts) nor
// DNS rebinding reach a forbidden address.
//
// By default a browser may reach public addresses only: loopback, private,
// link-local, CGNAT, metadata, unspecified, multicast and reserved ranges
// are refused, and so are the cluster's own endpoints whatever the rules
// say. The cluster configuration and an app's manifest may allow specific
// destinations back. The endpoint also serves the app's own internal origin
// (http://<app>.app.cloudbrowser.internal/) and refuses other apps' ones.
package egress

import (
	"net/netip"
)

// Class is what kind of address a destination is.
type Class string

// Address classes. Only Public is allowed without a rule.
const (
	Public      Class = "public"
	Loopback    Class = "loopback"
	Private     Class = "private"
	LinkLocal   Class = "link-local"
	CGNAT       Class = "cgnat"
	Metadata    Class = "metadata"
	Unspecified Class = "unspecified"
	Multicast   Class = "multicast"
	Reserved    Class = "reserved"
)

// Reasons a request is refused that are not an address class.
const (
	ReasonCluster  = "cluster"        // one of the cluster's own endpoints
	ReasonOtherApp = "other-app"      // another app's internal origin
	ReasonInternal = "internal"       // an internal name that is no app's
	ReasonScheme   = "bad-request"    // not a proxy request we serve
	ReasonResolve  = "unresolvable"   // the name did not resolve
	ReasonDial     = "connect-failed" // allowed, but the connection failed
)

// Prefixes that netip's predicates do not cover.
var (
	metadataAddrs = []netip.Addr{
		netip.MustParseAddr("169.254.169.254"), // AWS, GCP, Azure, OpenStack
		netip.MustParseAddr("fd00:ec2::254"),   // AWS over IPv6
		netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
	}
	cgnat    = netip.MustParsePrefix("100.64.0.0/10")
	thisNet  = netip.MustParsePrefix("0.0.0.0/8")
	reserved = []netip.Prefix{
		netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
		netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
		netip.MustParsePrefix("240.0.0.0/4"),     // reserved, and 255.255.255.255
		netip.MustParsePrefix("fec0::/10"),       // deprecated site-local
		netip.MustParsePrefix("100::/64"),        // discard-only
		netip.MustParsePrefix("2001:db8::/32"),   // documentation
		netip.MustParsePrefix("192.0.2.0/24"),    // documentation
		netip.MustParsePrefix("198.51.100.0/24"), // documentation
		netip.MustParsePrefix("203.0.113.0/24"),  // documentation
	}
	// IPv6 prefixes that carry an IPv4 address a translator or tunnel
	// would deliver to: the embedded address is classified too.
	nat64      = netip.MustParsePrefix("64:ff9b::/96")
	nat64Local = netip.MustParsePrefix("64:ff9b:1::/48")
	sixToFour  = netip.MustParsePrefix("2002::/16")
	teredo     = netip.MustParsePrefix("2001::/32")
	v4compat   = netip.MustParsePrefix("::/96")
)

// Classify tells what kind of address ip is. IPv4-mapped, IPv4-compatible,
// NAT64, 6to4 and Teredo addresses are judged by the IPv4 address they
// carry as well: the stricter verdict wins.
func Classify(ip netip.Addr) Class {
	ip = ip.WithZone("")
	if ip.Is4In6() {
		ip = ip.Unmap()
	}
	c := classify1(ip)
	if c != Public || !ip.Is6() {
		return c
	}
	for _, v4 := range embeddedV4(ip) {
		if c := classify1(v4); c != Public {
			return c
		}
	}
	return c
}

func classify1(ip netip.Addr) Class {
	if !ip.IsValid() {
		return Reserved
	}
	for _, m := range metadataAddrs {
		if ip == m {
			return Metadata
		}
	}
	switch {
	case ip.IsUnspecified() || thisNet.Contains(ip):
		return Unspecified
	case ip.IsLoopback():
		return Loopback
	case ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast():
		return LinkLocal
	case ip.IsMulticast() || ip.IsInterfaceLocalMulticast():
		return Multicast
	case ip.IsPrivate():
		return Private
	case cgnat.Contains(ip):
		return CGNAT
	}
	for _, p := range reserved {
		if p.Contains(ip) {
			return Reserved
		}
	}
	return Public
}

// embeddedV4 returns the IPv4 addresses an IPv6 address carries by a
// translation or tunnelling convention.
func embeddedV4(ip netip.Addr) []netip.Addr {
	b := ip.As16()
	switch {
	case nat64.Contains(ip), nat64Local.Contains(ip), v4compat.Contains(ip):
		return []netip.Addr{netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})}
	case sixToFour.Contains(ip):
		return []netip.Addr{netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]})}
	case teredo.Contains(ip):
		// The Teredo server sits in bits 32..63, the client's public
		// address inverted in the last 32 bits; packets reach both.
		return []netip.Addr{
			netip.AddrFrom4([4]byte{b[4], b[5], b[6], b[7]}),
			netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}),
		}
	}
	return nil
}
