package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// ---- Workers

// SetWorker registers a worker with its number of job slots, or changes
// them; it also clears a refusal (the worker is tried again).
func (q *Queue) SetWorker(id string, slots int) {
	q.mu.Lock()
	w := q.workers[id]
	if w == nil {
		w = &worker{}
		q.workers[id] = w
	}
	w.slots, w.refusedAt = max(slots, 0), time.Time{}
	q.mu.Unlock()
	q.Kick()
}

// RemoveWorker forgets a worker (it died or left): its running attempts
// are given up at once and their jobs queued again.
func (q *Queue) RemoveWorker(ctx context.Context, id string) {
	q.mu.Lock()
	delete(q.workers, id)
	ch := &change{}
	for _, j := range q.sortedActiveLocked() {
		if j.State == wire.JobWorking && j.Worker == id {
			q.failAttemptLocked(j, fmt.Sprintf("worker %s left", id), false, false, ch)
		}
	}
	q.commit(ch)
	q.mu.Unlock()
	q.after(ctx, ch)
	q.Kick()
}

func (q *Queue) sortedActiveLocked() []*Job {
	out := make([]*Job, 0, len(q.active))
	for _, j := range q.active {
		out = append(out, j)
	}
	slices.SortFunc(out, func(a, b *Job) int { return cmpUint(a.Seq, b.Seq) })
	return out
}

// pickWorker chooses the worker for one attempt among those with free
// slots (free[id] > 0): the one with the most free slots, ties broken
// round robin after last. Workers in avoid (earlier attempts of the job)
// are taken only when fallback says no other worker exists.
func pickWorker(free map[string]int, avoid map[string]bool, fallback bool, last string) string {
	best := 0
	var ties []string
	for id, n := range free {
		if n <= 0 || (avoid[id] && !fallback) {
			continue
		}
		switch {
		case n > best:
			best, ties = n, append(ties[:0], id)
		case n == best:
			ties = append(ties, id)
		}
	}
	if len(ties) == 0 {
		return ""
	}
	slices.Sort(ties)
	// Avoided workers lose ties when fallback lets them in.
	if fallback {
		pref := ties[:0:0]
		for _, id := range ties {
			if !avoid[id] {
				pref = append(pref, id)
			}
		}
		if len(pref) > 0 {
			ties = pref
		}
	}
	for _, id := range ties {
		if id > last {
			return id
		}
	}
	return ties[0]
}

// refuseBackoff is how long a worker that refused a run is skipped: its
// slot count may lag behind (an attempt that just reported Done frees its
// slot a moment later), so it is tried again soon, not never.
const refuseBackoff = time.Second

// refusingLocked reports whether w refused a run too recently to be tried.
func (q *Queue) refusingLocked(w *worker) bool {
	return !w.refusedAt.IsZero() && q.now().Before(w.refusedAt.Add(refuseBackoff))
}

// pickWorkerLocked picks a worker for j, or "" when none may take it now.
func (q *Queue) pickWorkerLocked(j *Job) string {
	free := map[string]int{}
	for id, w := range q.workers {
		if !q.refusingLocked(w) && w.slots-w.used > 0 {
			free[id] = w.slots - w.used
		}
	}
	if len(free) == 0 {
		return ""
	}
	avoid := map[string]bool{}
	for _, a := range j.Attempts {
		avoid[a.Worker] = true
	}
	// Another worker is preferred; an earlier one only when there is no
	// other worker at all (busy or not).
	fallback := true
	for id := range q.workers {
		if !avoid[id] {
			fallback = false
			break
		}
	}
	id := pickWorker(free, avoid, fallback, q.lastWorker)
	if id != "" {
		q.lastWorker = id
	}
	return id
}

// freeSlotsLocked is the number of slots that could take an attempt now.
func (q *Queue) freeSlotsLocked() int {
	n := 0
	for _, w := range q.workers {
		if !q.refusingLocked(w) && w.slots > w.used {
			n += w.slots - w.used
		}
	}
	return n
}

// ---- Politeness

func (q *Queue) budgetLocked(key string) *budget {
	b := q.budgets[key]
	if b == nil {
		b = &budget{}
		q.budgets[key] = b
	}
	return b
}

// allows reports whether a class with limits l may start an attempt in
// budget b at now, or the time it may (zero when only a running attempt's
// end frees it).
func (b *budget) allows(l Limits, now time.Time) (time.Time, bool) {
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

func (q *Queue) startLocked() ([]launch, *change) {
	now := q.now()
	ch := &change{}
	var out []launch
	q.wake = time.Time{}
	q.refillLocked()
	for len(q.order) > 0 && q.freeSlotsLocked() > 0 {
		started := false
		n := len(q.order)
		for i := range n {
			hq := q.hosts[q.order[(q.rr+i)%n]]
			if len(hq.jobs) == 0 {
				continue
			}
			j := hq.jobs[0]
			b := q.budgetLocked(j.Budget)
			if at, ok := b.allows(hq.limits, now); !ok {
				if !at.IsZero() && (q.wake.IsZero() || at.Before(q.wake)) {
					q.wake = at
				}
				continue
			}
			wid := q.pickWorkerLocked(j)
			if wid == "" {
				continue
			}
			hq.jobs = hq.jobs[1:]
			q.shrunk = true
			b.take(hq.limits, now)
			q.workers[wid].used++
			if len(j.Attempts) == 0 {
				q.m.wait.Observe(now.Sub(j.Created).Seconds())
			}
			j.Tries++
			j.State, j.Worker, j.Deadline = wire.JobWorking, wid, now.Add(2*q.cfg.ReportEvery)
			if j.Started.IsZero() {
				j.Started = now
			}
			j.Attempts = append(j.Attempts, Attempt{N: j.Tries, Worker: wid, Started: now})
			ch.put(j)
			out = append(out, launch{worker: wid, run: wire.JobRun{ID: j.ID, Attempt: j.Tries, Spec: j.Spec,
				ReportEveryMs: q.cfg.ReportEvery.Milliseconds(), MasterID: q.cfg.MasterID}})
			started = true
			if q.freeSlotsLocked() == 0 {
				break
			}
		}
		if n > 0 {
			q.rr = (q.rr + 1) % n
		}
		q.refillLocked()
		if !started {
			break
		}
	}
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
		if w := q.workers[l.worker]; w != nil {
			w.refusedAt = q.now()
		}
		j := q.active[l.run.ID]
		if j == nil || j.State != wire.JobWorking || j.Tries != l.run.Attempt || j.Worker != l.worker {
			continue // cancelled or given up meanwhile
		}
		q.releaseLocked(j)
		j.Attempts = j.Attempts[:len(j.Attempts)-1] // not an attempt
		if len(j.Attempts) == 0 {
			j.Started = time.Time{}
		}
		j.State, j.Worker, j.Deadline = wire.JobQueued, "", time.Time{}
		q.placeLocked(j, true)
		ch.put(j)
	}
	q.commit(ch)
	q.mu.Unlock()
	return refused
}

// releaseLocked frees the budget and worker slot of j's running attempt.
func (q *Queue) releaseLocked(j *Job) {
	if b := q.budgets[j.Budget]; b != nil {
		b.running--
	}
	if w := q.workers[j.Worker]; w != nil && w.used > 0 {
		w.used--
	}
}

// endAttemptLocked closes the current attempt with err.
func (q *Queue) endAttemptLocked(j *Job, err string) {
	now := q.now()
	if n := len(j.Attempts); n > 0 && j.Attempts[n-1].Ended.IsZero() {
		a := &j.Attempts[n-1]
		a.Ended, a.Err = now, err
		q.m.run.Observe(now.Sub(a.Started).Seconds())
	}
	q.releaseLocked(j)
}

// failAttemptLocked ends j's running attempt with reason: the job is
// queued again (at the head of its class, another worker preferred), or
// FAILED with every attempt's reason when it was permanent or the last.
// cancel also stops the attempt on its worker (it may still run).
func (q *Queue) failAttemptLocked(j *Job, reason string, permanent, cancel bool, ch *change) {
	if j.State == wire.JobWorking {
		q.endAttemptLocked(j, reason)
		if cancel {
			ch.cancels = append(ch.cancels, cancelNote{j.Worker, j.ID, j.Tries})
		}
	}
	j.Worker, j.Deadline = "", time.Time{}
	if permanent || len(j.Attempts) >= q.cfg.MaxAttempts {
		q.finishLocked(j, wire.JobFailed, attemptReasons(j), nil, ch)
		return
	}
	j.State = wire.JobQueued
	q.placeLocked(j, true)
	ch.put(j)
}

// finishLocked ends a job in state with reason (body: a DONE result).
func (q *Queue) finishLocked(j *Job, st, reason string, body []byte, ch *change) {
	now := q.now()
	if j.State == wire.JobQueued {
		q.removeQueuedLocked(j)
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
		q.monitorFinishedLocked(j, ch)
	}
	ch.finished = append(ch.finished, finishNote{job: j.clone(), body: body})
}

// ---- Worker reports

// current returns j when the report is for its running attempt.
func (q *Queue) currentLocked(workerID, id string, attempt int) *Job {
	j := q.active[id]
	if j == nil || j.State != wire.JobWorking || j.Tries != attempt || j.Worker != workerID {
		return nil
	}
	return j
}

// startMargin widens the spacing of page-load starts beyond 1/rate, so
// that what varies between a start's recorded time and the site's handling
// of the request (the site's own scheduling under load) cannot push two
// requests into one second: 10% of the interval, at least 50 ms.
func startMargin(emit time.Duration) time.Duration { return max(emit/10, 50*time.Millisecond) }

// Ready is the start gate: a worker whose browser is ready asks whether it
// may load the page now. The answer is 0 (go; the start is counted) or how
// long to wait before asking again. Hand-overs are already paced, but a
// browser lease takes a varying time, so the page loads themselves are
// paced here with the class's interval and starts per second. It renews
// the lease like Working; a stale attempt gets ErrStaleReport.
func (q *Queue) Ready(workerID string, p wire.JobProgress) (time.Duration, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	j := q.currentLocked(workerID, p.ID, p.Attempt)
	if j == nil {
		return 0, ErrStaleReport
	}
	now := q.now()
	j.Deadline = now.Add(2 * q.cfg.ReportEvery)
	l := q.limitsOf(j)
	b := q.budgetLocked(j.Budget)
	key := p.ID + "/" + strconv.Itoa(p.Attempt)
	if b.pending != "" && b.pending != key && (l.StartsPerSec > 0 || l.Interval > 0) {
		// The previous go's request time is not known yet: spacing from
		// its go alone would let a late request crowd the next one.
		if until := b.goAt.Add(confirmWait); now.Before(until) {
			return min(confirmPoll, until.Sub(now)), nil
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
		return at.Sub(now), nil
	}
	b.goLast = now
	if emit > 0 {
		if b.goTat.Before(now) {
			b.goTat = now
		}
		b.goTat = b.goTat.Add(emit)
	}
	b.pending, b.goAt = key, now
	return 0, nil
}

// confirmWait bounds how long a go waits for the previous one's Started;
// confirmPoll is how often a waiting worker asks again meanwhile.
const (
	confirmWait = 5 * time.Second
	confirmPoll = 25 * time.Millisecond
)

// Started is the worker's word on when the request of a go'd attempt left
// (delay after the go): the budget's spacing restarts from that moment.
func (q *Queue) Started(workerID string, s wire.JobStarted) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	j := q.currentLocked(workerID, s.ID, s.Attempt)
	if j == nil {
		return ErrStaleReport
	}
	b := q.budgetLocked(j.Budget)
	if b.pending != s.ID+"/"+strconv.Itoa(s.Attempt) {
		return nil
	}
	b.pending = ""
	if s.NotSent {
		return nil
	}
	delay := min(max(time.Duration(s.DelayNs), 0), q.now().Sub(b.goAt))
	sent := b.goAt.Add(delay)
	l := q.limitsOf(j)
	b.goLast = sent
	if l.StartsPerSec > 0 {
		emit := emitInterval(l.StartsPerSec)
		emit += startMargin(emit)
		if t := sent.Add(emit); t.After(b.goTat) {
			b.goTat = t
		}
	}
	return nil
}

// Working is a worker's WORKING report: it renews the attempt's lease. A
// report for an attempt that is not current is ignored (ErrStaleReport).
func (q *Queue) Working(workerID string, p wire.JobProgress) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	j := q.currentLocked(workerID, p.ID, p.Attempt)
	if j == nil {
		q.log.Info().Str("job", p.ID).Int("attempt", p.Attempt).Str("worker", workerID).Msg("ignored a WORKING report for an attempt that is not current")
		return ErrStaleReport
	}
	j.Deadline = q.now().Add(2 * q.cfg.ReportEvery)
	return nil
}

// Done is a worker's DONE report. Success makes the job DONE (the body is
// stored apart); a failure queues it again until MaxAttempts, or fails it
// at once when permanent. Reports of other attempts are ignored.
func (q *Queue) Done(ctx context.Context, workerID string, o wire.JobOutcome) error {
	q.mu.Lock()
	j := q.currentLocked(workerID, o.ID, o.Attempt)
	if j == nil {
		q.mu.Unlock()
		q.log.Info().Str("job", o.ID).Int("attempt", o.Attempt).Str("worker", workerID).Msg("ignored a DONE report for an attempt that is not current")
		return ErrStaleReport
	}
	ch := &change{}
	body := o.Body
	if o.Err == "" && j.Spec.MaxBytes > 0 && int64(len(body)) > j.Spec.MaxBytes {
		o.Err, o.Permanent = fmt.Sprintf("the result is %d bytes, over the limit of %d", len(body), j.Spec.MaxBytes), true
	}
	if w := q.workers[workerID]; w != nil {
		w.refusedAt = time.Time{} // it frees a slot now
	}
	res := o
	res.Body = nil
	j.Result = &res
	if o.Err == "" {
		q.endAttemptLocked(j, "")
		if body == nil {
			body = []byte{}
		}
		q.finishLocked(j, wire.JobDone, "", body, ch)
	} else {
		q.failAttemptLocked(j, o.Err, o.Permanent, false, ch)
	}
	q.commit(ch)
	q.mu.Unlock()
	q.after(ctx, ch)
	q.Kick()
	return nil
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
	q.expire(ctx)
	q.runMonitors(ctx)
	q.sweep()
	q.Pump(ctx)
}

func (q *Queue) expire(ctx context.Context) {
	q.mu.Lock()
	now := q.now()
	ch := &change{}
	for _, j := range q.sortedActiveLocked() {
		if j.State == wire.JobWorking && !now.Before(j.Deadline) {
			q.log.Info().Str("job", j.ID).Str("worker", j.Worker).Int("attempt", j.Tries).Msg("attempt given up: no report")
			q.failAttemptLocked(j, fmt.Sprintf("no report for %v (lease expired)", 2*q.cfg.ReportEvery), false, true, ch)
		}
	}
	q.commit(ch)
	q.mu.Unlock()
	q.after(ctx, ch)
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
	q.commit(ch)
	// Budgets nobody uses and whose limits no longer hold anything back
	// are forgotten, so the map stays as small as the active sites.
	for k, b := range q.budgets {
		if b.idle(now, q.maxInterval) {
			delete(q.budgets, k)
		}
	}
}

// NextWake is when Tick has something to do next without any report or
// call (zero: nothing scheduled).
func (q *Queue) NextWake() time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	next := q.wake
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
	for _, m := range q.monitors {
		if m.LastJob == "" || q.active[m.LastJob] == nil {
			earlier(m.NextRun)
		}
	}
	if len(q.finished) > 0 {
		earlier(q.finished[0].at.Add(q.cfg.Retention))
	}
	for _, w := range q.workers {
		if !w.refusedAt.IsZero() {
			earlier(w.refusedAt.Add(refuseBackoff))
		}
	}
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
	s := Stats{Queued: map[string]int{}, Outcomes: map[string]int64{}, Monitors: len(q.monitors)}
	for id, w := range q.workers {
		s.Workers = append(s.Workers, WorkerStats{ID: id, Slots: w.slots, Used: w.used, Free: max(w.slots-w.used, 0)})
	}
	slices.SortFunc(s.Workers, func(a, b WorkerStats) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	for c, hq := range q.hosts {
		if len(hq.jobs) > 0 {
			s.Queued[c] = len(hq.jobs)
		}
	}
	s.Queued["leftover"] = len(q.leftover)
	for _, j := range q.active {
		if j.State == wire.JobWorking {
			s.Working++
		}
	}
	for k, v := range q.outcomes {
		s.Outcomes[k] = v
	}
	return s
}
