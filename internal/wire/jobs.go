package wire

import (
	"math"
	"time"
)

// Jobs: browser work done by the cluster without a person watching
// (docs/jobs.md). The master owns the queue (master/jobs) and pushes one
// attempt at a time to a worker with a free job slot; the worker runs it in
// a leased browser (worker/jobs), reports JobWorking every ReportEvery while
// it runs and JobDone once at the end.

// ObjJobQueue is the master's job queue object, called by workers
// (contract.JobQueue); the master starts attempts with the worker's
// contract.WorkerApps.RunJob.
const ObjJobQueue = "JobQueue"

// Job kinds.
const (
	JobRender = "render"
	JobCheck  = "check"
)

// Render formats.
const (
	FormatPNG  = "png"
	FormatJPEG = "jpeg"
	FormatPDF  = "pdf"
	FormatHTML = "html" // serialized DOM after load
	FormatText = "text" // document.body.innerText
)

// Job states (the url-server document's QUEUED → WORKING → DONE, plus the
// ends a user can see).
const (
	JobQueued     = "queued"
	JobWorking    = "working"
	JobDone       = "done"
	JobFailed     = "failed"
	JobDisallowed = "disallowed"
	JobCancelled  = "cancelled"
)

// Check outcomes (the url-checker document's states).
const (
	CheckOK          = "ok"
	CheckChanged     = "changed"
	CheckUnavailable = "unavailable"
	CheckError       = "error"
)

// JobSpec is what a client asks for. Durations are milliseconds so the
// JSON API and msgpack agree without custom codecs.
type JobSpec struct {
	Kind string `codec:"kind" json:"kind"`
	URL  string `codec:"url" json:"url"`
	// App names the app whose specific pool lends the browser (logged in by
	// the pool's init sequence) and whose navigation policy applies; ""
	// uses the general pool.
	App string `codec:"app" json:"app,omitempty"`
	// User is who submitted the job (the API principal); it is part of the
	// cache key of renders made in a logged-in pool.
	User string `codec:"user" json:"user,omitempty"`

	// Render options.
	Format   string `codec:"fmt" json:"format,omitempty"`
	Width    int    `codec:"w" json:"width,omitempty"`
	Height   int    `codec:"h" json:"height,omitempty"`
	FullPage bool   `codec:"full" json:"fullPage,omitempty"`
	Quality  int    `codec:"q" json:"quality,omitempty"` // jpeg 1..100

	// Wait after load: a CSS selector to appear, network idle, and/or a
	// fixed delay; all that are set apply, in that order.
	WaitSelector    string `codec:"wsel" json:"waitSelector,omitempty"`
	WaitNetworkIdle bool   `codec:"widle" json:"waitNetworkIdle,omitempty"`
	WaitDelayMs     int64  `codec:"wdelay" json:"waitDelayMs,omitempty"`
	// TimeoutMs bounds one attempt (navigation, waits and capture).
	TimeoutMs int64 `codec:"timeout" json:"timeoutMs,omitempty"`

	// Subresources lets a check's browser load the page's subresources
	// (images, scripts, styles), each held to its host's budget; without
	// it a check loads its document only (and what its redirects lead
	// to). Renders always load them.
	Subresources bool `codec:"subres" json:"subresources,omitempty"`

	// IgnoreRobots lets an explicitly requested render fetch a URL that
	// robots.txt disallows; refused for checks and monitors.
	IgnoreRobots bool `codec:"norobots" json:"ignoreRobots,omitempty"`
	// MaxAgeMs: a render cached for longer is stale (0 = the default).
	MaxAgeMs int64 `codec:"maxage" json:"maxAgeMs,omitempty"`
	// NoCache: render even when a fresh result is cached.
	NoCache bool `codec:"nocache" json:"noCache,omitempty"`

	// PrevHash is the content hash of the previous check of the same URL
	// (a monitor's), so the worker can say "changed".
	PrevHash string `codec:"prev" json:"-"`
	// MaxBytes bounds the result; larger results fail the job.
	MaxBytes int64 `codec:"max" json:"-"`

	// CacheSig and CacheHolder tie a render to the result cache's
	// reservation it fills (set by the master, never by clients).
	CacheSig    string `codec:"csig" json:"cacheSig,omitempty"`
	CacheHolder string `codec:"cholder" json:"cacheHolder,omitempty"`
}

// JobRun is one attempt the master hands to a worker.
type JobRun struct {
	ID      string  `codec:"id"`
	Attempt int     `codec:"attempt"`
	Spec    JobSpec `codec:"spec"`
	// ReportEveryMs is how often the worker sends JobWorking; the master
	// gives the attempt up after about twice that without news.
	ReportEveryMs int64 `codec:"every"`
	// Epoch is the master's incarnation; a worker drops reports for runs
	// of an older master only by their ids (the master ignores unknown ones).
	MasterID string `codec:"master"`
	// Allow are the egress rules of the master's --jobs-allow: the
	// worker's guard lets this job's browser reach them (the one switch
	// for jobs; the workers' --egress-allow is for interactive apps).
	Allow []string `codec:"allow,omitempty"`
}

// JobProgress is a worker's WORKING report.
type JobProgress struct {
	ID      string `codec:"id"`
	Attempt int    `codec:"attempt"`
}

// JobStarted tells the gate how long after its go the page's request left
// the browser (measured on the worker: no clocks compared); NotSent: the
// load ended without a request (refused, failed before sending).
type JobStarted struct {
	ID      string `codec:"id"`
	Attempt int    `codec:"attempt"`
	DelayNs int64  `codec:"delay"`
	NotSent bool   `codec:"notsent,omitempty"`
}

// JobRequest is one request of a job's browser as the worker's egress
// endpoint sees it (JobQueue.Request): asking for a go (RequestGo), then
// saying it was written (RequestSent) and that it ended (RequestEnd). An
// https request is its CONNECT tunnel: sent when connected, ended when
// closed.
type JobRequest struct {
	ID      string `codec:"id"`
	Attempt int    `codec:"attempt"`
	// N numbers the attempt's requests.
	N int64 `codec:"n"`
	// Host is the host:port the request goes to.
	Host  string `codec:"host"`
	Phase string `codec:"phase"`
	// Doc: the page's document, whose start passed the start gate (Ready)
	// already: it takes only a concurrency slot.
	Doc bool `codec:"doc,omitempty"`
	// DelayNs (RequestSent) is how long after the go the request was
	// written, measured on the worker.
	DelayNs int64 `codec:"delay,omitempty"`
}

// JobRequest phases.
const (
	RequestGo   = "go"
	RequestSent = "sent"
	RequestEnd  = "end"
)

// JobGo answers JobQueue.Ready: 0 = load the page now.
type JobGo struct {
	WaitMs int64 `codec:"wait"`
}

// JobTimings are the steps of one attempt, in milliseconds.
type JobTimings struct {
	LeaseMs    int64 `codec:"lease" json:"leaseMs"`
	GateMs     int64 `codec:"gate" json:"gateMs"` // waiting for the master's start gate
	NavigateMs int64 `codec:"nav" json:"navigateMs"`
	WaitMs     int64 `codec:"wait" json:"waitMs"`
	CaptureMs  int64 `codec:"capture" json:"captureMs"`
	TotalMs    int64 `codec:"total" json:"totalMs"`
}

// JobOutcome is a worker's DONE report for one attempt.
type JobOutcome struct {
	ID      string `codec:"id"`
	Attempt int    `codec:"attempt"`
	// Err is why the attempt failed ("" = it produced a result). Permanent
	// failures (result too large, refused by the navigation policy, invalid
	// selector) are not retried.
	Err       string `codec:"err,omitempty"`
	Permanent bool   `codec:"perm,omitempty"`

	// What the page said.
	Status   int    `codec:"status"` // HTTP status of the main document (0 = none)
	FinalURL string `codec:"final"`
	Title    string `codec:"title"`
	// Hash is the hex SHA-256 of the page's text (checks) or of Body.
	Hash string `codec:"hash"`
	// Check is the check's state (CheckOK...) and Reason why.
	Check  string `codec:"check,omitempty"`
	Reason string `codec:"reason,omitempty"`

	// Body is a render's bytes; ContentType says what they are.
	Body        []byte     `codec:"body,omitempty"`
	ContentType string     `codec:"ctype,omitempty"`
	Timings     JobTimings `codec:"timings"`
	// RetryAfter is the main document's Retry-After header, as sent (the
	// master's back-off on 429 and 503).
	RetryAfter string `codec:"retryAfter,omitempty"`
	// Disallowed: the worker's egress guard refused the job's document
	// (Reason says why); the job ends DISALLOWED, not retried.
	Disallowed bool `codec:"disallowed,omitempty"`
}

// BudgetPoliteness is a politeness budget its site holds back now
// (JobsStatus.Polite): paused after a 429 or 503 until PausedUntil, or
// spaced by a robots.txt Crawl-delay.
type BudgetPoliteness struct {
	Budget       string    `json:"budget"`
	PausedUntil  time.Time `json:"pausedUntil,omitzero"`
	Reason       string    `json:"reason,omitempty"`
	CrawlDelayMs int64     `json:"crawlDelayMs,omitempty"`
}

// JobPoliteness is what the job's site asked of it while it was queued
// (master/jobs back-off): how long it waited for the site's back-off
// after a 429 or 503 and why, and the site's robots.txt Crawl-delay.
type JobPoliteness struct {
	BackoffMs     int64  `json:"backoffMs,omitempty"`
	BackoffReason string `json:"backoffReason,omitempty"`
	CrawlDelayMs  int64  `json:"crawlDelayMs,omitempty"`
}

// JobsStatus is the jobs side of ClusterStatus (status CLI, dashboard).
type JobsStatus struct {
	// Workers' job slots.
	Workers []JobSlots `json:"workers"`
	// Queued jobs by class (host queues), plus "leftover".
	Queued  map[string]int `json:"queued"`
	Working int            `json:"working"`
	// Outcomes counts finished jobs by end state since the master started.
	Outcomes map[string]int64 `json:"outcomes"`
	// Monitors by state ("" = not checked yet).
	Monitors map[string]int `json:"monitors"`
	// Changes are the latest monitor state changes, newest first.
	Changes []MonitorChange `json:"changes"`
	// Polite lists the budgets their sites hold back now: paused by a
	// back-off (429/503) or spaced by a robots.txt Crawl-delay.
	Polite []BudgetPoliteness `json:"polite,omitempty"`
	Cache  CacheStatus        `json:"cache"`
	// Wait is the time from submission to an attempt's start, Run the
	// duration of attempts (seconds).
	Wait Histogram `json:"wait"`
	Run  Histogram `json:"run"`
}

// Histogram is a cumulative histogram (Prometheus style).
type Histogram struct {
	Count   uint64            `json:"count"`
	Sum     float64           `json:"sum"`
	Buckets []HistogramBucket `json:"buckets"`
}

// HistogramBucket counts the observations at most Le.
type HistogramBucket struct {
	Le    float64 `json:"le"`
	Count uint64  `json:"count"`
}

// Quantile estimates the q-quantile (0..1) as the upper bound of the
// bucket that holds it (0 without observations; +Inf beyond the last).
func (h Histogram) Quantile(q float64) float64 {
	if h.Count == 0 {
		return 0
	}
	rank := q * float64(h.Count)
	for _, b := range h.Buckets {
		if float64(b.Count) >= rank {
			return b.Le
		}
	}
	return math.Inf(1)
}

// JobSlots are one worker's job slots.
type JobSlots struct {
	Worker string `json:"worker"`
	Slots  int    `json:"slots"`
	Used   int    `json:"used"`
	Free   int    `json:"free"`
}

// MonitorChange is one monitor state change.
type MonitorChange struct {
	Monitor string `json:"monitor"`
	URL     string `json:"url"`
	From    string `json:"from"`
	To      string `json:"to"`
	Reason  string `json:"reason,omitempty"`
	At      string `json:"at"` // RFC 3339
}

// CacheStatus are the render cache's figures.
type CacheStatus struct {
	Entries   int64 `json:"entries"`
	Bytes     int64 `json:"bytes"`
	Hits      int64 `json:"hits"`
	Misses    int64 `json:"misses"`
	Evictions int64 `json:"evictions"`
}
