package jobs

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// FieldError is bad input in one field of a job or monitor (a 400 naming
// the field).
type FieldError struct {
	Field string
	Msg   string
	Err   error // the cause, if any (Msg already says it)
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

func (e *FieldError) Unwrap() error { return e.Err }

// Bounds of the options.
const (
	MinViewport     = 100
	MaxViewport     = 4096
	MaxWaitDelayMs  = 60_000
	MaxTimeoutMs    = 120_000
	DefaultTimeout  = 30_000
	MinMonitorEvery = 10 * time.Second
	MaxMonitorEvery = 30 * 24 * time.Hour
	maxSelectorLen  = 1024
	maxURLLen       = 8192
)

// Validate checks a job's fields. The URL must be an absolute URL with a
// host; a scheme other than http(s) is not an input error but a DISALLOWED
// job (the url-checker document discards such URLs), so Submit records it.
func Validate(spec wire.JobSpec) error {
	bad := func(field, f string, a ...any) error { return &FieldError{Field: field, Msg: fmt.Sprintf(f, a...)} }
	switch spec.Kind {
	case wire.JobRender, wire.JobCheck:
	case "":
		return bad("kind", "missing: want %q or %q", wire.JobRender, wire.JobCheck)
	default:
		return bad("kind", "%q is not a job kind: want %q or %q", spec.Kind, wire.JobRender, wire.JobCheck)
	}
	if spec.URL == "" {
		return bad("url", "missing")
	}
	if len(spec.URL) > maxURLLen {
		return bad("url", "longer than %d bytes", maxURLLen)
	}
	u, err := url.Parse(spec.URL)
	if err != nil {
		return bad("url", "not a URL: %v", err)
	}
	if !u.IsAbs() || u.Opaque != "" {
		return bad("url", "%q is not an absolute URL (want http://host/... or https://host/...)", spec.URL)
	}
	if s := strings.ToLower(u.Scheme); (s == "http" || s == "https") && u.Hostname() == "" {
		return bad("url", "%q has no host", spec.URL)
	}
	if spec.Kind == wire.JobRender {
		switch spec.Format {
		case "", wire.FormatPNG, wire.FormatJPEG, wire.FormatPDF, wire.FormatHTML, wire.FormatText:
		default:
			return bad("format", "%q is not a format: want png, jpeg, pdf, html or text", spec.Format)
		}
	} else if spec.Format != "" {
		return bad("format", "only render jobs have a format")
	}
	for _, d := range []struct {
		field string
		v     int
	}{{"width", spec.Width}, {"height", spec.Height}} {
		if d.v != 0 && (d.v < MinViewport || d.v > MaxViewport) {
			return bad(d.field, "%d is out of range: want 0 (default) or %d..%d", d.v, MinViewport, MaxViewport)
		}
	}
	if spec.Quality < 0 || spec.Quality > 100 {
		return bad("quality", "%d is out of range: want 0..100", spec.Quality)
	}
	if spec.Quality != 0 && spec.Format != wire.FormatJPEG {
		return bad("quality", "applies to format jpeg only")
	}
	if len(spec.WaitSelector) > maxSelectorLen {
		return bad("waitSelector", "longer than %d bytes", maxSelectorLen)
	}
	if spec.WaitDelayMs < 0 || spec.WaitDelayMs > MaxWaitDelayMs {
		return bad("waitDelayMs", "%d is out of range: want 0..%d", spec.WaitDelayMs, MaxWaitDelayMs)
	}
	if spec.TimeoutMs < 0 || spec.TimeoutMs > MaxTimeoutMs {
		return bad("timeoutMs", "%d is out of range: want 0 (default %d) ..%d", spec.TimeoutMs, DefaultTimeout, MaxTimeoutMs)
	}
	if spec.MaxAgeMs < 0 {
		return bad("maxAgeMs", "must not be negative")
	}
	if spec.IgnoreRobots && spec.Kind != wire.JobRender {
		return bad("ignoreRobots", "only an explicitly requested render may ignore robots.txt")
	}
	if spec.Subresources && spec.Kind != wire.JobCheck {
		return bad("subresources", "only for checks: a render always loads the page's subresources")
	}
	return nil
}

// ValidateMonitor checks a monitor's job and interval (as Admit with
// AsMonitor and then Monitors.Add do).
func ValidateMonitor(spec wire.JobSpec, every time.Duration) error {
	if _, err := Admit(spec, AsMonitor()); err != nil {
		return err
	}
	return checkInterval(every)
}

func checkInterval(every time.Duration) error {
	if every < MinMonitorEvery || every > MaxMonitorEvery {
		return &FieldError{Field: "interval", Msg: fmt.Sprintf("%v is out of range: want %v..%v", every, MinMonitorEvery, MaxMonitorEvery)}
	}
	return nil
}

// normalize fills defaults into a valid spec (Admit only).
func normalize(spec wire.JobSpec) wire.JobSpec {
	if spec.Kind == wire.JobRender && spec.Format == "" {
		spec.Format = wire.FormatPNG
	}
	if spec.TimeoutMs == 0 {
		spec.TimeoutMs = DefaultTimeout
	}
	return spec
}
