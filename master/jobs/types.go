package jobs

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// Errors callers map to HTTP statuses.
var (
	// ErrNotFound: no job or monitor with that id (404).
	ErrNotFound = errors.New("jobs: not found")
	// ErrFinished: the job already ended (cancel of a finished job, 409).
	ErrFinished = errors.New("jobs: job already finished")
	// ErrNoResult: the job has no result (not DONE, 404 or 409).
	ErrNoResult = errors.New("jobs: job has no result")
	// ErrStaleReport: a worker reported an attempt that is not the job's
	// current one; the report was ignored.
	ErrStaleReport = errors.New("jobs: report for an attempt that is not current")
	// ErrQueueFull matches every *QueueFullError.
	ErrQueueFull = errors.New("jobs: queue full")
)

// QueueFullError refuses a submission over the leftover bound (429).
type QueueFullError struct {
	RetryAfter time.Duration
}

func (e *QueueFullError) Error() string {
	return fmt.Sprintf("jobs: the queue is full; retry after %v", e.RetryAfter)
}

// Is makes errors.Is(err, ErrQueueFull) true.
func (e *QueueFullError) Is(target error) bool { return target == ErrQueueFull }

// Why a job was DISALLOWED (Job.Disallow).
const (
	DisallowScheme      = "scheme"
	DisallowAddress     = "address"
	DisallowPolicy      = "policy"
	DisallowRobots      = "robots"
	DisallowRobotsError = "robots-unreachable"
	// DisallowEgress: the worker's egress guard refused the page (a
	// redirect or a name that led where jobs may not go).
	DisallowEgress = "egress"
)

// Attempt is one try of a job on a worker.
type Attempt struct {
	N       int       `json:"n"`
	Worker  string    `json:"worker"`
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended,omitzero"`
	Err     string    `json:"err,omitempty"`
}

// Job is one job's record.
type Job struct {
	ID   string       `json:"id"`
	Seq  uint64       `json:"seq"`
	Spec wire.JobSpec `json:"spec"`
	// State is wire.JobQueued ... wire.JobCancelled.
	State string `json:"state"`
	// Reason says why a job is DISALLOWED, FAILED (every attempt's reason)
	// or CANCELLED; Disallow is the rule that refused it.
	Reason   string `json:"reason,omitempty"`
	Disallow string `json:"disallow,omitempty"`
	// Class is the job's queue (host:port unless a class rule names
	// one); Budget the politeness budget it counts against (the resolved
	// IP:port, so aliases of one address share it).
	Class   string `json:"class"`
	Budget  string `json:"budget"`
	Monitor string `json:"monitor,omitempty"`

	Created  time.Time `json:"created"`
	Started  time.Time `json:"started,omitzero"`
	Finished time.Time `json:"finished,omitzero"`
	// Worker and Deadline are the current attempt's (WORKING only).
	Worker   string    `json:"worker,omitempty"`
	Deadline time.Time `json:"deadline,omitzero"`
	// Tries numbers attempts (a refused hand-over is not an attempt but
	// still takes a number, so its late reports cannot pass for another).
	Tries    int       `json:"tries"`
	Attempts []Attempt `json:"attempts,omitempty"`
	// Result is the last outcome without its body (Queue.Result has it).
	Result *wire.JobOutcome `json:"result,omitempty"`
	// Politeness is what its site asked of it before its last attempt
	// started: a back-off it waited for, a Crawl-delay.
	Politeness *wire.JobPoliteness `json:"politeness,omitempty"`
}

// Ended reports whether the job reached an end state.
func (j *Job) Ended() bool { return ended(j.State) }

func ended(s string) bool {
	switch s {
	case wire.JobDone, wire.JobFailed, wire.JobDisallowed, wire.JobCancelled:
		return true
	}
	return false
}

func (j *Job) clone() Job {
	c := *j
	c.Attempts = slices.Clone(j.Attempts)
	if j.Result != nil {
		r := *j.Result
		c.Result = &r
	}
	if j.Politeness != nil {
		p := *j.Politeness
		c.Politeness = &p
	}
	return c
}

// record is a job as stored: the spec fields wire keeps out of JSON go
// beside it.
type record struct {
	Job
	PrevHash string `json:"prevHash,omitempty"`
	MaxBytes int64  `json:"maxBytes,omitempty"`
}

func toRecord(j *Job) record {
	return record{Job: j.clone(), PrevHash: j.Spec.PrevHash, MaxBytes: j.Spec.MaxBytes}
}

func (r record) job() *Job {
	j := r.Job
	j.Spec.PrevHash, j.Spec.MaxBytes = r.PrevHash, r.MaxBytes
	return &j
}

// attemptReasons joins every attempt's reason.
func attemptReasons(j *Job) string {
	var parts []string
	for _, a := range j.Attempts {
		parts = append(parts, fmt.Sprintf("attempt %d on %s: %s", a.N, a.Worker, a.Err))
	}
	return strings.Join(parts, "; ")
}

// newID makes a random, URL-safe id that sorts by creation time (base32hex
// keeps byte order), so listing by key lists oldest first.
// seq orders the ids made in one millisecond.
func newID(now time.Time, seq uint64) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(now.UnixMilli())<<16|seq&0xffff)
	_, _ = rand.Read(b[8:])
	return strings.ToLower(base32.HexEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

// Monitor is a URL checked (or rendered) on a schedule.
type Monitor struct {
	ID         string       `json:"id"`
	Spec       wire.JobSpec `json:"spec"`
	IntervalMs int64        `json:"intervalMs"`
	Created    time.Time    `json:"created"`
	NextRun    time.Time    `json:"nextRun"`
	// LastCheck is when the last job ended; State its state ("" = none
	// yet; wire.CheckOK...), Reason always the last one, Hash the last
	// content hash. LastStateChange moves only when State changes.
	LastCheck       time.Time `json:"lastCheck,omitzero"`
	State           string    `json:"state,omitempty"`
	Reason          string    `json:"reason,omitempty"`
	Hash            string    `json:"hash,omitempty"`
	LastStateChange time.Time `json:"lastStateChange,omitzero"`
	LastJob         string    `json:"lastJob,omitempty"`
	Checks          int64     `json:"checks"`

	submitting bool
	// cachedSig is the render cache signature the last job filled (a
	// render monitor's own render; OnMonitorChange leaves it fresh).
	cachedSig string
}

// CachedSig is the render cache signature the monitor's last job filled
// ("" for none): the new content it saw.
func (m Monitor) CachedSig() string { return m.cachedSig }

// Interval is the monitor's period.
func (m *Monitor) Interval() time.Duration { return time.Duration(m.IntervalMs) * time.Millisecond }

// StateChange is one monitor state change (the dashboard's list).
type StateChange struct {
	Monitor string    `json:"monitor"`
	URL     string    `json:"url"`
	From    string    `json:"from"`
	To      string    `json:"to"`
	Reason  string    `json:"reason,omitempty"`
	At      time.Time `json:"at"`
}

// ListOptions filter List.
type ListOptions struct {
	State string // "" = any
	User  string // "" = any submitter; else only jobs whose Spec.User it is
	Limit int    // 0 = 100, at most 1000
	After string // cursor: the last id of the previous page
}

// WorkerStats are one worker's job slots.
type WorkerStats struct {
	ID    string `json:"id"`
	Slots int    `json:"slots"`
	Used  int    `json:"used"`
	Free  int    `json:"free"`
}

// Stats are the queue's figures (status, dashboard).
type Stats struct {
	Workers []WorkerStats `json:"workers"`
	// Queued by class (host queues) plus "leftover".
	Queued   map[string]int   `json:"queued"`
	Working  int              `json:"working"`
	Outcomes map[string]int64 `json:"outcomes"`
	Monitors int              `json:"monitors"`
	// Polite lists the budgets their sites hold back now: a back-off
	// (429/503) or a robots.txt Crawl-delay.
	Polite []wire.BudgetPoliteness `json:"polite,omitempty"`
}
