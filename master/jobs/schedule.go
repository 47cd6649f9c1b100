package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// ---- The scheduler

type launch struct {
	worker string
	run    wire.JobRun
}

// Pump starts every job it may now: FIFO within a class, one start per
// class per round across classes (round robin), within each budget's
// concurrency, token bucket and interval, and only on free worker slots.
// Nothing leaves the queue while no slot is free. The Runner is called
// outside the lock; a refusal puts the job back at the head of its class.
func (q *Queue) Pump(ctx context.Context) {
	for range 8 { // refusals skip their worker, so this settles quickly
		q.mu.Lock()
		ls, ch := q.startLocked()
		q.mu.Unlock()
		q.after(ctx, ch)
		if len(ls) == 0 {
			return
		}
		refused := q.launch(ctx, ls)
		if refused == 0 {
			return
		}
	}
}

// startLocked starts the attempts the scheduler lets start now and returns
// them to hand over.
func (q *Queue) startLocked() ([]launch, *change) {
	now := q.now()
	ch := &change{}
	var out []launch
	q.sched.start(now, func(j *Job, wid string) {
		if len(j.Attempts) == 0 {
			q.m.wait.Observe(now.Sub(j.Created).Seconds())
		}
		j.Tries++
		j.State, j.Worker, j.Deadline = wire.JobWorking, wid, now.Add(2*q.cfg.ReportEvery)
		if j.Started.IsZero() {
			j.Started = now
		}
		queued := j.Created
		if n := len(j.Attempts); n > 0 {
			queued = j.Attempts[n-1].Started // a retry waited since its last attempt
		}
		j.Politeness = q.sched.budget(j.Budget).politeness(queued, now)
		j.Attempts = append(j.Attempts, Attempt{N: j.Tries, Worker: wid, Started: now})
		ch.put(j)
		out = append(out, launch{worker: wid, run: wire.JobRun{ID: j.ID, Attempt: j.Tries, Spec: j.Spec,
			ReportEveryMs: q.cfg.ReportEvery.Milliseconds(), MasterID: q.cfg.MasterID, Allow: q.cfg.AllowAddrs}})
	})
	q.commit(ch)
	return out, ch
}

// launch hands attempts to their workers (concurrently, unlocked) and
// returns how many were refused.
func (q *Queue) launch(ctx context.Context, ls []launch) int {
	errs := make([]error, len(ls))
	var wg sync.WaitGroup
	for i, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = q.cfg.Runner.Run(ctx, l.worker, l.run)
		}()
	}
	wg.Wait()
	refused := 0
	q.mu.Lock()
	ch := &change{}
	for i, err := range errs {
		if err == nil {
			continue
		}
		refused++
		l := ls[i]
		q.log.Info().Err(err).Str("job", l.run.ID).Str("worker", l.worker).Msg("worker refused a job; it stays queued")
		q.sched.workers.refused(l.worker, q.now())
		j := q.active[l.run.ID]
		if j == nil || j.State != wire.JobWorking || j.Tries != l.run.Attempt || j.Worker != l.worker {
			continue // cancelled or given up meanwhile
		}
		q.sched.release(j, q.now())
		j.Attempts = j.Attempts[:len(j.Attempts)-1] // not an attempt
		if len(j.Attempts) == 0 {
			j.Started = time.Time{}
		}
		j.State, j.Worker, j.Deadline = wire.JobQueued, "", time.Time{}
		q.sched.place(j, true)
		ch.put(j)
	}
	q.commit(ch)
	q.mu.Unlock()
	return refused
}

// endAttemptLocked closes the current attempt with err.
func (q *Queue) endAttemptLocked(j *Job, err string) {
	now := q.now()
	if n := len(j.Attempts); n > 0 && j.Attempts[n-1].Ended.IsZero() {
		a := &j.Attempts[n-1]
		a.Ended, a.Err = now, err
		q.m.run.Observe(now.Sub(a.Started).Seconds())
	}
	q.sched.release(j, now)
}

// finishLocked ends a job in state with reason (body: a DONE result).
func (q *Queue) finishLocked(j *Job, st, reason string, body []byte, ch *change) {
	now := q.now()
	if j.State == wire.JobQueued {
		q.sched.removeQueued(j)
	}
	j.State, j.Reason, j.Finished, j.Worker, j.Deadline = st, reason, now, "", time.Time{}
	delete(q.active, j.ID)
	q.finished = append(q.finished, finishedRef{j.ID, now})
	q.outcomes[st]++
	q.m.total.WithLabelValues(j.Spec.Kind, st).Inc()
	ch.put(j)
	if body != nil {
		if ch.bodies == nil {
			ch.bodies = map[string][]byte{}
		}
		ch.bodies[j.ID] = body
	}
	for _, w := range q.waiters[j.ID] {
		close(w)
	}
	delete(q.waiters, j.ID)
	if j.Monitor != "" {
		q.mons.finishedLocked(j, ch)
	}
	ch.finished = append(ch.finished, finishNote{job: j.clone(), body: body})
}

// Cancel cancels a job: a queued one leaves its queue, a working one's
// attempt is stopped on its worker. Both end CANCELLED.
func (q *Queue) Cancel(ctx context.Context, id string) (Job, error) {
	q.mu.Lock()
	j := q.active[id]
	if j == nil {
		q.mu.Unlock()
		got, err := q.Get(id)
		if err != nil {
			return Job{}, err
		}
		return got, ErrFinished
	}
	ch := &change{}
	if j.State == wire.JobWorking {
		q.endAttemptLocked(j, "cancelled")
		ch.cancels = append(ch.cancels, cancelNote{j.Worker, j.ID, j.Tries})
	}
	q.finishLocked(j, wire.JobCancelled, "cancelled", nil, ch)
	out := j.clone()
	q.commit(ch)
	q.mu.Unlock()
	q.after(ctx, ch)
	q.Kick()
	return out, nil
}

// ---- Time

// Tick does what time makes due: leases without news are given up,
// monitors submit their jobs, old finished jobs are removed; then Pump.
func (q *Queue) Tick(ctx context.Context) {
	q.wk.expire(ctx)
	q.mons.run(ctx)
	q.sweep()
	q.Pump(ctx)
}

// sweep removes finished jobs past Retention or beyond MaxFinished.
func (q *Queue) sweep() {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.now()
	ch := &change{}
	for len(q.finished) > 0 && (len(q.finished) > q.cfg.MaxFinished || !now.Before(q.finished[0].at.Add(q.cfg.Retention))) {
		ch.delJobs = append(ch.delJobs, q.finished[0].id)
		q.finished = q.finished[1:]
	}
	q.sched.forgetIdle(now)
	q.sched.persistAll(now, ch)
	q.commit(ch)
}

// NextWake is when Tick has something to do next without any report or
// call (zero: nothing scheduled).
func (q *Queue) NextWake() time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	next := q.sched.wake
	earlier := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, j := range q.active {
		if j.State == wire.JobWorking {
			earlier(j.Deadline)
		}
	}
	earlier(q.mons.nextRunLocked())
	if len(q.finished) > 0 {
		earlier(q.finished[0].at.Add(q.cfg.Retention))
	}
	earlier(q.sched.workers.nextRetry())
	return next
}

// Run is the scheduler's loop: it ticks when something changed (Kick:
// submissions, reports, slot changes) and when a limit, lease, monitor or
// retention falls due. It returns when ctx ends.
func (q *Queue) Run(ctx context.Context) error {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		q.Tick(ctx)
		wait := time.Minute // a backstop; everything due is computed below
		if next := q.NextWake(); !next.IsZero() {
			wait = min(wait, max(next.Sub(q.now()), time.Millisecond))
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-q.kick:
		case <-timer.C:
		}
	}
}

// ---- Reading

// Get returns a job.
func (q *Queue) Get(id string) (Job, error) {
	q.mu.Lock()
	if j := q.active[id]; j != nil {
		defer q.mu.Unlock()
		return j.clone(), nil
	}
	q.mu.Unlock()
	var r record
	ok, err := q.st.Get(BucketJobs, id, &r)
	if err != nil {
		return Job{}, fmt.Errorf("jobs: %w", err)
	}
	if !ok {
		return Job{}, ErrNotFound
	}
	return *r.job(), nil
}

// List returns jobs oldest first, filtered by state and submitter, and
// the cursor of the next page ("" = no more).
func (q *Queue) List(opts ListOptions) ([]Job, string) {
	limit := opts.Limit
	config.OrDefault(&limit, 100)
	limit = min(limit, 1000)
	var out []Job
	next := ""
	q.st.Scan(BucketJobs, opts.After, func(key string, raw []byte) bool {
		var r record
		if err := json.Unmarshal(raw, &r); err != nil {
			return true
		}
		if opts.State != "" && r.State != opts.State {
			return true
		}
		if opts.User != "" && r.Spec.User != opts.User {
			return true
		}
		if len(out) == limit {
			next = out[len(out)-1].ID
			return false
		}
		out = append(out, *r.job())
		return true
	})
	// The store has every change; the lease deadline lives in memory.
	q.mu.Lock()
	for i := range out {
		if j := q.active[out[i].ID]; j != nil && j.State == out[i].State {
			out[i].Deadline = j.Deadline
		}
	}
	q.mu.Unlock()
	return out, next
}

// Result returns a DONE job's body and content type.
func (q *Queue) Result(id string) ([]byte, string, error) {
	j, err := q.Get(id)
	if err != nil {
		return nil, "", err
	}
	if j.State != wire.JobDone {
		return nil, "", fmt.Errorf("%w (state %s)", ErrNoResult, j.State)
	}
	body, ok := q.st.GetRaw(BucketResults, id)
	if !ok {
		return nil, "", ErrNoResult
	}
	ct := ""
	if j.Result != nil {
		ct = j.Result.ContentType
	}
	return body, ct, nil
}

// Wait blocks until the job ended (or ctx ends) and returns it.
func (q *Queue) Wait(ctx context.Context, id string) (Job, error) {
	q.mu.Lock()
	if _, ok := q.active[id]; !ok {
		q.mu.Unlock()
		return q.Get(id)
	}
	ch := make(chan struct{})
	q.waiters[id] = append(q.waiters[id], ch)
	q.mu.Unlock()
	select {
	case <-ch:
		return q.Get(id)
	case <-ctx.Done():
		q.mu.Lock()
		if ws := q.waiters[id]; ws != nil {
			q.waiters[id] = slices.DeleteFunc(ws, func(c chan struct{}) bool { return c == ch })
			if len(q.waiters[id]) == 0 {
				delete(q.waiters, id)
			}
		}
		q.mu.Unlock()
		return Job{}, ctx.Err()
	}
}

// Stats returns the queue's figures.
func (q *Queue) Stats() Stats {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := Stats{Workers: q.sched.workers.stats(), Queued: q.sched.queued(), Outcomes: map[string]int64{}, Monitors: len(q.mons.byID)}
	for _, j := range q.active {
		if j.State == wire.JobWorking {
			s.Working++
		}
	}
	for k, v := range q.outcomes {
		s.Outcomes[k] = v
	}
	s.Polite = q.sched.polite(q.now())
	return s
}
