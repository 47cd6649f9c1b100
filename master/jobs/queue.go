package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/internal/egress"
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
// concurrent use.
type Queue struct {
	cfg    Config
	st     *state.Store
	log    zerolog.Logger
	rules  []classRule
	allow  []egress.Rule
	robots *robotsCache
	kick   chan struct{}
	m      *metrics

	mu         sync.Mutex
	active     map[string]*Job // queued and working
	hosts      map[string]*hostQueue
	order      []string // classes holding a host slot, round-robin order
	rr         int
	leftover   []*Job
	leftoverBy map[string]int
	budgets    map[string]*budget
	workers    map[string]*worker
	lastWorker string
	finished   []finishedRef // by finish time, for the retention sweep
	seq        uint64
	waiters    map[string][]chan struct{}
	monitors   map[string]*Monitor
	changes    []StateChange
	wake       time.Time // earliest time a class blocked by its limits may start
	outcomes   map[string]int64
	shrunk     bool // a host queue lost a job since the last refill

	maxInterval time.Duration // the longest class interval (budget cleanup)
}

type hostQueue struct {
	class  string
	jobs   []*Job
	limits Limits
}

// budget is one politeness budget's use: running attempts, the token
// bucket's theoretical arrival time (GCRA) and the last start.
type budget struct {
	running int
	tat     time.Time
	last    time.Time
	// goTat and goLast pace the starts of the page loads themselves (the
	// start gate, Ready) with the same limits as the hand-overs.
	goTat, goLast time.Time
	// pending is the attempt ("id/attempt") whose go was given and whose
	// request time is not known yet (Started); the next go waits for it,
	// at most confirmWait after goAt.
	pending string
	goAt    time.Time
}

// idle: nothing runs and neither the hand-overs' limits nor the start
// gate's hold anything back any more, so the budget can be forgotten. The
// gate's state counts too: forgotten after a quick attempt ended, it let
// the next page load go at once (CI: two requests 0.96 s apart at a 1/s
// host once browsers leased in ~0.2 s).
func (b *budget) idle(now time.Time, maxInterval time.Duration) bool {
	return b.running <= 0 && b.pending == "" &&
		!b.tat.After(now) && !b.goTat.After(now) &&
		now.Sub(b.last) > maxInterval && now.Sub(b.goLast) > maxInterval
}

type worker struct {
	slots, used int
	refusedAt   time.Time // refused a run: skipped for refuseBackoff, or until it frees a slot or changes its slots
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
	q := &Queue{cfg: cfg, st: st, log: cfg.Logger.With().Str("component", "jobs").Logger(),
		rules: rules, allow: allow, kick: make(chan struct{}, 1), m: newMetrics(),
		active: map[string]*Job{}, hosts: map[string]*hostQueue{}, leftoverBy: map[string]int{},
		budgets: map[string]*budget{}, workers: map[string]*worker{}, waiters: map[string][]chan struct{}{},
		monitors: map[string]*Monitor{}, outcomes: map[string]int64{}}
	q.m.q = q
	q.maxInterval = cfg.Defaults.Interval
	for _, r := range cfg.Classes {
		if r.Limits != nil {
			q.maxInterval = max(q.maxInterval, r.Limits.Interval)
		}
	}
	if cfg.Robots == nil {
		cfg.Robots = defaultRobotsFetcher(q.addrAllowed)
		q.cfg.Robots = cfg.Robots
	}
	q.robots = &robotsCache{fetch: cfg.Robots, ttl: cfg.RobotsTTL, eTTL: cfg.RobotsErrorTTL, now: cfg.Clock.Now, entries: map[string]*robotsEntry{}}
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
		q.placeLocked(j, false)
	}
	sort.Slice(q.finished, func(a, b int) bool { return q.finished[a].at.Before(q.finished[b].at) })
	if err := state.Each(q.st, BucketMonitors, func(_ string, m Monitor) { mm := m; q.monitors[m.ID] = &mm }); err != nil {
		return fmt.Errorf("jobs: load monitors: %w", err)
	}
	if _, err := q.st.Get(BucketChanges, changesKey, &q.changes); err != nil {
		return fmt.Errorf("jobs: load monitor changes: %w", err)
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
	return len(c.jobs) == 0 && len(c.bodies) == 0 && len(c.delJobs) == 0 && len(c.monitors) == 0 && len(c.delMons) == 0 && !c.changes
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
		raw, err := json.Marshal(q.changes)
		if err != nil {
			return err
		}
		puts = append(puts, kv{BucketChanges, changesKey, raw})
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
	job *Job
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
		preps[i] = q.prepare(ctx, q.bounded(s), mon != nil, resolved)
	}

	q.mu.Lock()
	now := q.now()
	if err := q.fitsLocked(preps); err != nil {
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
	if mon != nil && q.monitors[mon.ID] == mon { // not removed meanwhile
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
			q.active[j.ID] = j
			q.placeLocked(j, false)
		}
		out[i] = j.clone()
	}
	q.commit(ch2) // monitor updates of jobs disallowed at once
	q.mu.Unlock()
	q.after(ctx, ch2)
	q.Kick()
	return out, nil
}

// resolution caches one batch's name lookups.
type resolution struct {
	addrs []netip.Addr
	err   error
}

// InternalHostSuffix ends the host names of apps' internal origins
// (<app>.app.cloudbrowser.internal), which only workers serve.
const InternalHostSuffix = ".app.cloudbrowser.internal"

// prepare decides a job: its class, budget and whether a rule refuses it.
// It resolves the host and may fetch robots.txt, so it runs unlocked.
func (q *Queue) prepare(ctx context.Context, spec wire.JobSpec, monitor bool, cache map[string]resolution) prepared {
	j := &Job{Spec: spec, State: wire.JobQueued}
	p := prepared{job: j}
	refuse := func(code, reason string) prepared {
		j.State, j.Disallow, j.Reason = wire.JobDisallowed, code, reason
		return p
	}
	u, _ := url.Parse(spec.URL) // Admit parsed it
	scheme := strings.ToLower(u.Scheme)
	host, port, hostport := hostPort(u)
	j.Class, j.Budget = hostport, hostport
	if scheme != "http" && scheme != "https" {
		j.Class = scheme + ":"
		return refuse(DisallowScheme, fmt.Sprintf("scheme %q is not http or https", scheme))
	}
	class, named, _ := q.classOf(host, hostport)
	j.Class = class
	if strings.HasSuffix(host, InternalHostSuffix) {
		// An app's own bundle, served by the worker's egress endpoint to
		// that app's browsers only: no DNS, no robots.txt, and the app's
		// policy (which always allows its own origin) is the only rule.
		if q.cfg.Policy != nil {
			if ok, reason := q.cfg.Policy(spec); !ok {
				return refuse(DisallowPolicy, reason)
			}
		}
		if spec.App == "" || !strings.HasPrefix(host, strings.ToLower(spec.App)+".") {
			return refuse(DisallowPolicy, fmt.Sprintf("%s is served only to the browsers of its own app (set \"app\")", host))
		}
		j.Budget = "host:" + hostport
		return p
	}

	// The address decides, after resolution: a name may point anywhere.
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a.Unmap().WithZone("")}
	} else {
		r, ok := cache[host]
		if !ok {
			r.addrs, r.err = q.cfg.Resolver(ctx, host)
			cache[host] = r
		}
		addrs = r.addrs
		if r.err != nil {
			// The worker's egress guard will refuse it too; a check then
			// says "unavailable". Its budget is the name's own.
			q.log.Debug().Err(r.err).Str("host", host).Msg("job host does not resolve")
		}
	}
	for _, a := range addrs {
		if ok, why := q.addrAllowed(host, a, port); !ok {
			return refuse(DisallowAddress, fmt.Sprintf("%s resolves to %s, a %s address jobs may not reach", host, a, why))
		}
	}
	switch {
	case named:
		j.Budget = "class:" + class
	case len(addrs) > 0:
		// One budget per address: aliases of one IP:port share it.
		slices.SortFunc(addrs, func(a, b netip.Addr) int { return a.Compare(b) })
		j.Budget = net.JoinHostPort(addrs[0].Unmap().String(), strconv.Itoa(port))
	default:
		j.Budget = "host:" + hostport
	}
	if q.cfg.Policy != nil {
		if ok, reason := q.cfg.Policy(spec); !ok {
			if reason == "" {
				reason = "refused by the navigation policy"
			}
			return refuse(DisallowPolicy, reason)
		}
	}
	if monitor || spec.Kind == wire.JobCheck || !spec.IgnoreRobots {
		pq := u.EscapedPath()
		if pq == "" {
			pq = "/"
		}
		if u.RawQuery != "" {
			pq += "?" + u.RawQuery
		}
		if ok, unreachable, reason := q.robots.check(ctx, scheme, hostport, pq); !ok {
			if unreachable {
				return refuse(DisallowRobotsError, reason)
			}
			return refuse(DisallowRobots, reason)
		}
	}
	return p
}

// hostPort returns the URL's lower-case host, its port (the scheme's
// default filled in) and host:port.
func hostPort(u *url.URL) (string, int, string) {
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	port, err := strconv.Atoi(u.Port())
	if err != nil || port == 0 {
		port = 80
		if strings.EqualFold(u.Scheme, "https") {
			port = 443
		}
	}
	return host, port, net.JoinHostPort(host, strconv.Itoa(port))
}

// classOf returns a host's class, whether a rule named it, and its limits.
func (q *Queue) classOf(host, hostport string) (string, bool, Limits) {
	for _, r := range q.rules {
		if !r.match(host, hostport) {
			continue
		}
		limits := q.cfg.Defaults
		if r.Limits != nil {
			limits = *r.Limits
		}
		if r.Class != "" {
			return r.Class, true, limits
		}
		return hostport, false, limits
	}
	return hostport, false, q.cfg.Defaults
}

// limitsOf returns the limits of a job's class, from its URL.
func (q *Queue) limitsOf(j *Job) Limits {
	u, err := url.Parse(j.Spec.URL)
	if err != nil {
		return q.cfg.Defaults
	}
	host, _, hp := hostPort(u)
	_, _, l := q.classOf(host, hp)
	return l
}

// addrAllowed decides an address the way the workers' egress guard does:
// public addresses, and others the AllowAddrs rules name; metadata never.
func (q *Queue) addrAllowed(host string, ip netip.Addr, port int) (bool, string) {
	ip = ip.Unmap().WithZone("")
	class := egress.Classify(ip)
	if class == egress.Public {
		return true, ""
	}
	if class != egress.Metadata {
		for _, r := range q.allow {
			if r.Match(host, ip, port) {
				return true, ""
			}
		}
	}
	return false, string(class)
}

// fitsLocked reports whether the queued ones of preps fit: the leftover
// queue must stay within its bound.
func (q *Queue) fitsLocked(preps []prepared) error {
	extra, newSlots := 0, 0
	qlen := map[string]int{}
	left := map[string]int{}
	for _, p := range preps {
		j := p.job
		if j.State != wire.JobQueued {
			continue
		}
		c := j.Class
		hq := q.hosts[c]
		n := qlen[c]
		if hq != nil {
			n += len(hq.jobs)
		}
		slot := hq != nil || qlen[c] > 0 || len(q.hosts)+newSlots < q.cfg.QueueCount
		if q.leftoverBy[c]+left[c] == 0 && slot && n < q.cfg.QueueLen {
			if hq == nil && qlen[c] == 0 {
				newSlots++
			}
			qlen[c]++
			continue
		}
		left[c]++
		extra++
	}
	if extra > 0 && len(q.leftover)+extra > q.cfg.LeftoverMax {
		return &QueueFullError{RetryAfter: q.retryAfterLocked(len(q.leftover) + extra - q.cfg.LeftoverMax)}
	}
	return nil
}

// retryAfterLocked estimates when n places free up: n starts at the
// host queues' combined start rate.
func (q *Queue) retryAfterLocked(n int) time.Duration {
	rate := 0.0
	for _, hq := range q.hosts {
		rate += hq.limits.StartsPerSec
	}
	config.OrDefault(&rate, 1)
	d := time.Duration(float64(n)/rate*float64(time.Second)) + time.Second
	return min(d.Round(time.Second), time.Hour)
}

// placeLocked puts a queued job into its class's host queue, or the
// leftover queue when the class has no slot or its queue is full. A class
// with jobs in the leftover queue keeps adding there, so each class stays
// FIFO. front (a retry) puts it ahead of its class.
func (q *Queue) placeLocked(j *Job, front bool) {
	c := j.Class
	hq := q.hosts[c]
	if front {
		if hq == nil && len(q.hosts) < q.cfg.QueueCount {
			hq = q.newHostQueue(j)
		}
		if hq != nil {
			// A retry may take its queue one over Queue_Len for a while.
			hq.jobs = slices.Insert(hq.jobs, 0, j)
			return
		}
		q.leftover = slices.Insert(q.leftover, 0, j)
		q.leftoverBy[c]++
		return
	}
	if q.leftoverBy[c] == 0 {
		if hq == nil && len(q.hosts) < q.cfg.QueueCount {
			hq = q.newHostQueue(j)
		}
		if hq != nil && len(hq.jobs) < q.cfg.QueueLen {
			hq.jobs = append(hq.jobs, j)
			return
		}
	}
	q.leftover = append(q.leftover, j)
	q.leftoverBy[c]++
}

func (q *Queue) newHostQueue(j *Job) *hostQueue {
	hq := &hostQueue{class: j.Class, limits: q.limitsOf(j)}
	q.hosts[j.Class] = hq
	q.order = append(q.order, j.Class)
	return hq
}

// refillLocked frees the slots of empty host queues and moves leftover
// jobs, oldest first, into host queues with room.
func (q *Queue) refillLocked() {
	for i := 0; i < len(q.order); {
		c := q.order[i]
		if len(q.hosts[c].jobs) == 0 {
			delete(q.hosts, c)
			q.order = slices.Delete(q.order, i, i+1)
			if q.rr > i {
				q.rr--
			}
			continue
		}
		i++
	}
	if len(q.leftover) == 0 || !q.shrunk {
		return
	}
	q.shrunk = false
	stuck := map[string]bool{}
	kept := q.leftover[:0]
	for _, j := range q.leftover {
		c := j.Class
		hq := q.hosts[c]
		if !stuck[c] {
			if hq == nil && len(q.hosts) < q.cfg.QueueCount {
				hq = q.newHostQueue(j)
			}
			if hq != nil && len(hq.jobs) < q.cfg.QueueLen {
				hq.jobs = append(hq.jobs, j)
				q.leftoverBy[c]--
				if q.leftoverBy[c] == 0 {
					delete(q.leftoverBy, c)
				}
				continue
			}
		}
		stuck[c] = true
		kept = append(kept, j)
	}
	clear(q.leftover[len(kept):])
	q.leftover = kept
}

// removeQueuedLocked takes a queued job out of its queue.
func (q *Queue) removeQueuedLocked(j *Job) {
	if hq := q.hosts[j.Class]; hq != nil {
		if i := slices.Index(hq.jobs, j); i >= 0 {
			hq.jobs = slices.Delete(hq.jobs, i, i+1)
			q.shrunk = true
			return
		}
	}
	if i := slices.Index(q.leftover, j); i >= 0 {
		q.leftover = slices.Delete(q.leftover, i, i+1)
		q.leftoverBy[j.Class]--
		if q.leftoverBy[j.Class] == 0 {
			delete(q.leftoverBy, j.Class)
		}
	}
}

// Record stores a job that is done without running (a render answered from
// the result cache): listed, shown and with its result like any other, and
// counted as done. out's Body is the result.
func (q *Queue) Record(ctx context.Context, s Spec, out wire.JobOutcome) (Job, error) {
	if !s.checked {
		return Job{}, fmt.Errorf("jobs: record: %w", ErrUnchecked)
	}
	spec := q.bounded(s)
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
