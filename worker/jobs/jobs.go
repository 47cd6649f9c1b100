// Package jobs runs the master's render and check jobs on a worker
// (docs/jobs.md, "Worker executor"). An Executor has a fixed number of
// job slots; Start takes one attempt (wire.JobRun) when a slot is free and
// refuses otherwise — jobs wait in the master's queue, never in memory
// here. Each attempt leases a pooled browser, loads the URL, waits, then
// captures (renders) or hashes the page's text (checks), and reports
// Working every report interval and Done once at the end.
package jobs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// Defaults of Config.
const (
	DefaultReportEvery    = 5 * time.Second
	DefaultMaxResultBytes = 6 << 20 // under the RMI frame limit of 8 MiB
	DefaultTimeout        = 60 * time.Second
	DefaultDoneRetries    = 5
	DefaultDoneBackoff    = 200 * time.Millisecond
)

// ErrNoSlot is Start's refusal when every job slot is busy.
var ErrNoSlot = errors.New("jobs: no free job slot")

// ErrClosed is Start's refusal once the executor is closing.
var ErrClosed = errors.New("jobs: executor closed")

// ErrPermanent is wrapped by Leaser errors that a retry cannot cure (an
// app that is not deployed here); the attempt then fails permanently.
var ErrPermanent = errors.New("jobs: permanent failure")

// Lease is a leased browser; *pool.Lease is one.
type Lease interface {
	Browser() browser.Browser
	// Return gives the browser back (its pool's back sequence runs, or a
	// general-pool browser is reset for the next job); it must not block.
	Return()
}

// Leaser lends browsers: app "" = the general pool, otherwise the app's
// specific pool (or a general browser under the app's navigation policy
// and egress rules).
type Leaser interface {
	// allow are the job's egress rules (wire.JobRun.Allow), which the
	// browser's egress guard must apply for this job.
	Lease(ctx context.Context, app string, allow []string) (Lease, error)
}

// Reporter tells the master about attempts (wire.ObjJobQueue).
type Reporter interface {
	Working(ctx context.Context, p wire.JobProgress) error
	Done(ctx context.Context, o wire.JobOutcome) error
	// Ready asks the master's start gate whether the page may be loaded
	// now: 0 = go, else ask again after that long.
	Ready(ctx context.Context, p wire.JobProgress) (time.Duration, error)
	// Started says how long after the go the page's request left.
	Started(ctx context.Context, s wire.JobStarted) error
}

// Config tunes an Executor. Zero values pick the defaults.
type Config struct {
	// Slots is how many attempts run at once (at least 1).
	Slots int
	// ReportEvery is the Working interval when a JobRun names none.
	ReportEvery time.Duration
	// MaxResultBytes bounds a render's bytes (a spec's MaxBytes may only
	// lower it).
	MaxResultBytes int64
	// Timeout bounds an attempt whose spec names no TimeoutMs.
	Timeout time.Duration
	// DoneRetries and DoneBackoff bound the retries of a Done report that
	// failed (the backoff doubles, up to 16 times the first).
	DoneRetries int
	DoneBackoff time.Duration
	// Clock is the clock of the timings (default clock.Real).
	Clock clock.Clock
	// OnEnd, if set, is called once per attempt that ends with its kind
	// and result (a check state, "done", "failed" or "cancelled"), for
	// metrics.
	OnEnd  func(kind, result string)
	Logger zerolog.Logger
}

// Results passed to Config.OnEnd besides the check states.
const (
	ResultDone      = "done"
	ResultFailed    = "failed"
	ResultCancelled = "cancelled"
)

// Stats are the executor's slots.
type Stats struct {
	Slots int `json:"slots"`
	Used  int `json:"used"`
	Free  int `json:"free"`
}

// Executor runs job attempts. Its methods are safe for concurrent use.
type Executor struct {
	cfg    Config
	leaser Leaser
	rep    Reporter
	log    zerolog.Logger

	// reportCtx ends when Close gives up waiting: Done retries stop.
	reportCtx    context.Context
	reportCancel context.CancelFunc

	mu      sync.Mutex
	closed  bool
	running map[runKey]*attempt
	wg      sync.WaitGroup
}

type runKey struct {
	id      string
	attempt int
}

type attempt struct {
	run    wire.JobRun
	cancel context.CancelCauseFunc
}

// errCancelled and errClosing are the causes an attempt's context ends
// with when Cancel or Close stop it.
var (
	errCancelled = errors.New("cancelled")
	errClosing   = errors.New("worker shutting down")
)

// New makes an executor; l and r must not be nil.
func New(cfg Config, l Leaser, r Reporter) *Executor {
	if cfg.Slots < 1 {
		cfg.Slots = 1
	}
	config.OrDefault(&cfg.ReportEvery, DefaultReportEvery)
	config.OrDefault(&cfg.MaxResultBytes, DefaultMaxResultBytes)
	config.OrDefault(&cfg.Timeout, DefaultTimeout)
	config.OrDefault(&cfg.DoneRetries, DefaultDoneRetries)
	config.OrDefault(&cfg.DoneBackoff, DefaultDoneBackoff)
	if cfg.Clock == nil {
		cfg.Clock = clock.Real
	}
	e := &Executor{cfg: cfg, leaser: l, rep: r, log: cfg.Logger.With().Str("component", "jobs").Logger(),
		running: map[runKey]*attempt{}}
	e.reportCtx, e.reportCancel = context.WithCancel(context.Background())
	return e
}

// SlotsFor is the default number of job slots of a worker that may run
// maxBrowsers browsers: a quarter of them, at least one, so jobs never
// crowd out the people using the worker.
func SlotsFor(maxBrowsers int) int { return max(1, maxBrowsers/4) }

// Stats returns the slots used and free.
func (e *Executor) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return Stats{Slots: e.cfg.Slots, Used: len(e.running), Free: e.cfg.Slots - len(e.running)}
}

// Start takes one attempt and answers at once: nil = it runs and will be
// reported (Working, then Done); an error = refused, nothing runs (no free
// slot, closing, or this attempt already runs).
func (e *Executor) Start(run wire.JobRun) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	key := runKey{run.ID, run.Attempt}
	switch {
	case e.closed:
		return ErrClosed
	case len(e.running) >= e.cfg.Slots:
		return fmt.Errorf("%w (%d of %d used)", ErrNoSlot, len(e.running), e.cfg.Slots)
	case e.running[key] != nil:
		return fmt.Errorf("jobs: attempt %d of job %s already runs", run.Attempt, run.ID)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	a := &attempt{run: run, cancel: cancel}
	e.running[key] = a
	e.wg.Add(1)
	go e.runAttempt(ctx, a)
	return nil
}

// Cancel stops a running attempt. No Done is sent for it: the master asked
// and already knows. An attempt that does not run (ended, never started)
// is no error, so the master may cancel blindly.
func (e *Executor) Cancel(id string, attempt int) error {
	e.mu.Lock()
	a := e.running[runKey{id, attempt}]
	e.mu.Unlock()
	if a != nil {
		a.cancel(errCancelled)
	}
	return nil
}

// Close refuses new attempts, cancels the running ones and waits for them
// to end. Their Done says "worker shutting down" (not permanent), so the
// master queues them again at once. When ctx ends first, pending Done
// retries are abandoned; Close still waits for every goroutine, which end
// promptly.
func (e *Executor) Close(ctx context.Context) error {
	e.mu.Lock()
	e.closed = true
	for _, a := range e.running {
		a.cancel(errClosing)
	}
	e.mu.Unlock()
	done := make(chan struct{})
	go func() { e.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		e.reportCancel()
		<-done
	}
	e.reportCancel()
	return err
}

// runAttempt runs a, reports it and frees its slot.
func (e *Executor) runAttempt(ctx context.Context, a *attempt) {
	defer e.wg.Done()
	run := a.run
	// The slot is free once the work is: before Done is reported, since
	// the master hands the slot to the next job as soon as it hears Done.
	var freeOnce sync.Once
	free := func() {
		freeOnce.Do(func() {
			e.mu.Lock()
			delete(e.running, runKey{run.ID, run.Attempt})
			e.mu.Unlock()
			a.cancel(nil)
		})
	}
	defer free()
	every := time.Duration(run.ReportEveryMs) * time.Millisecond
	config.OrDefault(&every, e.cfg.ReportEvery)
	stopProgress := e.progress(ctx, run, every)
	out := e.execute(ctx, run)
	stopProgress()

	cause := context.Cause(ctx)
	result := resultOf(run.Spec.Kind, out)
	if errors.Is(cause, errCancelled) {
		result = ResultCancelled
	}
	if e.cfg.OnEnd != nil {
		e.cfg.OnEnd(run.Spec.Kind, result)
	}
	ev := e.log.Info()
	if out.Err != "" {
		ev = e.log.Warn().Str("err", out.Err).Bool("permanent", out.Permanent)
	}
	ev.Str("job", run.ID).Int("attempt", run.Attempt).Str("kind", run.Spec.Kind).Str("result", result).
		Int("status", out.Status).Int64("total_ms", out.Timings.TotalMs).Msg("job attempt ended")
	if result == ResultCancelled {
		return
	}
	free()
	e.reportDone(out)
}

// resultOf names an outcome for metrics.
func resultOf(kind string, out wire.JobOutcome) string {
	switch {
	case out.Err != "":
		return ResultFailed
	case kind == wire.JobCheck:
		return out.Check
	default:
		return ResultDone
	}
}

// progress sends Working every interval until stop is called; stop waits
// for the sender to end.
func (e *Executor) progress(ctx context.Context, run wire.JobRun, every time.Duration) (stop func()) {
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rctx, cancel := context.WithTimeout(e.reportCtx, every)
			err := e.rep.Working(rctx, wire.JobProgress{ID: run.ID, Attempt: run.Attempt})
			cancel()
			if err != nil {
				// The next tick tries again; the master gives the attempt
				// up only after about two intervals without news.
				e.log.Debug().Err(err).Str("job", run.ID).Msg("working report failed")
			}
		}
	}()
	return func() { close(quit); <-done }
}

// reportDone sends out, retrying a few times with backoff.
func (e *Executor) reportDone(out wire.JobOutcome) {
	delay := e.cfg.DoneBackoff
	for i := 0; ; i++ {
		rctx, cancel := context.WithTimeout(e.reportCtx, 10*time.Second)
		err := e.rep.Done(rctx, out)
		cancel()
		if err == nil {
			return
		}
		if i+1 >= e.cfg.DoneRetries || e.reportCtx.Err() != nil {
			// The master gives the attempt up when its lease runs out and
			// runs the job again.
			e.log.Warn().Err(err).Str("job", out.ID).Int("attempt", out.Attempt).Msg("could not report a finished job attempt")
			return
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-e.reportCtx.Done():
			t.Stop()
		}
		delay = min(2*delay, 16*e.cfg.DoneBackoff)
	}
}

// hash is the hex SHA-256 of b.
func hash(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
