package jobs

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// ErrUnchecked refuses a Spec that Admit did not make (its zero value), or
// one admitted for another use (a job's spec given to Monitors.Add).
var ErrUnchecked = errors.New("jobs: spec not admitted")

// Spec is a job spec Admit checked: valid, with its defaults filled in and,
// when asked for, its cache signature. Its fields are unexported so that
// nothing else can make one: the queue, the render cache and the API take
// a Spec and trust it instead of checking the spec again.
type Spec struct {
	spec    wire.JobSpec
	sig     string
	canon   string
	monitor bool
	checked bool // false only in the zero value
}

// Wire returns the validated, normalized spec (a copy).
func (s Spec) Wire() wire.JobSpec { return s.spec }

// Signature is the render's cache signature ("" unless admitted with
// CacheKey).
func (s Spec) Signature() string { return s.sig }

// CanonicalURL is the URL the signature was computed on ("" without one).
func (s Spec) CanonicalURL() string { return s.canon }

// WithHolder ties the job to the cache reservation holder holds for the
// spec's signature, so its end fills or fails that reservation. Only the
// master sets these fields: Admit drops any a client sent.
func (s Spec) WithHolder(holder string) Spec {
	s.spec.CacheSig, s.spec.CacheHolder = s.sig, holder
	return s
}

// Keyer computes a render's cache signature and canonical URL
// (rendercache.Cache.Key with the app's pool); an error is about the URL.
type Keyer func(wire.JobSpec) (sig, canonicalURL string, err error)

// AdmitOption adds the rules of one use of a spec to Admit.
type AdmitOption func(*admission)

type admission struct {
	key     Keyer
	monitor bool
}

// CacheKey makes Admit compute a render's cache signature with k, on the
// normalized spec, so it is computed once. Checks have none.
func CacheKey(k Keyer) AdmitOption { return func(a *admission) { a.key = k } }

// AsMonitor admits a monitor's spec: robots.txt is always obeyed and a
// render is made with NoCache (so it runs on schedule whatever is cached).
// With CacheKey a render monitor's spec gets the signature an on-demand
// render of it has, so its result can warm the cache (Config.MonitorCache).
func AsMonitor() AdmitOption { return func(a *admission) { a.monitor = true } }

// Admit is the one place a job spec is validated and normalized, and its
// cache signature computed. Bad input is a *FieldError naming the field.
// CacheSig and CacheHolder are dropped (WithHolder sets them); PrevHash,
// MaxBytes and User pass through: the master sets them, and the queue
// bounds MaxBytes by its own limit.
func Admit(spec wire.JobSpec, opts ...AdmitOption) (Spec, error) {
	var a admission
	for _, o := range opts {
		o(&a)
	}
	if a.monitor && spec.IgnoreRobots {
		// Before Validate, which would word it for checks.
		return Spec{}, &FieldError{Field: "ignoreRobots", Msg: "monitors always obey robots.txt"}
	}
	if err := Validate(spec); err != nil {
		return Spec{}, err
	}
	spec = normalize(spec)
	spec.CacheSig, spec.CacheHolder = "", ""
	s := Spec{monitor: a.monitor, checked: true}
	if a.monitor && spec.Kind == wire.JobRender {
		spec.NoCache = true
	}
	if a.key != nil && spec.Kind == wire.JobRender {
		sig, canon, err := a.key(spec)
		if err != nil {
			// The key's errors start with the field's name
			// (rendercache.ErrBadURL), which FieldError adds again.
			msg, _ := strings.CutPrefix(err.Error(), "url: ")
			return Spec{}, &FieldError{Field: "url", Msg: msg, Err: err}
		}
		s.sig, s.canon = sig, canon
	}
	s.spec = spec
	return s, nil
}

// AdmitBatch admits the specs of one batch; a bad field of a batch of
// several is named "jobs[i].field".
func AdmitBatch(specs []wire.JobSpec) ([]Spec, error) {
	if len(specs) == 0 {
		return nil, errEmptyBatch()
	}
	out := make([]Spec, len(specs))
	for i, raw := range specs {
		s, err := Admit(raw)
		if err != nil {
			var fe *FieldError
			if len(specs) > 1 && errors.As(err, &fe) {
				return nil, &FieldError{Field: fmt.Sprintf("jobs[%d].%s", i, fe.Field), Msg: fe.Msg, Err: fe.Err}
			}
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}

func errEmptyBatch() error { return &FieldError{Field: "jobs", Msg: "empty batch"} }

// bounded is a job's spec with the queue's result bound: a spec's MaxBytes
// may only lower it. Not part of Admit, which does not know the queue.
func (c *Config) bounded(s Spec) wire.JobSpec {
	spec := s.spec
	if spec.MaxBytes <= 0 || spec.MaxBytes > c.MaxResultBytes {
		spec.MaxBytes = c.MaxResultBytes
	}
	return spec
}
