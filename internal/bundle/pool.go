package bundle

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/sequence"
)

// BrowserChromium is the browser type of the Chromium runtime.
const BrowserChromium = "chromium"

// BrowserTypes are the types a PoolConfig may name. The limit is kept per
// type (as the document does for MSIE and Denodo Browser) though there is
// one.
var BrowserTypes = []string{BrowserChromium}

// Limits of a PoolConfig.
const (
	MaxPoolSize = 1000
	// MinInterval bounds the validation intervals from below: a check
	// loop that runs more often only burns CPU.
	MinInterval = 100 * time.Millisecond
)

// PoolConfig is the "pool" object of an app manifest: the app's specific
// browser pool, run by worker/pool. It is here, with the manifest, so that
// the master validates it at deploy time. Durations are strings ("90s",
// "30m"); 0 (or leaving a field out) disables the feature, as the document
// says.
type PoolConfig struct {
	// Enabled turns the specific pool on; without it the app's browsers
	// come from the worker's general pool and the other fields are ignored.
	Enabled bool `json:"enabled"`
	// BrowserType of the pool's browsers ("" = "chromium").
	BrowserType string `json:"browserType,omitempty"`
	// MinSize browsers are started when the pool is created (on the first
	// use of the app on a worker), each running Init.
	MinSize int `json:"minSize"`
	// MaxSize is the most browsers the pool may hold (free and leased).
	MaxSize int `json:"maxSize"`
	// Init runs on each new browser of the pool (e.g. log in and open the
	// search page). It cannot contain variables, only ${secret:NAME}.
	Init sequence.Sequence `json:"init,omitempty"`
	// Back runs when a browser is returned, to put it back where Init left
	// it. Without Back a returned browser is destroyed (never reused by
	// another user) and the pool refills to MinSize in the background.
	Back sequence.Sequence `json:"back,omitempty"`
	// TTL: a returned browser running for longer is replaced by a new one
	// showing the same page with the old one's cookies.
	TTL sequence.Duration `json:"ttl,omitempty"`
	// MaxIdleToRefresh: a free browser idle this long runs TouchSession;
	// checked every RefreshValidationInterval.
	MaxIdleToRefresh          sequence.Duration `json:"maxIdleToRefresh,omitempty"`
	RefreshValidationInterval sequence.Duration `json:"refreshValidationInterval,omitempty"`
	TouchSession              sequence.Sequence `json:"touchSession,omitempty"`
	// MaxIdleToDestroy: a free browser unused this long is destroyed
	// without replacement; checked every DestroyValidationInterval.
	MaxIdleToDestroy          sequence.Duration `json:"maxIdleToDestroy,omitempty"`
	DestroyValidationInterval sequence.Duration `json:"destroyValidationInterval,omitempty"`
}

// Refreshes reports whether idle refresh is on (both values non-zero).
func (c *PoolConfig) Refreshes() bool {
	return c.MaxIdleToRefresh > 0 && c.RefreshValidationInterval > 0
}

// DestroysIdle reports whether idle destroy is on (both values non-zero).
func (c *PoolConfig) DestroysIdle() bool {
	return c.MaxIdleToDestroy > 0 && c.DestroyValidationInterval > 0
}

// Clone copies the sequences so a caller's later edits cannot reach a
// running pool.
func (c PoolConfig) Clone() PoolConfig {
	c.Init = slices.Clone(c.Init)
	c.Back = slices.Clone(c.Back)
	c.TouchSession = slices.Clone(c.TouchSession)
	return c
}

// Validate checks c and returns sequence.Errors naming each wrong field
// under path (e.g. "pool.minSize", "pool.init[2].click"), or nil. The
// worker calls it when an app is deployed.
func (c *PoolConfig) Validate(path string) error {
	var es sequence.Errors
	at := func(f string) string {
		if path == "" {
			return f
		}
		return path + "." + f
	}
	add := func(field, format string, args ...any) {
		es = append(es, sequence.FieldError{Field: at(field), Msg: fmt.Sprintf(format, args...)})
	}
	if c.BrowserType != "" && !slices.Contains(BrowserTypes, c.BrowserType) {
		add("browserType", "%q is not one of %s", c.BrowserType, strings.Join(BrowserTypes, ", "))
	}
	switch {
	case c.MinSize < 0:
		add("minSize", "must not be negative")
	case c.MinSize > MaxPoolSize:
		add("minSize", "must be at most %d", MaxPoolSize)
	}
	switch {
	case c.MaxSize < 0:
		add("maxSize", "must not be negative")
	case c.MaxSize > MaxPoolSize:
		add("maxSize", "must be at most %d", MaxPoolSize)
	case c.Enabled && c.MaxSize == 0:
		add("maxSize", "required: at least 1 when the pool is enabled")
	case c.MinSize > c.MaxSize && c.MaxSize > 0:
		add("minSize", "%d is greater than maxSize %d", c.MinSize, c.MaxSize)
	}
	for _, d := range []struct {
		field    string
		v        sequence.Duration
		interval bool
	}{
		{"ttl", c.TTL, false},
		{"maxIdleToRefresh", c.MaxIdleToRefresh, false},
		{"refreshValidationInterval", c.RefreshValidationInterval, true},
		{"maxIdleToDestroy", c.MaxIdleToDestroy, false},
		{"destroyValidationInterval", c.DestroyValidationInterval, true},
	} {
		switch {
		case d.v < 0:
			add(d.field, "must not be negative (0 disables)")
		case d.interval && d.v > 0 && d.v.D() < MinInterval:
			add(d.field, "must be at least %s (0 disables)", MinInterval)
		}
	}
	if c.Refreshes() && len(c.TouchSession) == 0 {
		add("touchSession", "required when maxIdleToRefresh and refreshValidationInterval are set")
	}
	// The pool has no values for variables in any of its sequences; for
	// the initialization sequence the document forbids them outright.
	for _, s := range []struct {
		field string
		q     sequence.Sequence
		what  string
	}{
		{"init", c.Init, "the initialization sequence"},
		{"back", c.Back, "a pool's back sequence (the pool has no variables to give)"},
		{"touchSession", c.TouchSession, "a pool's touch session sequence (the pool has no variables to give)"},
	} {
		if err := s.q.Validate(at(s.field), sequence.Rules{NoVars: true, What: s.what}); err != nil {
			es = append(es, err.(sequence.Errors)...)
		}
	}
	if len(es) > 0 {
		return es
	}
	return nil
}
