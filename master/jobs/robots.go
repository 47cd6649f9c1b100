package jobs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// UserAgentToken is the product token robots.txt groups are matched on.
const UserAgentToken = "CloudBrowser"

// robotsMaxBytes is how much of a robots.txt is read (Google: 500 KiB).
const robotsMaxBytes = 500 << 10

// robotsRule is one Allow/Disallow line.
type robotsRule struct {
	allow   bool
	pattern string
}

// Robots is a parsed robots.txt, reduced to the group that applies to us.
type Robots struct {
	rules []robotsRule
	// all is the verdict for every path (a 4xx allows all, an unreachable
	// host disallows all); used when rules is nil.
	all bool
	// CrawlDelay is the group's Crawl-delay (not in RFC 9309, but widely
	// sent): the least time between two requests (0: none).
	CrawlDelay time.Duration
}

// ParseRobots parses body (RFC 9309) for the agent token: the groups
// naming it (case-insensitive) are merged; without one, the "*" groups;
// without either, everything is allowed.
func ParseRobots(body []byte, agent string) *Robots {
	agent = strings.ToLower(agent)
	type group struct {
		agents []string
		rules  []robotsRule
		delay  time.Duration
	}
	var groups []*group
	var cur *group
	inAgents := false
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), robotsMaxBytes)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		k, v = strings.ToLower(strings.TrimSpace(k)), strings.TrimSpace(v)
		switch k {
		case "user-agent":
			if !inAgents {
				cur = &group{}
				groups = append(groups, cur)
				inAgents = true
			}
			cur.agents = append(cur.agents, strings.ToLower(v))
		case "allow", "disallow":
			inAgents = false
			if cur == nil || v == "" { // a rule before any group, or "Disallow:" (nothing)
				continue
			}
			cur.rules = append(cur.rules, robotsRule{allow: k == "allow", pattern: v})
		case "crawl-delay":
			// Not in RFC 9309, but sent as a member of the group it is in
			// (seconds, maybe fractional), so like a rule it ends the
			// group's user-agent lines.
			inAgents = false
			if s, err := strconv.ParseFloat(v, 64); cur != nil && err == nil && s > 0 && s < 1e6 {
				cur.delay = max(cur.delay, time.Duration(s*float64(time.Second)))
			}
		default:
			// sitemap...: not group members; they do not end the
			// user-agent lines either (RFC 9309 2.2.4).
		}
	}
	var delay time.Duration
	pick := func(match func(a string) bool) []robotsRule {
		var rules []robotsRule
		found := false
		for _, g := range groups {
			for _, a := range g.agents {
				if match(a) {
					found = true
					rules = append(rules, g.rules...)
					delay = max(delay, g.delay)
					break
				}
			}
		}
		if !found {
			return nil
		}
		if rules == nil {
			rules = []robotsRule{} // a group with no rules: all allowed
		}
		return rules
	}
	rules := pick(func(a string) bool { return a == agent })
	if rules == nil {
		rules = pick(func(a string) bool { return a == "*" })
	}
	if rules == nil {
		return &Robots{all: true}
	}
	return &Robots{rules: rules, all: true, CrawlDelay: delay}
}

// Allowed reports whether pathQuery (the URL's escaped path and query) may
// be fetched: the longest matching rule wins, Allow on a tie; no match
// allows. /robots.txt itself is always allowed.
func (r *Robots) Allowed(pathQuery string) bool {
	if pathQuery == "" {
		pathQuery = "/"
	}
	if pathQuery == "/robots.txt" {
		return true
	}
	if r.rules == nil {
		return r.all
	}
	best, allowed := -1, true
	for _, rule := range r.rules {
		if !robotsMatch(rule.pattern, pathQuery) {
			continue
		}
		n := len(rule.pattern)
		if n > best || (n == best && rule.allow) {
			best, allowed = n, rule.allow
		}
	}
	return allowed
}

// robotsMatch matches a rule's pattern (a path prefix with "*" for any run
// of characters and a final "$" anchoring the end) against p.
func robotsMatch(pattern, p string) bool {
	anchored := strings.HasSuffix(pattern, "$")
	if anchored {
		pattern = strings.TrimSuffix(pattern, "$")
	}
	parts := strings.Split(pattern, "*")
	if !strings.HasPrefix(p, parts[0]) {
		return false
	}
	pos := len(parts[0])
	if len(parts) == 1 {
		return !anchored || pos == len(p)
	}
	for i, part := range parts[1:] {
		last := i == len(parts)-2
		if last && anchored {
			// The last piece must end the path, after pos.
			return len(p)-len(part) >= pos && strings.HasSuffix(p, part)
		}
		j := strings.Index(p[pos:], part)
		if j < 0 {
			return false
		}
		pos += j + len(part)
	}
	return true
}

// robotsEntry is a cached verdict for one scheme://host:port.
type robotsEntry struct {
	robots  *Robots
	expires time.Time
	reason  string // why everything is disallowed (unreachable, 5xx)
	ready   chan struct{}
}

// robotsCache fetches each robots.txt once per TTL; concurrent askers of
// the same host wait for one fetch.
type robotsCache struct {
	fetch     RobotsFetcher
	ttl, eTTL time.Duration
	now       func() time.Time

	mu      sync.Mutex
	entries map[string]*robotsEntry
}

// crawlDelay is the Crawl-delay of the robots.txt check last read for
// scheme://hostport (0: none, or not read).
func (c *robotsCache) crawlDelay(scheme, hostport string) time.Duration {
	c.mu.Lock()
	e := c.entries[scheme+"://"+hostport]
	c.mu.Unlock()
	if e == nil {
		return 0
	}
	select {
	case <-e.ready:
		if e.robots != nil {
			return e.robots.CrawlDelay
		}
	default:
	}
	return 0
}

// check reports whether u's pathQuery may be fetched, or why not.
func (c *robotsCache) check(ctx context.Context, scheme, hostport, pathQuery string) (ok bool, unreachable bool, reason string) {
	key := scheme + "://" + hostport
	for {
		c.mu.Lock()
		e := c.entries[key]
		if e != nil {
			select {
			case <-e.ready:
				if c.now().Before(e.expires) {
					c.mu.Unlock()
					return c.verdict(e, pathQuery)
				}
				e = nil // expired: fetch again
			default:
			}
		}
		if e != nil { // a fetch is under way: wait for it
			c.mu.Unlock()
			select {
			case <-e.ready:
				continue
			case <-ctx.Done():
				return false, true, "robots.txt: " + ctx.Err().Error()
			}
		}
		e = &robotsEntry{ready: make(chan struct{})}
		if len(c.entries) > 10000 { // bounded: drop expired entries
			now := c.now()
			for k, old := range c.entries {
				select {
				case <-old.ready:
					if !now.Before(old.expires) {
						delete(c.entries, k)
					}
				default:
				}
			}
		}
		c.entries[key] = e
		c.mu.Unlock()
		c.load(ctx, e, scheme, hostport)
		close(e.ready)
		return c.verdict(e, pathQuery)
	}
}

func (c *robotsCache) verdict(e *robotsEntry, pathQuery string) (bool, bool, string) {
	if e.reason != "" {
		return false, true, e.reason
	}
	if !e.robots.Allowed(pathQuery) {
		return false, false, "robots.txt disallows " + pathQuery + " for " + UserAgentToken
	}
	return true, false, ""
}

// load fetches and interprets one robots.txt the way Google documents it:
// 2xx is parsed; 4xx (but 429) means no restrictions; 5xx, 429 and an
// unreachable host mean everything is disallowed, for a short time only.
func (c *robotsCache) load(ctx context.Context, e *robotsEntry, scheme, hostport string) {
	body, status, err := c.fetch(ctx, scheme, hostport)
	now := c.now()
	switch {
	case err != nil:
		e.reason, e.expires = "robots.txt unreachable: "+err.Error(), now.Add(c.eTTL)
	case status == http.StatusTooManyRequests || status >= 500:
		e.reason, e.expires = "robots.txt answered "+strconv.Itoa(status), now.Add(c.eTTL)
	case status >= 200 && status < 300:
		e.robots, e.expires = ParseRobots(body, UserAgentToken), now.Add(c.ttl)
	default: // 3xx left after redirects, 4xx: no restrictions
		e.robots, e.expires = &Robots{all: true}, now.Add(c.ttl)
	}
}

// defaultRobotsFetcher is a plain HTTP client with a short timeout whose
// dialer refuses the addresses jobs may not reach (the decision is made on
// the address connected to, so DNS cannot rebind it elsewhere).
func defaultRobotsFetcher(allowed func(host string, ip netip.Addr, port int) (bool, string)) RobotsFetcher {
	// The dialer is made per connection so its check knows the host name
	// (AllowAddrs may name hosts) as well as the address connected to.
	dial := func(ctx context.Context, network, hostport string) (net.Conn, error) {
		host, _, _ := net.SplitHostPort(hostport)
		d := &net.Dialer{Timeout: 5 * time.Second, Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return err
			}
			if ok, why := allowed(host, ap.Addr(), int(ap.Port())); !ok {
				return fmt.Errorf("address %s refused: %s", ap, why)
			}
			return nil
		}}
		return d.DialContext(ctx, network, hostport)
	}
	client := &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           dial,
			TLSHandshakeTimeout:   5 * time.Second,
			ResponseHeaderTimeout: 5 * time.Second,
			MaxIdleConnsPerHost:   1,
		},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 5 { // Google follows five redirects
				return errTooManyRedirects
			}
			return nil
		},
	}
	return func(ctx context.Context, scheme, hostport string) ([]byte, int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+hostport+"/robots.txt", nil)
		if err != nil {
			return nil, 0, err
		}
		req.Header.Set("User-Agent", UserAgentToken)
		resp, err := client.Do(req)
		if errors.Is(err, errTooManyRedirects) {
			return nil, http.StatusNotFound, nil // treated as no robots.txt
		}
		if err != nil {
			return nil, 0, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, robotsMaxBytes))
		if err != nil {
			return nil, 0, err
		}
		return body, resp.StatusCode, nil
	}
}

var errTooManyRedirects = errors.New("too many redirects")
