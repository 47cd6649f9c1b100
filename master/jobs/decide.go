package jobs

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/egress"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// decider decides a job before it is queued: its class, its politeness
// budget and whether a rule refuses it. It reads only its configuration and
// the robots.txt cache (which has its own lock), so it runs outside the
// queue's lock: deciding resolves names and may fetch robots.txt.
type decider struct {
	classes *classes
	allow   []egress.Rule
	resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	policy  func(spec wire.JobSpec) (ok bool, reason string)
	robots  *robotsCache
	log     zerolog.Logger
}

// resolution caches one batch's name lookups.
type resolution struct {
	addrs []netip.Addr
	err   error
}

// InternalHostSuffix ends the host names of apps' internal origins
// (<app>.app.cloudbrowser.internal), which only workers serve.
const InternalHostSuffix = ".app.cloudbrowser.internal"

// prepare decides a job: its class, budget and whether a rule refuses it.
// It resolves the host and may fetch robots.txt, so it runs unlocked.
func (d *decider) prepare(ctx context.Context, spec wire.JobSpec, monitor bool, cache map[string]resolution) prepared {
	j := &Job{Spec: spec, State: wire.JobQueued}
	p := prepared{job: j}
	refuse := func(code, reason string) prepared {
		j.State, j.Disallow, j.Reason = wire.JobDisallowed, code, reason
		return p
	}
	u, _ := url.Parse(spec.URL) // Admit parsed it
	scheme := strings.ToLower(u.Scheme)
	host, port, hostport := hostPort(u)
	j.Class, j.Budget = hostport, hostport
	if scheme != "http" && scheme != "https" {
		j.Class = scheme + ":"
		return refuse(DisallowScheme, fmt.Sprintf("scheme %q is not http or https", scheme))
	}
	class, named, _ := d.classes.of(host, hostport)
	j.Class = class
	if strings.HasSuffix(host, InternalHostSuffix) {
		// An app's own bundle, served by the worker's egress endpoint to
		// that app's browsers only: no DNS, no robots.txt, and the app's
		// policy (which always allows its own origin) is the only rule.
		if d.policy != nil {
			if ok, reason := d.policy(spec); !ok {
				return refuse(DisallowPolicy, reason)
			}
		}
		if spec.App == "" || !strings.HasPrefix(host, strings.ToLower(spec.App)+".") {
			return refuse(DisallowPolicy, fmt.Sprintf("%s is served only to the browsers of its own app (set \"app\")", host))
		}
		j.Budget = "host:" + hostport
		return p
	}

	// The address decides, after resolution: a name may point anywhere.
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a.Unmap().WithZone("")}
	} else {
		r, ok := cache[host]
		if !ok {
			r.addrs, r.err = d.resolve(ctx, host)
			cache[host] = r
		}
		addrs = r.addrs
		if r.err != nil {
			// The worker's egress guard will refuse it too; a check then
			// says "unavailable". Its budget is the name's own.
			d.log.Debug().Err(r.err).Str("host", host).Msg("job host does not resolve")
		}
	}
	for _, a := range addrs {
		if ok, why := d.addrAllowed(host, a, port); !ok {
			return refuse(DisallowAddress, fmt.Sprintf("%s resolves to %s, a %s address jobs may not reach", host, a, why))
		}
	}
	switch {
	case named:
		j.Budget = "class:" + class
	case len(addrs) > 0:
		// One budget per address: aliases of one IP:port share it.
		slices.SortFunc(addrs, func(a, b netip.Addr) int { return a.Compare(b) })
		j.Budget = net.JoinHostPort(addrs[0].Unmap().String(), strconv.Itoa(port))
	default:
		j.Budget = "host:" + hostport
	}
	if d.policy != nil {
		if ok, reason := d.policy(spec); !ok {
			if reason == "" {
				reason = "refused by the navigation policy"
			}
			return refuse(DisallowPolicy, reason)
		}
	}
	if monitor || spec.Kind == wire.JobCheck || !spec.IgnoreRobots {
		pq := u.EscapedPath()
		if pq == "" {
			pq = "/"
		}
		if u.RawQuery != "" {
			pq += "?" + u.RawQuery
		}
		if ok, unreachable, reason := d.robots.check(ctx, scheme, hostport, pq); !ok {
			if unreachable {
				return refuse(DisallowRobotsError, reason)
			}
			return refuse(DisallowRobots, reason)
		}
		p.crawlDelay = d.robots.crawlDelay(scheme, hostport)
	}
	return p
}

// hostPort returns the URL's lower-case host, its port (the scheme's
// default filled in) and host:port.
func hostPort(u *url.URL) (string, int, string) {
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	port, err := strconv.Atoi(u.Port())
	if err != nil || port == 0 {
		port = 80
		if strings.EqualFold(u.Scheme, "https") {
			port = 443
		}
	}
	return host, port, net.JoinHostPort(host, strconv.Itoa(port))
}

// addrAllowed decides an address the way the workers' egress guard does:
// public addresses, and others the AllowAddrs rules name; metadata never.
func (d *decider) addrAllowed(host string, ip netip.Addr, port int) (bool, string) {
	ip = ip.Unmap().WithZone("")
	class := egress.Classify(ip)
	if class == egress.Public {
		return true, ""
	}
	if class != egress.Metadata {
		for _, r := range d.allow {
			if r.Match(host, ip, port) {
				return true, ""
			}
		}
	}
	return false, string(class)
}
