package jobs

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

type hostQueue struct {
	class  string
	jobs   []*Job
	limits Limits
}

// scheduler is the per-host placement and politeness state: the host
// queues holding a slot (round robin), the leftover queue, the politeness
// budgets and the workers' job slots. It has no lock of its own: the
// queue's mutex guards it, since every decision it makes goes with a
// change of the jobs' state that must be seen at once.
type scheduler struct {
	classes     *classes
	queueCount  int
	queueLen    int
	leftoverMax int
	maxInterval time.Duration // the longest class interval (budget cleanup)

	hosts      map[string]*hostQueue
	order      []string // classes holding a host slot, round-robin order
	rr         int
	leftover   []*Job
	leftoverBy map[string]int
	shrunk     bool // a host queue lost a job since the last refill
	budgets    map[string]*budget
	// crawl keeps the budgets' Crawl-delays for as long as their
	// robots.txt is (robotsTTL), so a budget forgotten while idle comes
	// back with its delay.
	crawl     map[string]crawlDelay
	robotsTTL time.Duration
	wake      time.Time // earliest time a class blocked by its limits may start
	workers   workerSlots
	// stored are the budget records in the store (budgetstore.go).
	stored map[string]budgetRecord
	// reqs are the requests in flight by attempt ("id/attempt"), by
	// request key (requests.go).
	reqs map[string]map[string]heldRequest
}

func newScheduler(cfg *Config, cl *classes) *scheduler {
	s := &scheduler{classes: cl, queueCount: cfg.QueueCount, queueLen: cfg.QueueLen, leftoverMax: cfg.LeftoverMax,
		maxInterval: cfg.Defaults.Interval,
		hosts:       map[string]*hostQueue{}, leftoverBy: map[string]int{}, budgets: map[string]*budget{},
		crawl: map[string]crawlDelay{}, robotsTTL: cfg.RobotsTTL, stored: map[string]budgetRecord{},
		reqs:    map[string]map[string]heldRequest{},
		workers: workerSlots{byID: map[string]*worker{}}}
	for _, r := range cfg.Classes {
		if r.Limits != nil {
			s.maxInterval = max(s.maxInterval, r.Limits.Interval)
		}
	}
	return s
}

// fits reports whether the queued ones of preps fit: the leftover queue
// must stay within its bound.
func (s *scheduler) fits(preps []prepared) error {
	extra, newSlots := 0, 0
	qlen := map[string]int{}
	left := map[string]int{}
	for _, p := range preps {
		j := p.job
		if j.State != wire.JobQueued {
			continue
		}
		c := j.Class
		hq := s.hosts[c]
		n := qlen[c]
		if hq != nil {
			n += len(hq.jobs)
		}
		slot := hq != nil || qlen[c] > 0 || len(s.hosts)+newSlots < s.queueCount
		if s.leftoverBy[c]+left[c] == 0 && slot && n < s.queueLen {
			if hq == nil && qlen[c] == 0 {
				newSlots++
			}
			qlen[c]++
			continue
		}
		left[c]++
		extra++
	}
	if extra > 0 && len(s.leftover)+extra > s.leftoverMax {
		return &QueueFullError{RetryAfter: s.retryAfter(len(s.leftover) + extra - s.leftoverMax)}
	}
	return nil
}

// retryAfter estimates when n places free up: n starts at the host queues'
// combined start rate.
func (s *scheduler) retryAfter(n int) time.Duration {
	rate := 0.0
	for _, hq := range s.hosts {
		rate += hq.limits.StartsPerSec
	}
	config.OrDefault(&rate, 1)
	d := time.Duration(float64(n)/rate*float64(time.Second)) + time.Second
	return min(d.Round(time.Second), time.Hour)
}

// place puts a queued job into its class's host queue, or the leftover
// queue when the class has no slot or its queue is full. A class with jobs
// in the leftover queue keeps adding there, so each class stays FIFO. front
// (a retry) puts it ahead of its class.
func (s *scheduler) place(j *Job, front bool) {
	c := j.Class
	hq := s.hosts[c]
	if front {
		if hq == nil && len(s.hosts) < s.queueCount {
			hq = s.newHostQueue(j)
		}
		if hq != nil {
			// A retry may take its queue one over Queue_Len for a while.
			hq.jobs = slices.Insert(hq.jobs, 0, j)
			return
		}
		s.leftover = slices.Insert(s.leftover, 0, j)
		s.leftoverBy[c]++
		return
	}
	if s.leftoverBy[c] == 0 {
		if hq == nil && len(s.hosts) < s.queueCount {
			hq = s.newHostQueue(j)
		}
		if hq != nil && len(hq.jobs) < s.queueLen {
			hq.jobs = append(hq.jobs, j)
			return
		}
	}
	s.leftover = append(s.leftover, j)
	s.leftoverBy[c]++
}

func (s *scheduler) newHostQueue(j *Job) *hostQueue {
	hq := &hostQueue{class: j.Class, limits: s.classes.limitsOf(j)}
	s.hosts[j.Class] = hq
	s.order = append(s.order, j.Class)
	return hq
}

// refill frees the slots of empty host queues and moves leftover jobs,
// oldest first, into host queues with room.
func (s *scheduler) refill() {
	for i := 0; i < len(s.order); {
		c := s.order[i]
		if len(s.hosts[c].jobs) == 0 {
			delete(s.hosts, c)
			s.order = slices.Delete(s.order, i, i+1)
			if s.rr > i {
				s.rr--
			}
			continue
		}
		i++
	}
	if len(s.leftover) == 0 || !s.shrunk {
		return
	}
	s.shrunk = false
	stuck := map[string]bool{}
	kept := s.leftover[:0]
	for _, j := range s.leftover {
		c := j.Class
		hq := s.hosts[c]
		if !stuck[c] {
			if hq == nil && len(s.hosts) < s.queueCount {
				hq = s.newHostQueue(j)
			}
			if hq != nil && len(hq.jobs) < s.queueLen {
				hq.jobs = append(hq.jobs, j)
				s.leftoverBy[c]--
				if s.leftoverBy[c] == 0 {
					delete(s.leftoverBy, c)
				}
				continue
			}
		}
		stuck[c] = true
		kept = append(kept, j)
	}
	clear(s.leftover[len(kept):])
	s.leftover = kept
}

// removeQueued takes a queued job out of its queue.
func (s *scheduler) removeQueued(j *Job) {
	if hq := s.hosts[j.Class]; hq != nil {
		if i := slices.Index(hq.jobs, j); i >= 0 {
			hq.jobs = slices.Delete(hq.jobs, i, i+1)
			s.shrunk = true
			return
		}
	}
	if i := slices.Index(s.leftover, j); i >= 0 {
		s.leftover = slices.Delete(s.leftover, i, i+1)
		s.leftoverBy[j.Class]--
		if s.leftoverBy[j.Class] == 0 {
			delete(s.leftoverBy, j.Class)
		}
	}
}

// queued counts the queued jobs by class (host queues) plus "leftover".
func (s *scheduler) queued() map[string]int {
	out := map[string]int{}
	for c, hq := range s.hosts {
		if len(hq.jobs) > 0 {
			out[c] = len(hq.jobs)
		}
	}
	out["leftover"] = len(s.leftover)
	return out
}

func (s *scheduler) budget(key string) *budget {
	b := s.budgets[key]
	if b == nil {
		b = &budget{crawlDelay: s.crawl[key].d}
		s.budgets[key] = b
	}
	return b
}

// crawlDelay is a budget's robots.txt Crawl-delay and until when it holds.
type crawlDelay struct {
	d       time.Duration
	expires time.Time
}

// setCrawlDelay takes a Crawl-delay for budget key (robots.txt read for
// one of its jobs): the largest one seen within robotsTTL, capped.
func (s *scheduler) setCrawlDelay(key string, d time.Duration, now time.Time) {
	c := s.crawl[key]
	if now.After(c.expires) {
		c = crawlDelay{}
	}
	c.d, c.expires = max(c.d, min(d, crawlDelayMax)), now.Add(s.robotsTTL)
	s.crawl[key] = c
	s.budget(key).crawlDelay = c.d
}

// start takes off their queues the jobs that may start now: FIFO within a
// class, one start per class per round across classes (round robin),
// within each budget's limits, and only on free worker slots. begin is told
// of each with its worker, whose slot and budget are already taken. wake
// becomes the earliest time a class its limits held back may start.
func (s *scheduler) start(now time.Time, begin func(j *Job, worker string)) {
	s.wake = time.Time{}
	s.refill()
	for len(s.order) > 0 && s.workers.free(now) > 0 {
		started := false
		n := len(s.order)
		for i := range n {
			hq := s.hosts[s.order[(s.rr+i)%n]]
			if len(hq.jobs) == 0 {
				continue
			}
			j := hq.jobs[0]
			b := s.budget(j.Budget)
			if at, ok := b.allows(hq.limits, now); !ok {
				if !at.IsZero() && (s.wake.IsZero() || at.Before(s.wake)) {
					s.wake = at
				}
				continue
			}
			wid := s.workers.pick(j, now)
			if wid == "" {
				continue
			}
			hq.jobs = hq.jobs[1:]
			s.shrunk = true
			b.take(hq.limits, now)
			s.workers.byID[wid].used++
			begin(j, wid)
			started = true
			if s.workers.free(now) == 0 {
				break
			}
		}
		if n > 0 {
			s.rr = (s.rr + 1) % n
		}
		s.refill()
		if !started {
			break
		}
	}
}

// release frees the budget and worker slot of j's running attempt.
func (s *scheduler) release(j *Job, now time.Time) {
	if b := s.budgets[j.Budget]; b != nil {
		b.running--
	}
	s.dropRequests(j.ID, j.Tries, now)
	s.workers.release(j.Worker)
}

// gate is the start gate for j's running attempt (Workers.Ready).
func (s *scheduler) gate(j *Job, attempt int, now time.Time) time.Duration {
	return s.budget(j.Budget).gate(s.classes.limitsOf(j), attemptKey(j.ID, attempt), now)
}

// confirm records when the request of j's go'd attempt left
// (Workers.Started).
func (s *scheduler) confirm(j *Job, st wire.JobStarted, now time.Time) {
	s.budget(j.Budget).started(s.classes.limitsOf(j), attemptKey(st.ID, st.Attempt), st.NotSent, time.Duration(st.DelayNs), now)
}

// polite lists the budgets their sites hold back now, by name.
func (s *scheduler) polite(now time.Time) []wire.BudgetPoliteness {
	var out []wire.BudgetPoliteness
	for k, b := range s.budgets {
		p := wire.BudgetPoliteness{Budget: k, CrawlDelayMs: b.crawlDelay.Milliseconds()}
		if until := b.paused(now); !until.IsZero() {
			p.PausedUntil, p.Reason = until, b.pause.reason
		}
		if !p.PausedUntil.IsZero() || p.CrawlDelayMs > 0 {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b wire.BudgetPoliteness) int { return strings.Compare(a.Budget, b.Budget) })
	return out
}

// forgetIdle forgets the budgets nobody uses and whose limits no longer
// hold anything back, so the map stays as small as the active sites.
func (s *scheduler) forgetIdle(now time.Time) {
	for k, b := range s.budgets {
		if b.idle(now, s.maxInterval) {
			delete(s.budgets, k)
		}
	}
	for k, c := range s.crawl {
		if now.After(c.expires) {
			delete(s.crawl, k)
		}
	}
}

// attemptKey names one attempt of a job in a budget's start gate.
func attemptKey(id string, attempt int) string { return id + "/" + strconv.Itoa(attempt) }
