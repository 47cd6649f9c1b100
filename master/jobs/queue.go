package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/state"
	"github.com/rs/zerolog"
)

// Buckets of the state store.
const (
	BucketJobs     = "jobs"
	BucketResults  = "job-results"
	BucketMonitors = "monitors"
	BucketChanges  = "monitor-changes"
	changesKey     = "recent"
	maxChanges     = 200
)

// Queue is the job queue and scheduler. Its methods are safe for
// concurrent use. Its parts share its lock: the scheduler's per-host
// placement and politeness state, the worker side (Workers) and the
// monitors (Monitors); the decider runs before the lock is taken.
type Queue struct {
	cfg  Config
	st   *state.Store
	log  zerolog.Logger
	dec  *decider
	kick chan struct{}
	m    *metrics
	mons *Monitors
	wk   *Workers

	mu       sync.Mutex
	active   map[string]*Job // queued and working
	sched    *scheduler
	finished []finishedRef // by finish time, for the retention sweep
	seq      uint64
	waiters  map[string][]chan struct{}
	outcomes map[string]int64
}

type finishedRef struct {
	id string
	at time.Time
}

// New opens the queue on st, rebuilding the queues from what st holds:
// queued jobs stay queued in creation order, working ones go back to the
// queue (their attempt is lost: "master restarted").
func New(cfg Config, st *state.Store) (*Queue, error) {
	cfg.fill()
	if cfg.Runner == nil {
		return nil, errors.New("jobs: a Runner is required")
	}
	if st == nil {
		return nil, errors.New("jobs: a state store is required")
	}
	rules, err := compileRules(cfg.Classes)
	if err != nil {
		return nil, err
	}
	allow, err := allowRules(cfg.AllowAddrs)
	if err != nil {
		return nil, err
	}
	cl := &classes{rules: rules, defaults: cfg.Defaults}
	q := &Queue{cfg: cfg, st: st, log: cfg.Logger.With().Str("component", "jobs").Logger(),
		kick: make(chan struct{}, 1), m: newMetrics(),
		active: map[string]*Job{}, sched: newScheduler(&cfg, cl), waiters: map[string][]chan struct{}{},
		outcomes: map[string]int64{}}
	q.m.q = q
	q.mons = &Monitors{q: q, byID: map[string]*Monitor{}}
	q.wk = &Workers{q: q}
	q.dec = &decider{classes: cl, allow: allow, resolve: cfg.Resolver, policy: cfg.Policy, log: q.log}
	if cfg.Robots == nil {
		cfg.Robots = defaultRobotsFetcher(q.dec.addrAllowed)
		q.cfg.Robots = cfg.Robots
	}
	q.dec.robots = &robotsCache{fetch: cfg.Robots, ttl: cfg.RobotsTTL, eTTL: cfg.RobotsErrorTTL, now: cfg.Clock.Now, entries: map[string]*robotsEntry{}}
	if err := q.load(); err != nil {
		return nil, err
	}
	return q, nil
}

func (q *Queue) now() time.Time { return q.cfg.Clock.Now() }

// load rebuilds the in-memory queues from the store.
func (q *Queue) load() error {
	now := q.now()
	var queued []*Job
	ch := &change{}
	err := state.Each(q.st, BucketJobs, func(_ string, r record) {
		j := r.job()
		if j.Seq > q.seq {
			q.seq = j.Seq
		}
		switch {
		case j.Ended():
			q.finished = append(q.finished, finishedRef{j.ID, j.Finished})
			return
		case j.State == wire.JobWorking:
			// The attempt is lost; its later reports carry an old number.
			if n := len(j.Attempts); n > 0 {
				j.Attempts[n-1].Ended, j.Attempts[n-1].Err = now, "master restarted"
			}
			j.Worker, j.Deadline = "", time.Time{}
			if len(j.Attempts) >= q.cfg.MaxAttempts {
				j.State, j.Reason, j.Finished = wire.JobFailed, attemptReasons(j), now
				q.finished = append(q.finished, finishedRef{j.ID, j.Finished})
				q.outcomes[j.State]++
				ch.put(j)
				return
			}
			j.State = wire.JobQueued
			ch.put(j)
		}
		queued = append(queued, j)
	})
	if err != nil {
		return fmt.Errorf("jobs: load: %w", err)
	}
	slices.SortFunc(queued, func(a, b *Job) int { return cmpUint(a.Seq, b.Seq) })
	for _, j := range queued {
		q.active[j.ID] = j
		q.sched.place(j, false)
	}
	sort.Slice(q.finished, func(a, b int) bool { return q.finished[a].at.Before(q.finished[b].at) })
	if err := q.mons.load(); err != nil {
		return err
	}
	if err := q.sched.restore(q.st, now); err != nil {
		return err
	}
	if len(queued) > 0 {
		q.log.Info().Int("queued", len(queued)).Int("finished", len(q.finished)).Msg("job queue restored")
	}
	return q.write(ch)
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// change is what one state change writes, in one transaction, and the
// hooks to call once the lock is released.
type change struct {
	jobs     []*Job
	bodies   map[string][]byte
	delJobs  []string
	monitors []*Monitor
	delMons  []string
	changes  bool
	budgets  map[string]*budgetRecord // nil: delete

	finished []finishNote
	monNotes [][2]Monitor
	cancels  []cancelNote
}

type finishNote struct {
	job  Job
	body []byte
}

type cancelNote struct {
	worker, id string
	attempt    int
}

func (c *change) put(j *Job) { c.jobs = append(c.jobs, j) }

func (c *change) empty() bool {
	return len(c.jobs) == 0 && len(c.bodies) == 0 && len(c.delJobs) == 0 && len(c.monitors) == 0 && len(c.delMons) == 0 && !c.changes &&
		len(c.budgets) == 0
}

// write stores a change as one transaction (called with q.mu held, so
// writes land in the order the changes were made).
func (q *Queue) write(c *change) error {
	if c.empty() {
		return nil
	}
	type kv struct {
		bucket, key string
		raw         []byte
	}
	var puts []kv
	for _, j := range c.jobs {
		raw, err := json.Marshal(toRecord(j))
		if err != nil {
			return fmt.Errorf("jobs: encode %s: %w", j.ID, err)
		}
		puts = append(puts, kv{BucketJobs, j.ID, raw})
	}
	for _, m := range c.monitors {
		raw, err := json.Marshal(m)
		if err != nil {
			return fmt.Errorf("jobs: encode monitor %s: %w", m.ID, err)
		}
		puts = append(puts, kv{BucketMonitors, m.ID, raw})
	}
	if c.changes {
		raw, err := json.Marshal(q.mons.changes)
		if err != nil {
			return err
		}
		puts = append(puts, kv{BucketChanges, changesKey, raw})
	}
	var delBudgets []string
	for k, r := range c.budgets {
		if r == nil {
			delBudgets = append(delBudgets, k)
			continue
		}
		raw, err := json.Marshal(r)
		if err != nil {
			return err
		}
		puts = append(puts, kv{BucketBudgets, k, raw})
	}
	err := q.st.Update(func(tx state.Tx) error {
		for _, p := range puts {
			if err := tx.PutRaw(p.bucket, p.key, p.raw); err != nil {
				return err
			}
		}
		for id, body := range c.bodies {
			if err := tx.PutRaw(BucketResults, id, body); err != nil {
				return err
			}
		}
		for _, id := range c.delJobs {
			if err := tx.Delete(BucketJobs, id); err != nil {
				return err
			}
			if err := tx.Delete(BucketResults, id); err != nil {
				return err
			}
		}
		for _, id := range c.delMons {
			if err := tx.Delete(BucketMonitors, id); err != nil {
				return err
			}
		}
		for _, k := range delBudgets {
			if err := tx.Delete(BucketBudgets, k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("jobs: store: %w", err)
	}
	return nil
}

// commit writes c (logging a failure: the in-memory state goes on, and the
// store catches up at the job's next change) and returns the hooks to run.
func (q *Queue) commit(c *change) {
	if err := q.write(c); err != nil {
		q.log.Error().Err(err).Msg("job state not stored")
	}
}

// after runs c's hooks and cancels, outside the lock.
func (q *Queue) after(ctx context.Context, c *change) {
	for _, n := range c.cancels {
		if err := q.cfg.Runner.Cancel(ctx, n.worker, n.id, n.attempt); err != nil {
			q.log.Debug().Err(err).Str("job", n.id).Str("worker", n.worker).Msg("cancel not delivered")
		}
	}
	if q.cfg.OnFinish != nil {
		for _, f := range c.finished {
			q.cfg.OnFinish(f.job, f.body)
		}
	}
	if q.cfg.OnMonitorChange != nil {
		for _, n := range c.monNotes {
			q.cfg.OnMonitorChange(n[0], n[1])
		}
	}
}

// Monitors returns the queue's monitors.
func (q *Queue) Monitors() *Monitors { return q.mons }

// Workers returns the queue's side facing the workers: their slots and
// reports.
func (q *Queue) Workers() *Workers { return q.wk }

// Kick asks Run to pump soon (a change outside the queue's own calls).
func (q *Queue) Kick() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// ---- Submission

// Submit decides and queues one job Admit checked. A job refused by a rule
// is stored DISALLOWED (not an error); a full queue is a *QueueFullError.
func (q *Queue) Submit(ctx context.Context, spec Spec) (Job, error) {
	jobs, err := q.submit(ctx, []Spec{spec}, nil)
	if err != nil {
		return Job{}, err
	}
	return jobs[0], nil
}

// SubmitBatch submits several jobs at once (AdmitBatch checked them): all
// are queued or none.
func (q *Queue) SubmitBatch(ctx context.Context, specs []Spec) ([]Job, error) {
	return q.submit(ctx, specs, nil)
}

// prepared is a job decided outside the lock.
type prepared struct {
	job        *Job
	crawlDelay time.Duration // its site's robots.txt Crawl-delay
}

func (q *Queue) submit(ctx context.Context, specs []Spec, mon *Monitor) ([]Job, error) {
	if len(specs) == 0 {
		return nil, errEmptyBatch()
	}
	for _, s := range specs {
		if !s.checked {
			return nil, fmt.Errorf("jobs: submit: %w", ErrUnchecked)
		}
	}
	resolved := map[string]resolution{}
	preps := make([]prepared, len(specs))
	for i, s := range specs {
		preps[i] = q.dec.prepare(ctx, q.cfg.bounded(s), mon != nil, resolved)
	}

	q.mu.Lock()
	now := q.now()
	if err := q.sched.fits(preps); err != nil {
		q.mu.Unlock()
		return nil, err
	}
	ch := &change{}
	out := make([]Job, len(preps))
	for _, p := range preps {
		j := p.job
		q.seq++
		j.ID, j.Seq, j.Created = newID(now, q.seq), q.seq, now
		if mon != nil {
			j.Monitor = mon.ID
		}
		if j.State == wire.JobDisallowed {
			j.Finished = now
		}
		ch.put(j)
	}
	if mon != nil && q.mons.byID[mon.ID] == mon { // not removed meanwhile
		mon.LastJob, mon.NextRun, mon.submitting = preps[0].job.ID, now.Add(mon.Interval()), false
		ch.monitors = append(ch.monitors, mon)
	}
	// Stored before it is visible, so a job a client saw is never lost.
	if err := q.write(ch); err != nil {
		if mon != nil {
			mon.submitting = false
		}
		q.mu.Unlock()
		return nil, err
	}
	ch2 := &change{}
	for i, p := range preps {
		j := p.job
		if j.State == wire.JobDisallowed {
			q.finishLocked(j, wire.JobDisallowed, j.Reason, nil, ch2)
		} else {
			if p.crawlDelay > 0 {
				q.sched.setCrawlDelay(j.Budget, p.crawlDelay, now)
				q.sched.persist(j.Budget, now, ch2)
			}
			q.active[j.ID] = j
			q.sched.place(j, false)
		}
		out[i] = j.clone()
	}
	q.commit(ch2) // monitor updates of jobs disallowed at once
	q.mu.Unlock()
	q.after(ctx, ch2)
	q.Kick()
	return out, nil
}

// Record stores a job that is done without running (a render answered from
// the result cache): listed, shown and with its result like any other, and
// counted as done. out's Body is the result.
func (q *Queue) Record(ctx context.Context, s Spec, out wire.JobOutcome) (Job, error) {
	if !s.checked {
		return Job{}, fmt.Errorf("jobs: record: %w", ErrUnchecked)
	}
	spec := q.cfg.bounded(s)
	body := out.Body
	if body == nil {
		body = []byte{}
	}
	out.Body = nil
	q.mu.Lock()
	now := q.now()
	q.seq++
	j := &Job{ID: newID(now, q.seq), Seq: q.seq, Spec: spec, Created: now, Started: now, Result: &out}
	ch := &change{}
	q.finishLocked(j, wire.JobDone, "", body, ch)
	if err := q.write(ch); err != nil {
		q.mu.Unlock()
		return Job{}, err
	}
	q.mu.Unlock()
	q.after(ctx, ch)
	return j.clone(), nil
}

// ListAll returns every job in one of states (for reconciling after a
// restart; unpaged).
func (q *Queue) ListAll(states ...string) []Job {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []Job
	for _, j := range q.active {
		if slices.Contains(states, j.State) {
			out = append(out, j.clone())
		}
	}
	return out
}
