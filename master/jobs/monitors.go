package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/state"
)

// Monitors are the URLs checked or rendered on a schedule: their records,
// the jobs they submit when due and their recent state changes. They share
// the queue's lock and store: a monitor's next job and its last job's end
// are changes of the queue's jobs too.
type Monitors struct {
	q       *Queue
	byID    map[string]*Monitor // guarded by q.mu
	changes []StateChange       // guarded by q.mu; newest last, at most maxChanges
}

// load reads the monitors and their recent state changes from the store.
func (ms *Monitors) load() error {
	if err := state.Each(ms.q.st, BucketMonitors, func(_ string, m Monitor) { mm := m; ms.byID[m.ID] = &mm }); err != nil {
		return fmt.Errorf("jobs: load monitors: %w", err)
	}
	if _, err := ms.q.st.Get(BucketChanges, changesKey, &ms.changes); err != nil {
		return fmt.Errorf("jobs: load monitor changes: %w", err)
	}
	return nil
}

// Add registers a URL to be checked (kind check) or rendered (kind
// render: a scheduled render, made with NoCache so the cache is warm
// before anyone asks) every interval. spec must be admitted with
// AsMonitor. The first job is due at once.
func (ms *Monitors) Add(ctx context.Context, s Spec, every time.Duration) (Monitor, error) {
	if !s.checked || !s.monitor {
		return Monitor{}, fmt.Errorf("jobs: add monitor: %w", ErrUnchecked)
	}
	if err := checkInterval(every); err != nil {
		return Monitor{}, err
	}
	spec := s.Wire()
	spec.PrevHash = "" // the first check compares with nothing
	q := ms.q
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.now()
	q.seq++
	m := &Monitor{ID: newID(now, q.seq), Spec: spec, IntervalMs: every.Milliseconds(), Created: now, NextRun: now}
	if err := q.write(&change{monitors: []*Monitor{m}}); err != nil {
		return Monitor{}, err
	}
	ms.byID[m.ID] = m
	q.Kick()
	return *m, nil
}

// Get returns a monitor.
func (ms *Monitors) Get(id string) (Monitor, error) {
	ms.q.mu.Lock()
	defer ms.q.mu.Unlock()
	m := ms.byID[id]
	if m == nil {
		return Monitor{}, ErrNotFound
	}
	return *m, nil
}

// List returns the monitors, oldest first, those in state only when it is
// not "" ("none" lists the monitors without a state yet).
func (ms *Monitors) List(state string) []Monitor {
	ms.q.mu.Lock()
	defer ms.q.mu.Unlock()
	var out []Monitor
	for _, m := range ms.byID {
		if state == "" || m.State == state || (state == "none" && m.State == "") {
			out = append(out, *m)
		}
	}
	slices.SortFunc(out, func(a, b Monitor) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Remove removes a monitor (a job it submitted runs to its end).
func (ms *Monitors) Remove(id string) error {
	ms.q.mu.Lock()
	defer ms.q.mu.Unlock()
	if ms.byID[id] == nil {
		return ErrNotFound
	}
	if err := ms.q.write(&change{delMons: []string{id}}); err != nil {
		return err
	}
	delete(ms.byID, id)
	return nil
}

// StateChanges returns the recent monitor state changes, newest last.
func (ms *Monitors) StateChanges() []StateChange {
	ms.q.mu.Lock()
	defer ms.q.mu.Unlock()
	return slices.Clone(ms.changes)
}

// run submits the job of every due monitor whose previous job has ended
// (a monitor never has two jobs at once).
func (ms *Monitors) run(ctx context.Context) {
	q := ms.q
	q.mu.Lock()
	now := q.now()
	var due []*Monitor
	for _, m := range ms.byID {
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
		spec, holder, err := ms.admit(specs[i])
		if err == nil {
			_, err = q.submit(ctx, []Spec{spec}, m)
			if err != nil && holder != "" {
				q.cfg.MonitorCache.Release(spec, holder, err)
			}
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

// admit admits a due monitor's job; a render's holds the cache
// reservation of its signature when it can (MonitorCache).
func (ms *Monitors) admit(raw wire.JobSpec) (Spec, string, error) {
	mc := ms.q.cfg.MonitorCache
	if mc == nil || raw.Kind != wire.JobRender {
		s, err := Admit(raw, AsMonitor())
		return s, "", err
	}
	s, err := Admit(raw, AsMonitor(), CacheKey(mc.Key))
	if err != nil || s.Signature() == "" {
		return s, "", err
	}
	holder := mc.Reserve(s)
	if holder == "" {
		return s, "", nil
	}
	return s.WithHolder(holder), holder, nil
}

// finishedLocked records a monitor's job's end: LastCheck and Reason
// always; State and LastStateChange only when the job says a state and it
// differs (a first state counts as a change); Hash when it has one.
func (ms *Monitors) finishedLocked(j *Job, ch *change) {
	m := ms.byID[j.Monitor]
	if m == nil || m.LastJob != j.ID {
		return
	}
	old := *m
	now := ms.q.now()
	st, reason := monitorVerdict(j)
	m.LastCheck, m.Reason = now, reason
	m.Checks++
	if j.State == wire.JobDone && j.Result != nil && j.Result.Hash != "" {
		m.Hash = j.Result.Hash
	}
	m.cachedSig = ""
	if j.State == wire.JobDone {
		m.cachedSig = j.Spec.CacheSig
	}
	if st != "" && st != m.State {
		ms.changes = append(ms.changes, StateChange{Monitor: m.ID, URL: m.Spec.URL, From: m.State, To: st, Reason: reason, At: now})
		if len(ms.changes) > maxChanges {
			ms.changes = slices.Delete(ms.changes, 0, len(ms.changes)-maxChanges)
		}
		ch.changes = true
		m.State, m.LastStateChange = st, now
	}
	ch.monitors = append(ch.monitors, m)
	if m.State != old.State || (old.Hash != "" && m.Hash != old.Hash) {
		ch.monNotes = append(ch.monNotes, [2]Monitor{old, *m})
	}
}

// nextRunLocked is when the first monitor whose last job ended is due
// (zero: none).
func (ms *Monitors) nextRunLocked() time.Time {
	var next time.Time
	for _, m := range ms.byID {
		if m.LastJob == "" || ms.q.active[m.LastJob] == nil {
			if !m.NextRun.IsZero() && (next.IsZero() || m.NextRun.Before(next)) {
				next = m.NextRun
			}
		}
	}
	return next
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
