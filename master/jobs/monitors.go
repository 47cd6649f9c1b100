package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// AddMonitor registers a URL to be checked (kind check) or rendered (kind
// render: a scheduled render, made with NoCache so the cache is warm
// before anyone asks) every interval. spec must be admitted with
// AsMonitor. The first job is due at once.
func (q *Queue) AddMonitor(ctx context.Context, s Spec, every time.Duration) (Monitor, error) {
	if !s.checked || !s.monitor {
		return Monitor{}, fmt.Errorf("jobs: add monitor: %w", ErrUnchecked)
	}
	if err := checkInterval(every); err != nil {
		return Monitor{}, err
	}
	spec := s.Wire()
	spec.PrevHash = "" // the first check compares with nothing
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.now()
	q.seq++
	m := &Monitor{ID: newID(now, q.seq), Spec: spec, IntervalMs: every.Milliseconds(), Created: now, NextRun: now}
	if err := q.write(&change{monitors: []*Monitor{m}}); err != nil {
		return Monitor{}, err
	}
	q.monitors[m.ID] = m
	q.Kick()
	return *m, nil
}

// GetMonitor returns a monitor.
func (q *Queue) GetMonitor(id string) (Monitor, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	m := q.monitors[id]
	if m == nil {
		return Monitor{}, ErrNotFound
	}
	return *m, nil
}

// ListMonitors returns the monitors, oldest first, those in state only
// when it is not "" ("none" lists the monitors without a state yet).
func (q *Queue) ListMonitors(state string) []Monitor {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []Monitor
	for _, m := range q.monitors {
		if state == "" || m.State == state || (state == "none" && m.State == "") {
			out = append(out, *m)
		}
	}
	slices.SortFunc(out, func(a, b Monitor) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// RemoveMonitor removes a monitor (a job it submitted runs to its end).
func (q *Queue) RemoveMonitor(id string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.monitors[id] == nil {
		return ErrNotFound
	}
	if err := q.write(&change{delMons: []string{id}}); err != nil {
		return err
	}
	delete(q.monitors, id)
	return nil
}

// StateChanges returns the recent monitor state changes, newest last.
func (q *Queue) StateChanges() []StateChange {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.Clone(q.changes)
}

// runMonitors submits the job of every due monitor whose previous job has
// ended (a monitor never has two jobs at once).
func (q *Queue) runMonitors(ctx context.Context) {
	q.mu.Lock()
	now := q.now()
	var due []*Monitor
	for _, m := range q.monitors {
		if m.submitting || now.Before(m.NextRun) {
			continue
		}
		if m.LastJob != "" && q.active[m.LastJob] != nil {
			continue
		}
		m.submitting = true
		due = append(due, m)
	}
	// Sorted before the specs are taken, so specs[i] is due[i]'s.
	slices.SortFunc(due, func(a, b *Monitor) int { return strings.Compare(a.ID, b.ID) })
	specs := make([]wire.JobSpec, len(due))
	for i, m := range due {
		specs[i] = m.Spec
		specs[i].PrevHash = m.Hash
	}
	q.mu.Unlock()
	for i, m := range due {
		// Each job is admitted once, as it is made: the monitor's spec
		// comes from the store, perhaps written by an older master.
		spec, err := Admit(specs[i], AsMonitor())
		if err == nil {
			_, err = q.submit(ctx, []Spec{spec}, m)
		}
		if err != nil {
			q.mu.Lock()
			m.submitting = false
			var full *QueueFullError
			retry := m.Interval()
			if errors.As(err, &full) {
				retry = min(retry, full.RetryAfter)
			}
			m.NextRun = q.now().Add(retry)
			q.mu.Unlock()
			q.log.Warn().Err(err).Str("monitor", m.ID).Msg("monitor job not submitted")
		}
	}
}

// monitorFinishedLocked records a monitor's job's end: LastCheck and
// Reason always; State and LastStateChange only when the job says a state
// and it differs (a first state counts as a change); Hash when it has one.
func (q *Queue) monitorFinishedLocked(j *Job, ch *change) {
	m := q.monitors[j.Monitor]
	if m == nil || m.LastJob != j.ID {
		return
	}
	old := *m
	now := q.now()
	st, reason := monitorVerdict(j)
	m.LastCheck, m.Reason = now, reason
	m.Checks++
	if j.State == wire.JobDone && j.Result != nil && j.Result.Hash != "" {
		m.Hash = j.Result.Hash
	}
	if st != "" && st != m.State {
		q.changes = append(q.changes, StateChange{Monitor: m.ID, URL: m.Spec.URL, From: m.State, To: st, Reason: reason, At: now})
		if len(q.changes) > maxChanges {
			q.changes = slices.Delete(q.changes, 0, len(q.changes)-maxChanges)
		}
		ch.changes = true
		m.State, m.LastStateChange = st, now
	}
	ch.monitors = append(ch.monitors, m)
	if m.State != old.State || (old.Hash != "" && m.Hash != old.Hash) {
		ch.monNotes = append(ch.monNotes, [2]Monitor{old, *m})
	}
}

// monitorVerdict maps a finished job to a monitor state and reason (state
// "" = unknown: the state stays as it was).
func monitorVerdict(j *Job) (string, string) {
	switch j.State {
	case wire.JobDone:
		r := j.Result
		if r == nil {
			return "", ""
		}
		if j.Spec.Kind == wire.JobCheck {
			return r.Check, r.Reason
		}
		return wire.CheckOK, r.Reason
	case wire.JobFailed:
		return wire.CheckError, j.Reason
	case wire.JobDisallowed:
		if j.Disallow == DisallowRobotsError {
			return wire.CheckUnavailable, j.Reason
		}
		return wire.CheckError, "disallowed: " + j.Reason
	}
	return "", j.Reason // cancelled: unknown
}
