package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/urfave/cli/v3"
)

// The one address rule (docs/deploying.md, "Addresses"): a listener that
// other cluster processes dial and that binds a wildcard address (every
// interface: "", 0.0.0.0, ::) needs the address to tell them, given with
// its advertise flag. "Every interface" is no address another host can
// dial, and a guessed one (memberlist picks the first private address;
// the worker would announce [::]:port) is silently wrong on a host with
// several. Public listeners (--listen of a proxy or the master, --admin)
// are exempt: users and tools reach those through names and load
// balancers, not through anything the cluster announces.

// advertiseKind says what an advertise flag holds.
type advertiseKind int

const (
	// hostPort: the address other processes dial, host (a name or an IP)
	// and port (a worker's --advertise).
	hostPort advertiseKind = iota
	// hostOnly: the host only, the port being the bound one (memberlist's
	// advertise address, --gossip-advertise).
	hostOnly
)

// wildcardBind reports whether addr binds every interface. An address
// that does not parse is left to the listener to report.
func wildcardBind(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsUnspecified()
}

// checkAdvertise applies the rule to one listener: bindFlag binds bind,
// advFlag (value adv) says what others dial; who is who dials it.
func checkAdvertise(bindFlag, bind, advFlag, adv string, kind advertiseKind, who string) error {
	example := "10.0.0.5"
	if kind == hostPort {
		_, port, err := net.SplitHostPort(bind)
		if err != nil || port == "" || port == "0" {
			port = "8000"
		}
		example = net.JoinHostPort(example, port)
	}
	if adv == "" {
		if wildcardBind(bind) {
			return fmt.Errorf("--%s %s binds every interface, which is no address %s can dial: set --%s to this host's address (e.g. --%s %s), or bind one address",
				bindFlag, bind, who, advFlag, advFlag, example)
		}
		return nil
	}
	host := adv
	switch kind {
	case hostPort:
		h, port, err := net.SplitHostPort(adv)
		if err != nil {
			return fmt.Errorf("--%s %s: want host:port (e.g. %s): %w", advFlag, adv, example, err)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("--%s %s: the port must be a number from 1 to 65535 (the one %s dial)", advFlag, adv, who)
		}
		host = h
	case hostOnly:
		if _, _, err := net.SplitHostPort(adv); err == nil {
			return fmt.Errorf("--%s %s: give the host only (e.g. %s); the port is --%s's", advFlag, adv, example, bindFlag)
		}
	}
	if host == "" || wildcardBind(net.JoinHostPort(host, "1")) {
		return fmt.Errorf("--%s %s: a wildcard address is no address %s can dial: give this host's address", advFlag, adv, who)
	}
	return nil
}

// gossipAdvertise checks the gossip listener bind (--gossip) against
// --gossip-advertise and returns the advertise address as an IP ("" =
// none): memberlist takes an IP only, so a host or container name is
// resolved here, once, at start.
func gossipAdvertise(ctx context.Context, cmd *cli.Command, bind string) (string, error) {
	adv := cmd.String("gossip-advertise")
	if err := checkAdvertise("gossip", bind, "gossip-advertise", adv, hostOnly, "the other cluster members"); err != nil {
		return "", err
	}
	if adv == "" {
		return "", nil
	}
	if ip, err := netip.ParseAddr(adv); err == nil {
		return ip.String(), nil
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(rctx, "ip", adv)
	if err != nil {
		return "", fmt.Errorf("--gossip-advertise %s: %w", adv, err)
	}
	// IPv4 first: a dual-stack name's first answer may be an IPv6 address
	// the other members have no route to.
	for _, ip := range ips {
		if ip.Unmap().Is4() {
			return ip.Unmap().String(), nil
		}
	}
	if len(ips) == 0 {
		return "", fmt.Errorf("--gossip-advertise %s: the name has no address", adv)
	}
	return ips[0].String(), nil
}

// workerAddresses applies the rule to a worker's listeners: --listen
// (dialled by the proxies) and --gossip. It returns the gossip advertise
// address.
func workerAddresses(ctx context.Context, cmd *cli.Command) (string, error) {
	if err := checkAdvertise("listen", cmd.String("listen"), "advertise", cmd.String("advertise"), hostPort, "the proxies"); err != nil {
		return "", err
	}
	return gossipAdvertise(ctx, cmd, cmd.String("gossip"))
}
