package jobs

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// Back-off (docs/jobs.md, "Back-off"): a site that answers 429 or 503 is
// asking for fewer requests, so its budget pauses: for its Retry-After
// (seconds or an HTTP date) when it sends one, else for an exponential
// back-off from backoffFirst; both capped at backoffMax. A 2xx or 3xx
// answer ends the doubling. robots.txt's Crawl-delay raises the budget's
// interval between starts, capped at crawlDelayMax.
const (
	backoffFirst  = 2 * time.Second
	backoffMax    = 5 * time.Minute
	crawlDelayMax = time.Minute
)

// pause is a budget's back-off now.
type pause struct {
	from, until time.Time
	reason      string // "HTTP 429, Retry-After 3" …
	strikes     int    // 429/503 answers in a row
}

// parseRetryAfter reads a Retry-After value: delay-seconds or an
// HTTP-date (RFC 9110 10.2.3); ok false when absent or unreadable.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		return time.Duration(min(n, int64(backoffMax/time.Second))) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(t.Sub(now), 0), true
}

// answered takes the site's answer to one of the budget's requests: 429
// or 503 pauses it (the pause only ever grows), 2xx/3xx ends the doubling.
// It reports the pause it set (0: none).
func (b *budget) answered(status int, retryAfter string, now time.Time) time.Duration {
	switch {
	case status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable:
		b.pause.strikes++
		d, ok := parseRetryAfter(retryAfter, now)
		reason := fmt.Sprintf("HTTP %d, Retry-After %s", status, strings.TrimSpace(retryAfter))
		if !ok {
			d = backoffFirst << min(b.pause.strikes-1, 16)
			reason = fmt.Sprintf("HTTP %d, back-off %s", status, min(d, backoffMax))
		}
		d = min(d, backoffMax)
		if until := now.Add(d); until.After(b.pause.until) {
			b.pause.from, b.pause.until, b.pause.reason = now, until, reason
		}
		return d
	case status >= 200 && status < 400:
		b.pause.strikes = 0
	}
	return 0
}

// paused reports until when the budget holds every start back (zero: it
// does not).
func (b *budget) paused(now time.Time) time.Time {
	if now.Before(b.pause.until) {
		return b.pause.until
	}
	return time.Time{}
}

// limits are l with the site's Crawl-delay as its least interval.
func (b *budget) limits(l Limits) Limits {
	if b.crawlDelay > l.Interval {
		l.Interval = b.crawlDelay
	}
	return l
}

// politeness is what a job's host asked of it while it was queued: the
// time it waited for a back-off, and the Crawl-delay.
func (b *budget) politeness(queued, now time.Time) *wire.JobPoliteness {
	var p wire.JobPoliteness
	if !b.pause.until.IsZero() {
		from, until := b.pause.from, b.pause.until
		if queued.After(from) {
			from = queued
		}
		if now.Before(until) {
			until = now
		}
		if from.Before(until) {
			p.BackoffMs, p.BackoffReason = until.Sub(from).Milliseconds(), b.pause.reason
		}
	}
	p.CrawlDelayMs = b.crawlDelay.Milliseconds()
	if p == (wire.JobPoliteness{}) {
		return nil
	}
	return &p
}
