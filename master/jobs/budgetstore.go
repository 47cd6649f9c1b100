package jobs

import (
	"fmt"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/master/state"
)

// BucketBudgets keeps what sites asked of their budgets (docs/jobs.md,
// "Back-off and Crawl-delay"): a 429/503 pause with its strikes, and a
// robots.txt Crawl-delay, by budget key, so a master restart does not hit
// a site that asked for a pause at the full rate again.
const BucketBudgets = "job-budgets"

// budgetRecord is one budget's stored politeness; the zero record is
// deleted.
type budgetRecord struct {
	PauseFrom    time.Time `json:"pauseFrom,omitzero"`
	PauseUntil   time.Time `json:"pauseUntil,omitzero"`
	Reason       string    `json:"reason,omitempty"`
	Strikes      int       `json:"strikes,omitempty"`
	CrawlDelayMs int64     `json:"crawlDelayMs,omitempty"`
	CrawlExpires time.Time `json:"crawlExpires,omitzero"`
}

// record is what budget key holds now that outlives a restart; expired
// parts are left out.
func (s *scheduler) record(key string, now time.Time) budgetRecord {
	var r budgetRecord
	if b := s.budgets[key]; b != nil {
		if b.pause.until.After(now) {
			r.PauseFrom, r.PauseUntil, r.Reason = b.pause.from, b.pause.until, b.pause.reason
		}
		r.Strikes = b.pause.strikes
	}
	if c, ok := s.crawl[key]; ok && now.Before(c.expires) && c.d > 0 {
		r.CrawlDelayMs, r.CrawlExpires = c.d.Milliseconds(), c.expires
	}
	return r
}

// persist adds budget key's record to ch when it differs from the stored
// one (a deletion when nothing is left to keep).
func (s *scheduler) persist(key string, now time.Time, ch *change) {
	r := s.record(key, now)
	if old, ok := s.stored[key]; ok == (r != budgetRecord{}) && old == r {
		return
	}
	if ch.budgets == nil {
		ch.budgets = map[string]*budgetRecord{}
	}
	if r == (budgetRecord{}) {
		delete(s.stored, key)
		ch.budgets[key] = nil
		return
	}
	s.stored[key] = r
	ch.budgets[key] = &r
}

// persistAll re-checks every stored budget (the sweep: pauses and
// Crawl-delays that ran out are deleted).
func (s *scheduler) persistAll(now time.Time, ch *change) {
	for key := range s.stored {
		s.persist(key, now, ch)
	}
}

// restore takes the stored budgets back (New): pauses still running and
// strikes, and Crawl-delays whose robots.txt is still kept.
func (s *scheduler) restore(st *state.Store, now time.Time) error {
	err := state.Each(st, BucketBudgets, func(key string, r budgetRecord) {
		s.stored[key] = r
		if r.CrawlDelayMs > 0 && now.Before(r.CrawlExpires) {
			s.crawl[key] = crawlDelay{d: time.Duration(r.CrawlDelayMs) * time.Millisecond, expires: r.CrawlExpires}
		}
		if r.Strikes > 0 || r.PauseUntil.After(now) || s.crawl[key].d > 0 {
			b := s.budget(key)
			if r.PauseUntil.After(now) {
				b.pause.from, b.pause.until, b.pause.reason = r.PauseFrom, r.PauseUntil, r.Reason
			}
			b.pause.strikes = r.Strikes
		}
	})
	if err != nil {
		return fmt.Errorf("jobs: load budgets: %w", err)
	}
	return nil
}
