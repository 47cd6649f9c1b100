// Package jobs is the master's job queue and scheduler (docs/jobs.md):
// per-host queues with a bounded number of host slots and a
// leftover queue (the url-server document), politeness budgets keyed by the
// resolved IP:port so aliases share one budget, per-class concurrency,
// starts per second and a minimum interval between starts (the url-checker
// document's CLASS_INTERVAL), job slots per worker (nothing leaves the queue
// while no slot is free), leases renewed by the worker's WORKING reports,
// bounded retries on another worker, robots.txt, and monitors (periodic
// checks, and scheduled renders that keep the render cache warm).
//
// It is a library: no HTTP and no RMI. The master wires a Runner (RMI to the
// workers), the navigation Policy, the hooks to the render cache, and calls
// the queue's Workers when workers report and its Monitors for the monitor
// API. Every state change is one transaction in the master's state store, so
// a crash leaves the old or the new state.
package jobs

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/internal/egress"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// Runner hands attempts to workers (the master implements it over RMI).
type Runner interface {
	// Run asks workerID to start run. It must answer at once: nil means
	// the worker accepted and will report Working/Done; an error means it
	// refused, and the job stays queued (that worker is skipped until its
	// next Workers.Set).
	Run(ctx context.Context, workerID string, run wire.JobRun) error
	// Cancel stops attempt of job id on workerID (best effort).
	Cancel(ctx context.Context, workerID, id string, attempt int) error
}

// RobotsFetcher fetches scheme://hostport/robots.txt: its body, HTTP status
// (after redirects), or an error when the host could not be reached.
type RobotsFetcher func(ctx context.Context, scheme, hostport string) (body []byte, status int, err error)

// Limits are one class's politeness limits.
type Limits struct {
	// Concurrent is the most attempts running at once (0 = no limit).
	Concurrent int `json:"concurrent"`
	// StartsPerSec bounds starts with a token bucket (0 = no limit).
	StartsPerSec float64 `json:"startsPerSec"`
	// Burst is the bucket's size (0 = 1: starts are at least
	// 1/StartsPerSec apart, so no one-second window sees more than
	// StartsPerSec starts, rounded up).
	Burst int `json:"burst"`
	// Interval is the least time between two starts in the class (the
	// url-checker document's CLASS_INTERVAL; 0 = none).
	Interval time.Duration `json:"interval"`
}

// ClassRule puts the hosts matching Pattern into one class and/or gives
// them their own limits. Rules are tried in order; the first match wins.
type ClassRule struct {
	// Pattern is a host glob ("*.example.com", "api.example.com:8443"; a
	// pattern with a colon is matched against host:port, else against the
	// host) or, prefixed with "re:", a regular expression on host:port.
	Pattern string `json:"pattern"`
	// Class names the class ("" = each host:port stays its own class).
	// Hosts of a named class share one budget, whatever their addresses.
	Class string `json:"class,omitempty"`
	// Limits override the defaults (nil = the defaults).
	Limits *Limits `json:"limits,omitempty"`
}

// Config configures a Queue. Zero fields take DefaultConfig's values.
type Config struct {
	// QueueCount is how many per-host queues exist at once (url-server
	// Queue_Count); QueueLen bounds each (Queue_Len).
	QueueCount int
	QueueLen   int
	// LeftoverMax bounds the leftover queue; above it Submit fails with a
	// *QueueFullError (429 with Retry-After).
	LeftoverMax int
	// Defaults are every class's limits unless a rule overrides them.
	Defaults Limits
	// Classes are the class rules, in order.
	Classes []ClassRule
	// ReportEvery is how often workers report WORKING; an attempt without
	// news for twice that is given up.
	ReportEvery time.Duration
	// MaxAttempts bounds the attempts of one job.
	MaxAttempts int
	// Retention: finished jobs are removed after Retention, and beyond
	// MaxFinished (the oldest first).
	Retention   time.Duration
	MaxFinished int
	// MaxResultBytes bounds a result (a larger one fails the job).
	MaxResultBytes int64
	// AllowAddrs are egress rules naming addresses jobs may reach although
	// their class (loopback, private, link-local, CGNAT...) is refused by
	// default. Metadata addresses are never allowed.
	AllowAddrs []string
	// Resolver resolves a host name (default net.DefaultResolver).
	Resolver func(ctx context.Context, host string) ([]netip.Addr, error)
	// Robots fetches robots.txt (default: an HTTP client whose dialer
	// refuses the addresses jobs may not reach). RobotsTTL is how long a
	// fetched file is kept; RobotsErrorTTL how long an unreachable one
	// (which disallows everything) is.
	Robots         RobotsFetcher
	RobotsTTL      time.Duration
	RobotsErrorTTL time.Duration
	// Clock is the time source (tests pass a fake one).
	Clock clock.Clock
	// Policy is the app's navigation policy: false refuses the job
	// (DISALLOWED with reason). nil allows everything.
	Policy func(spec wire.JobSpec) (ok bool, reason string)
	// Runner starts and cancels attempts on workers (required).
	Runner Runner
	// OnFinish is told of every job that reached an end state, with the
	// result's body for a DONE job (the render cache). It runs outside the
	// queue's lock and must not block for long.
	OnFinish func(job Job, body []byte)
	// OnMonitorChange is told when a monitor's state or content hash
	// changed (old and new records), so cached renders of its URL can be
	// marked stale.
	OnMonitorChange func(old, new Monitor)
	// MonitorCache, if set, lets render monitors warm the render cache:
	// each scheduled render is keyed as an on-demand one is, and its job
	// holds that signature's reservation, so its result is cached.
	MonitorCache *MonitorCache
	// MasterID is this master's incarnation, passed in every JobRun.
	MasterID string
	Logger   zerolog.Logger
}

// MonitorCache is what render monitors need of the render cache.
type MonitorCache struct {
	// Key computes a render's signature (as CacheKey's).
	Key Keyer
	// Reserve takes the signature's reservation for a monitor's job
	// (s.Signature() is set); "" when it cannot (another render of it is
	// being made: the job then runs without filling the cache).
	Reserve func(s Spec) (holder string)
	// Release ends a reservation whose job was not submitted.
	Release func(s Spec, holder string, cause error)
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		QueueCount:     64,
		QueueLen:       1000,
		LeftoverMax:    10000,
		Defaults:       Limits{Concurrent: 2, StartsPerSec: 1},
		ReportEvery:    2 * time.Second,
		MaxAttempts:    3,
		Retention:      24 * time.Hour,
		MaxFinished:    100000,
		MaxResultBytes: 32 << 20,
		RobotsTTL:      time.Hour,
		RobotsErrorTTL: 5 * time.Minute,
		Clock:          clock.Real,
		Logger:         zerolog.Nop(),
	}
}

func (c *Config) fill() {
	d := DefaultConfig()
	config.OrDefault(&c.QueueCount, d.QueueCount)
	config.OrDefault(&c.QueueLen, d.QueueLen)
	config.OrDefault(&c.LeftoverMax, d.LeftoverMax)
	if c.Defaults == (Limits{}) {
		c.Defaults = d.Defaults
	}
	config.OrDefault(&c.ReportEvery, d.ReportEvery)
	config.OrDefault(&c.MaxAttempts, d.MaxAttempts)
	config.OrDefault(&c.Retention, d.Retention)
	config.OrDefault(&c.MaxFinished, d.MaxFinished)
	config.OrDefault(&c.MaxResultBytes, d.MaxResultBytes)
	config.OrDefault(&c.RobotsTTL, d.RobotsTTL)
	config.OrDefault(&c.RobotsErrorTTL, d.RobotsErrorTTL)
	if c.Clock == nil {
		c.Clock = clock.Real
	}
	if c.Resolver == nil {
		c.Resolver = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
}

// classRule is a compiled ClassRule.
type classRule struct {
	ClassRule
	re *regexp.Regexp
}

func compileRules(rules []ClassRule) ([]classRule, error) {
	out := make([]classRule, 0, len(rules))
	for i, r := range rules {
		c := classRule{ClassRule: r}
		switch {
		case strings.HasPrefix(r.Pattern, "re:"):
			re, err := regexp.Compile(strings.TrimPrefix(r.Pattern, "re:"))
			if err != nil {
				return nil, fmt.Errorf("jobs: classes[%d]: pattern %q: %w", i, r.Pattern, err)
			}
			c.re = re
		case r.Pattern == "":
			return nil, fmt.Errorf("jobs: classes[%d]: empty pattern", i)
		default:
			if _, err := path.Match(r.Pattern, ""); err != nil {
				return nil, fmt.Errorf("jobs: classes[%d]: pattern %q: %w", i, r.Pattern, err)
			}
		}
		if r.Limits != nil && (r.Limits.Concurrent < 0 || r.Limits.StartsPerSec < 0 || r.Limits.Interval < 0 || r.Limits.Burst < 0) {
			return nil, fmt.Errorf("jobs: classes[%d]: negative limit", i)
		}
		out = append(out, c)
	}
	return out, nil
}

// match reports whether host (lower case) at hostport matches the rule.
func (r classRule) match(host, hostport string) bool {
	if r.re != nil {
		return r.re.MatchString(hostport)
	}
	subject := host
	if strings.Contains(r.Pattern, ":") {
		subject = hostport
	}
	ok, _ := path.Match(strings.ToLower(r.Pattern), subject)
	return ok
}

// classes maps hosts to their class and limits with the class rules.
type classes struct {
	rules    []classRule
	defaults Limits
}

// of returns a host's class, whether a rule named it, and its limits.
func (c *classes) of(host, hostport string) (string, bool, Limits) {
	for _, r := range c.rules {
		if !r.match(host, hostport) {
			continue
		}
		limits := c.defaults
		if r.Limits != nil {
			limits = *r.Limits
		}
		if r.Class != "" {
			return r.Class, true, limits
		}
		return hostport, false, limits
	}
	return hostport, false, c.defaults
}

// limitsOf returns the limits of a job's class, from its URL.
func (c *classes) limitsOf(j *Job) Limits {
	u, err := url.Parse(j.Spec.URL)
	if err != nil {
		return c.defaults
	}
	host, _, hp := hostPort(u)
	_, _, l := c.of(host, hp)
	return l
}

// allowRules parses AllowAddrs.
func allowRules(list []string) ([]egress.Rule, error) {
	rules, err := egress.ParseRules("jobs allow-addrs", list)
	if err != nil {
		return nil, fmt.Errorf("jobs: %w", err)
	}
	return rules, nil
}
