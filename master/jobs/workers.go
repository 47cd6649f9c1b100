package jobs

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// Workers is the queue's side that faces the workers: their job slots (set
// by the master's worker registry) and their reports on the attempts they
// run (over RMI), which renew, end or retry the attempts, and the leases
// given up when the reports stop. It shares the queue's lock and state.
type Workers struct {
	q *Queue
}

// Set registers a worker with its number of job slots, or changes them; it
// also clears a refusal (the worker is tried again).
func (w *Workers) Set(id string, slots int) {
	q := w.q
	q.mu.Lock()
	q.sched.workers.set(id, slots)
	q.mu.Unlock()
	q.Kick()
}

// Remove forgets a worker (it died or left): its running attempts are
// given up at once and their jobs queued again.
func (w *Workers) Remove(ctx context.Context, id string) {
	q := w.q
	q.mu.Lock()
	q.sched.workers.remove(id)
	ch := &change{}
	for _, j := range w.attemptsLocked() {
		if j.Worker == id {
			w.failAttemptLocked(j, fmt.Sprintf("worker %s left", id), false, false, ch)
		}
	}
	q.commit(ch)
	q.mu.Unlock()
	q.after(ctx, ch)
	q.Kick()
}

// attemptsLocked returns the WORKING jobs, oldest first, so that giving
// up several attempts queues their jobs again in order.
func (w *Workers) attemptsLocked() []*Job {
	var out []*Job
	for _, j := range w.q.active {
		if j.State == wire.JobWorking {
			out = append(out, j)
		}
	}
	slices.SortFunc(out, func(a, b *Job) int { return cmpUint(a.Seq, b.Seq) })
	return out
}

// currentLocked returns the job when the report is for its running
// attempt.
func (w *Workers) currentLocked(workerID, id string, attempt int) *Job {
	j := w.q.active[id]
	if j == nil || j.State != wire.JobWorking || j.Tries != attempt || j.Worker != workerID {
		return nil
	}
	return j
}

// Ready is the start gate: a worker whose browser is ready asks whether it
// may load the page now. The answer is 0 (go; the start is counted) or how
// long to wait before asking again. Hand-overs are already paced, but a
// browser lease takes a varying time, so the page loads themselves are
// paced here with the class's interval and starts per second. It renews
// the lease like Working; a stale attempt gets ErrStaleReport.
func (w *Workers) Ready(workerID string, p wire.JobProgress) (time.Duration, error) {
	q := w.q
	q.mu.Lock()
	defer q.mu.Unlock()
	j := w.currentLocked(workerID, p.ID, p.Attempt)
	if j == nil {
		return 0, ErrStaleReport
	}
	now := q.now()
	j.Deadline = now.Add(2 * q.cfg.ReportEvery)
	return q.sched.gate(j, p.Attempt, now), nil
}

// Started is the worker's word on when the request of a go'd attempt left
// (delay after the go): the budget's spacing restarts from that moment.
func (w *Workers) Started(workerID string, s wire.JobStarted) error {
	q := w.q
	q.mu.Lock()
	defer q.mu.Unlock()
	j := w.currentLocked(workerID, s.ID, s.Attempt)
	if j == nil {
		return ErrStaleReport
	}
	q.sched.confirm(j, s, q.now())
	return nil
}

// Request is the egress endpoint of a job's browser asking for a go for
// one request (answer 0: go; else ask again after that long), or saying it
// was written or ended (requests.go). A stale attempt gets
// ErrStaleReport.
func (w *Workers) Request(workerID string, r wire.JobRequest) (time.Duration, error) {
	q := w.q
	q.mu.Lock()
	defer q.mu.Unlock()
	j := w.currentLocked(workerID, r.ID, r.Attempt)
	if j == nil {
		return 0, ErrStaleReport
	}
	return q.sched.request(j, r, q.now()), nil
}

// Working is a worker's WORKING report: it renews the attempt's lease. A
// report for an attempt that is not current is ignored (ErrStaleReport).
func (w *Workers) Working(workerID string, p wire.JobProgress) error {
	q := w.q
	q.mu.Lock()
	defer q.mu.Unlock()
	j := w.currentLocked(workerID, p.ID, p.Attempt)
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
func (w *Workers) Done(ctx context.Context, workerID string, o wire.JobOutcome) error {
	q := w.q
	q.mu.Lock()
	j := w.currentLocked(workerID, o.ID, o.Attempt)
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
	q.sched.workers.freed(workerID) // it frees a slot now
	if d := q.sched.budget(j.Budget).answered(o.Status, o.RetryAfter, q.now()); d > 0 {
		q.m.backoffs.WithLabelValues(strconv.Itoa(o.Status)).Inc()
		q.log.Info().Str("budget", j.Budget).Int("status", o.Status).Str("retry_after", o.RetryAfter).
			Dur("pause", d).Msg("site asked for fewer requests: its budget pauses")
	}
	q.sched.persist(j.Budget, q.now(), ch)
	res := o
	res.Body = nil
	j.Result = &res
	if o.Disallowed {
		q.endAttemptLocked(j, "")
		j.Disallow = DisallowEgress
		q.finishLocked(j, wire.JobDisallowed, o.Reason, nil, ch)
	} else if o.Err == "" {
		q.endAttemptLocked(j, "")
		if body == nil {
			body = []byte{}
		}
		q.finishLocked(j, wire.JobDone, "", body, ch)
	} else {
		w.failAttemptLocked(j, o.Err, o.Permanent, false, ch)
	}
	q.commit(ch)
	q.mu.Unlock()
	q.after(ctx, ch)
	q.Kick()
	return nil
}

// expire gives up the attempts whose lease ran out: no report for twice
// ReportEvery.
func (w *Workers) expire(ctx context.Context) {
	q := w.q
	q.mu.Lock()
	now := q.now()
	ch := &change{}
	for _, j := range w.attemptsLocked() {
		if !now.Before(j.Deadline) {
			q.log.Info().Str("job", j.ID).Str("worker", j.Worker).Int("attempt", j.Tries).Msg("attempt given up: no report")
			w.failAttemptLocked(j, fmt.Sprintf("no report for %v (lease expired)", 2*q.cfg.ReportEvery), false, true, ch)
		}
	}
	q.commit(ch)
	q.mu.Unlock()
	q.after(ctx, ch)
}

// failAttemptLocked ends j's running attempt with reason: the job is
// queued again (at the head of its class, another worker preferred), or
// FAILED with every attempt's reason when it was permanent or the last.
// cancel also stops the attempt on its worker (it may still run).
func (w *Workers) failAttemptLocked(j *Job, reason string, permanent, cancel bool, ch *change) {
	q := w.q
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
	q.sched.place(j, true)
	ch.put(j)
}
