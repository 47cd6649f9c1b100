package jobs

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"3", 3 * time.Second, true},
		{" 120 ", 2 * time.Minute, true},
		{"0", 0, true},
		{"999999", backoffMax, true}, // capped
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0, true}, // a date past: no wait
		{"", 0, false},
		{"-5", 0, false},
		{"soon", 0, false},
		{"1.5", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseRetryAfter(tt.in, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseRetryAfter(%q) = %v %v, want %v %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// TestBudgetBackoff: 429/503 pause the budget for Retry-After, else for a
// doubling back-off; a success ends the doubling; a shorter pause never
// shortens a longer one; both the hand-overs and the start gate wait.
func TestBudgetBackoff(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	l := Limits{Concurrent: 2, StartsPerSec: 10}
	var b budget
	if d := b.answered(http.StatusOK, "", now); d != 0 {
		t.Fatalf("a 200 paused: %v", d)
	}
	if d := b.answered(http.StatusTooManyRequests, "3", now); d != 3*time.Second {
		t.Fatalf("429 Retry-After 3: %v", d)
	}
	if at, ok := b.allows(l, now.Add(2999*time.Millisecond)); ok || !at.Equal(now.Add(3*time.Second)) {
		t.Fatalf("allowed during the pause: %v %v", at, ok)
	}
	if w := b.gate(l, "j/1", now.Add(time.Second)); w != 2*time.Second {
		t.Fatalf("the start gate during the pause: %v", w)
	}
	if _, ok := b.allows(l, now.Add(3*time.Second)); !ok {
		t.Fatal("held after the pause")
	}
	// Without Retry-After: 2 s doubling from the first strike (the 429
	// above was one); a success resets it.
	for i, want := range []time.Duration{4 * time.Second, 8 * time.Second, 16 * time.Second} {
		if d := b.answered(http.StatusServiceUnavailable, "", now); d != want {
			t.Fatalf("strike %d: %v, want %v", i+2, d, want)
		}
	}
	b.answered(http.StatusNoContent, "", now)
	if d := b.answered(http.StatusServiceUnavailable, "", now.Add(time.Minute)); d != backoffFirst {
		t.Fatalf("after a success: %v", d)
	}
	// A short pause does not cut a long one.
	b.answered(http.StatusTooManyRequests, "100", now.Add(time.Minute))
	b.answered(http.StatusTooManyRequests, "1", now.Add(time.Minute))
	if until := b.paused(now.Add(time.Minute)); !until.Equal(now.Add(time.Minute + 100*time.Second)) {
		t.Fatalf("paused until %v", until)
	}
	// What a job queued during it waited.
	p := b.politeness(now.Add(time.Minute+10*time.Second), now.Add(time.Minute+100*time.Second))
	if p == nil || p.BackoffMs != 90_000 || p.BackoffReason != "HTTP 429, Retry-After 100" {
		t.Fatalf("politeness %+v", p)
	}
	if b.idle(now.Add(time.Hour), time.Second) {
		t.Fatal("a budget with strikes is forgotten (its doubling with it)")
	}
}

// TestCrawlDelay: robots.txt's Crawl-delay (ours or "*") raises the
// budget's interval, capped, and keeps the budget until it has passed.
func TestCrawlDelay(t *testing.T) {
	for _, tt := range []struct {
		body string
		want time.Duration
	}{
		{"User-agent: *\nCrawl-delay: 2\nDisallow: /x\n", 2 * time.Second},
		{"User-agent: CloudBrowser\nCrawl-delay: 0.5\n\nUser-agent: *\nCrawl-delay: 9\n", 500 * time.Millisecond},
		{"User-agent: other\nCrawl-delay: 9\n", 0},
		{"User-agent: *\nCrawl-delay: soon\n", 0},
		{"Crawl-delay: 5\nUser-agent: *\nDisallow:\n", 0}, // before any group
	} {
		if got := ParseRobots([]byte(tt.body), UserAgentToken).CrawlDelay; got != tt.want {
			t.Errorf("%q: crawl delay %v, want %v", tt.body, got, tt.want)
		}
	}
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	s := newScheduler(&Config{RobotsTTL: time.Hour}, nil)
	s.setCrawlDelay("a:80", 2*time.Second, now)
	b := s.budget("a:80")
	l := Limits{StartsPerSec: 10}
	b.take(l, now)
	b.running--
	if at, ok := b.allows(l, now.Add(time.Second)); ok || !at.Equal(now.Add(2*time.Second)) {
		t.Fatalf("a start 1 s after the last at Crawl-delay 2: %v %v", at, ok)
	}
	if b.idle(now.Add(1500*time.Millisecond), time.Second) {
		t.Fatal("forgotten before its Crawl-delay passed")
	}
	// A budget forgotten while idle comes back with its delay, until the
	// robots.txt it came from expires.
	s.forgetIdle(now.Add(time.Minute))
	if b2 := s.budget("a:80"); b2 == b || b2.crawlDelay != 2*time.Second {
		t.Fatalf("budget after being forgotten: %+v", b2)
	}
	s.forgetIdle(now.Add(2 * time.Hour))
	if d := s.budget("a:80").crawlDelay; d != 0 {
		t.Fatalf("crawl delay past its robots.txt: %v", d)
	}
	s.setCrawlDelay("a:80", time.Hour, now.Add(3*time.Hour))
	if d := s.budget("a:80").crawlDelay; d != crawlDelayMax {
		t.Fatalf("crawl delay not capped: %v", d)
	}
}

// TestOneAllowPolicy: each run carries the master's --jobs-allow, and a
// run the worker's egress guard refused anyway ends DISALLOWED (egress),
// not DONE, and is not retried.
func TestOneAllowPolicy(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.AllowAddrs = []string{"10.1.2.3:8080"}; c.ReportEvery = time.Hour })
	e.q.Workers().Set("w", 2)
	j := e.check("http://a.test/")
	l := e.pump()
	if len(l) != 1 || len(l[0].run.Allow) != 1 || l[0].run.Allow[0] != "10.1.2.3:8080" {
		t.Fatalf("runs %+v", l)
	}
	if err := e.done(l[0], wire.JobOutcome{Disallowed: true, Reason: "http://a.test/: blocked by the worker's egress guard"}); err != nil {
		t.Fatal(err)
	}
	got, _ := e.q.Get(j.ID)
	if got.State != wire.JobDisallowed || got.Disallow != DisallowEgress || !strings.Contains(got.Reason, "egress guard") || len(got.Attempts) != 1 {
		t.Fatalf("a job the worker's guard refused: %+v", got)
	}
	if l := e.pump(); len(l) != 0 {
		t.Fatalf("retried: %+v", l)
	}
}
