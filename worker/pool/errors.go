package pool

import (
	"errors"
)

// The errors of the document, word for word. Leases fail with a
// *LimitError that matches one of them with errors.Is; the worker shows its
// message on a 503 page.
var (
	ErrGlobalMax = errors.New("global maximum number of browsers has been reached")
	ErrPoolMax   = errors.New("maximum number of browsers in the specific pool has been reached")
)

// ErrClosed is returned by Lease after Close.
var ErrClosed = errors.New("pool: manager closed")

// ErrReconfigured fails leases waiting on a pool that was replaced because
// the app's pool configuration changed (or the app was removed).
var ErrReconfigured = errors.New("pool: the application's pool was reconfigured")

// Lease failure reasons, the keys of Counters.LeaseFailures.
const (
	ReasonGlobalMax    = "globalMax"
	ReasonPoolMax      = "poolMax"
	ReasonInitFailed   = "initFailed"   // the browser made for the lease failed its initialization sequence
	ReasonCreateFailed = "createFailed" // the runtime could not make a browser
	ReasonCanceled     = "canceled"     // the caller's context ended first
	ReasonClosed       = "closed"
	ReasonReconfigured = "reconfigured"
	ReasonInvalid      = "invalidConfig"
)

// Sequence kinds, the keys of Counters.SequenceFailures. "ttl" counts
// failed TTL replacements (the old browser is kept).
const (
	SeqInit  = "init"
	SeqBack  = "back"
	SeqTouch = "touch"
	SeqTTL   = "ttl"
)

// LimitError is a lease refused by a browser limit. Error() is the
// document's message; errors.Is matches ErrGlobalMax or ErrPoolMax.
type LimitError struct {
	Reason      string // ReasonGlobalMax or ReasonPoolMax
	App         string // "" for the general pool
	BrowserType string
	Max         int // the limit that was reached
}

func (e *LimitError) Error() string {
	if e.Reason == ReasonPoolMax {
		return ErrPoolMax.Error()
	}
	return ErrGlobalMax.Error()
}

// Is matches the sentinel of the reason.
func (e *LimitError) Is(target error) bool {
	return target == ErrGlobalMax && e.Reason == ReasonGlobalMax ||
		target == ErrPoolMax && e.Reason == ReasonPoolMax
}
