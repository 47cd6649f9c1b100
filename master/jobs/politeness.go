package jobs

import (
	"math"
	"time"
)

// budget is one politeness budget's use: running attempts, the token
// bucket's theoretical arrival time (GCRA) and the last start.
type budget struct {
	running int
	// inflight are the requests of job browsers in flight to the site
	// (requests.go).
	inflight int
	tat      time.Time
	last     time.Time
	// goTat and goLast pace the starts of the page loads themselves (the
	// start gate, Ready) with the same limits as the hand-overs.
	goTat, goLast time.Time
	// pending is the attempt ("id/attempt") whose go was given and whose
	// request time is not known yet (Started); the next go waits for it,
	// at most confirmWait after goAt.
	pending string
	goAt    time.Time
	// pause is the site's back-off (429/503); crawlDelay its robots.txt
	// Crawl-delay (backoff.go).
	pause      pause
	crawlDelay time.Duration
}

// idle: nothing runs and neither the hand-overs' limits nor the start
// gate's hold anything back any more, so the budget can be forgotten. The
// gate's state counts too: forgotten after a quick attempt ended, it let
// the next page load go at once (CI: two requests 0.96 s apart at a 1/s
// host once browsers leased in ~0.2 s).
func (b *budget) idle(now time.Time, maxInterval time.Duration) bool {
	maxInterval = max(maxInterval, b.crawlDelay)
	return b.running <= 0 && b.inflight <= 0 && b.pending == "" && b.pause.strikes == 0 &&
		!b.tat.After(now) && !b.goTat.After(now) && !b.pause.until.After(now) &&
		now.Sub(b.last) > maxInterval && now.Sub(b.goLast) > maxInterval
}

// allows reports whether a class with limits l may start an attempt in
// budget b at now, or the time it may (zero when only a running attempt's
// end frees it).
func (b *budget) allows(l Limits, now time.Time) (time.Time, bool) {
	if until := b.paused(now); !until.IsZero() {
		return until, false
	}
	l = b.limits(l)
	if l.Concurrent > 0 && b.running >= l.Concurrent {
		return time.Time{}, false
	}
	at := now
	if l.Interval > 0 && !b.last.IsZero() {
		if t := b.last.Add(l.Interval); t.After(at) {
			at = t
		}
	}
	if l.StartsPerSec > 0 {
		// GCRA: a token bucket of Burst tokens refilled at StartsPerSec.
		emit := emitInterval(l.StartsPerSec)
		burst := max(l.Burst, 1)
		if t := b.tat.Add(-time.Duration(burst-1) * emit); t.After(at) {
			at = t
		}
	}
	if at.After(now) {
		return at, false
	}
	return now, true
}

// emitInterval is 1/rate rounded up to the nanosecond, so rate starts
// never fit in one second by rounding (3/s: 333333334 ns apart).
func emitInterval(rate float64) time.Duration {
	return time.Duration(math.Ceil(float64(time.Second) / rate))
}

func (b *budget) take(l Limits, now time.Time) {
	l = b.limits(l)
	b.running++
	b.last = now
	if l.StartsPerSec > 0 {
		emit := emitInterval(l.StartsPerSec)
		if b.tat.Before(now) {
			b.tat = now
		}
		b.tat = b.tat.Add(emit)
	}
}

// startMargin widens the spacing of page-load starts beyond 1/rate, so
// that what varies between a start's recorded time and the site's handling
// of the request (the site's own scheduling under load) cannot push two
// requests into one second: 10% of the interval, at least 50 ms.
func startMargin(emit time.Duration) time.Duration { return max(emit/10, 50*time.Millisecond) }

// confirmWait bounds how long a go waits for the previous one's Started;
// confirmPoll is how often a waiting worker asks again meanwhile.
const (
	confirmWait = 5 * time.Second
	confirmPoll = 25 * time.Millisecond
)

// gate answers the start gate for attempt key ("id/attempt") of a class
// with limits l: 0 (go; the start is counted) or how long to wait before
// asking again. Hand-overs are already paced (allows), but a browser lease
// takes a varying time, so the page loads themselves are paced here too.
func (b *budget) gate(l Limits, key string, now time.Time) time.Duration {
	if until := b.paused(now); !until.IsZero() {
		return until.Sub(now)
	}
	l = b.limits(l)
	if b.pending != "" && b.pending != key && (l.StartsPerSec > 0 || l.Interval > 0) {
		// The previous go's request time is not known yet: spacing from
		// its go alone would let a late request crowd the next one.
		if until := b.goAt.Add(confirmWait); now.Before(until) {
			return min(confirmPoll, until.Sub(now))
		}
		b.pending = "" // never confirmed: its go time stands
	}
	at := now
	if l.Interval > 0 && !b.goLast.IsZero() {
		if t := b.goLast.Add(l.Interval + startMargin(l.Interval)); t.After(at) {
			at = t
		}
	}
	var emit time.Duration
	if l.StartsPerSec > 0 {
		emit = emitInterval(l.StartsPerSec)
		emit += startMargin(emit)
		burst := max(l.Burst, 1)
		if t := b.goTat.Add(-time.Duration(burst-1) * emit); t.After(at) {
			at = t
		}
	}
	if at.After(now) {
		return at.Sub(now)
	}
	b.goLast = now
	if emit > 0 {
		if b.goTat.Before(now) {
			b.goTat = now
		}
		b.goTat = b.goTat.Add(emit)
	}
	b.pending, b.goAt = key, now
	return 0
}

// started takes the worker's word on when the request of the go'd attempt
// key left (delay after the go): the spacing restarts from that moment,
// since the site sees the request, not the go. A word for another attempt
// changes nothing; one for a request never sent only ends the wait for it.
func (b *budget) started(l Limits, key string, notSent bool, delay time.Duration, now time.Time) {
	if b.pending != key {
		return
	}
	l = b.limits(l)
	b.pending = ""
	if notSent {
		return
	}
	delay = min(max(delay, 0), now.Sub(b.goAt))
	sent := b.goAt.Add(delay)
	b.goLast = sent
	if l.StartsPerSec > 0 {
		emit := emitInterval(l.StartsPerSec)
		emit += startMargin(emit)
		if t := sent.Add(emit); t.After(b.goTat) {
			b.goTat = t
		}
	}
}
