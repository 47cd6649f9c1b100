package jobs

import (
	"slices"
	"time"
)

// worker is one worker's job slots as the scheduler sees them.
type worker struct {
	slots, used int
	refusedAt   time.Time // refused a run: skipped for refuseBackoff, or until it frees a slot or changes its slots
}

// refuseBackoff is how long a worker that refused a run is skipped: its
// slot count may lag behind (an attempt that just reported Done frees its
// slot a moment later), so it is tried again soon, not never.
const refuseBackoff = time.Second

// refusing reports whether w refused a run too recently to be tried.
func (w *worker) refusing(now time.Time) bool {
	return !w.refusedAt.IsZero() && now.Before(w.refusedAt.Add(refuseBackoff))
}

// workerSlots are the registered workers' job slots. It has no lock of its
// own: the queue's mutex guards it, since taking a slot goes with a job's
// change of state.
type workerSlots struct {
	byID map[string]*worker
	last string // the worker picked last, for round robin among ties
}

// set registers a worker with its number of slots, or changes them; it
// also clears a refusal (the worker is tried again).
func (s *workerSlots) set(id string, slots int) {
	w := s.byID[id]
	if w == nil {
		w = &worker{}
		s.byID[id] = w
	}
	w.slots, w.refusedAt = max(slots, 0), time.Time{}
}

// remove forgets a worker.
func (s *workerSlots) remove(id string) { delete(s.byID, id) }

// refused marks a worker that refused a run at now.
func (s *workerSlots) refused(id string, now time.Time) {
	if w := s.byID[id]; w != nil {
		w.refusedAt = now
	}
}

// freed clears a worker's refusal: it frees a slot now.
func (s *workerSlots) freed(id string) {
	if w := s.byID[id]; w != nil {
		w.refusedAt = time.Time{}
	}
}

// release gives back a slot of a running attempt.
func (s *workerSlots) release(id string) {
	if w := s.byID[id]; w != nil && w.used > 0 {
		w.used--
	}
}

// pick picks a worker for j, or "" when none may take it now.
func (s *workerSlots) pick(j *Job, now time.Time) string {
	free := map[string]int{}
	for id, w := range s.byID {
		if !w.refusing(now) && w.slots-w.used > 0 {
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
	for id := range s.byID {
		if !avoid[id] {
			fallback = false
			break
		}
	}
	id := pickWorker(free, avoid, fallback, s.last)
	if id != "" {
		s.last = id
	}
	return id
}

// free is the number of slots that could take an attempt now.
func (s *workerSlots) free(now time.Time) int {
	n := 0
	for _, w := range s.byID {
		if !w.refusing(now) && w.slots > w.used {
			n += w.slots - w.used
		}
	}
	return n
}

// nextRetry is when the first refusing worker is tried again (zero: none
// is refusing).
func (s *workerSlots) nextRetry() time.Time {
	var next time.Time
	for _, w := range s.byID {
		if !w.refusedAt.IsZero() {
			if t := w.refusedAt.Add(refuseBackoff); next.IsZero() || t.Before(next) {
				next = t
			}
		}
	}
	return next
}

// stats are the slots by worker id.
func (s *workerSlots) stats() []WorkerStats {
	var out []WorkerStats
	for id, w := range s.byID {
		out = append(out, WorkerStats{ID: id, Slots: w.slots, Used: w.used, Free: max(w.slots-w.used, 0)})
	}
	slices.SortFunc(out, func(a, b WorkerStats) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
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
