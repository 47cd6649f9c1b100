package jobs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// Page expressions of the html and text formats and of a check's hash.
const (
	htmlExpr = `(() => { const d = document.doctype ? new XMLSerializer().serializeToString(document.doctype) + "\n" : ""; return d + document.documentElement.outerHTML; })()`
	textExpr = `document.body ? document.body.innerText : ""`
)

// contentTypes of the render formats.
var contentTypes = map[string]string{
	wire.FormatPNG:  "image/png",
	wire.FormatJPEG: "image/jpeg",
	wire.FormatPDF:  "application/pdf",
	wire.FormatHTML: "text/html; charset=utf-8",
	wire.FormatText: "text/plain; charset=utf-8",
}

// execute runs one attempt and says how it went; it never panics on a bad
// spec (the master validated it, but a worker must not trust that).
func (e *Executor) execute(ctx context.Context, run wire.JobRun) (out wire.JobOutcome) {
	spec := run.Spec
	out = wire.JobOutcome{ID: run.ID, Attempt: run.Attempt}
	start := e.cfg.Clock.Now()
	defer func() { out.Timings.TotalMs = ms(e.cfg.Clock.Now().Sub(start)) }()
	fail := func(permanent bool, format string, args ...any) wire.JobOutcome {
		return failed(&out, permanent, format, args...)
	}
	switch spec.Kind {
	case wire.JobCheck:
	case wire.JobRender:
		if _, ok := contentTypes[formatOf(spec)]; !ok {
			return fail(true, "unknown render format %q", spec.Format)
		}
	default:
		return fail(true, "unknown job kind %q", spec.Kind)
	}
	if spec.URL == "" {
		return fail(true, "no URL")
	}
	timeout := e.cfg.Timeout
	if spec.TimeoutMs > 0 {
		timeout = time.Duration(spec.TimeoutMs) * time.Millisecond
	}
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("timed out after %s", timeout))
	defer cancel()
	// stopped says why ctx ended ("" = it did not): a worker-side end
	// (cancel, shutdown) fails the attempt, a timeout is the site's doing.
	stopped := func() (reason string, timedOut bool) {
		if ctx.Err() == nil {
			return "", false
		}
		cause := context.Cause(ctx)
		return cause.Error(), !errors.Is(cause, errCancelled) && !errors.Is(cause, errClosing)
	}

	t := e.cfg.Clock.Now()
	lease, err := e.leaser.Lease(withRun(ctx, run), spec.App, run.Allow)
	out.Timings.LeaseMs = ms(e.cfg.Clock.Now().Sub(t))
	if err != nil {
		if why, _ := stopped(); why != "" {
			return fail(false, "lease a browser: %s", why)
		}
		return fail(errors.Is(err, ErrPermanent), "lease a browser: %v", err)
	}
	defer lease.Return()
	b := lease.Browser()

	if spec.Width > 0 && spec.Height > 0 {
		if err := b.Input(ctx, browser.InputEvent{Type: browser.InputResize, Width: spec.Width, Height: spec.Height}); err != nil {
			if errors.Is(err, browser.ErrInvalidInput) {
				return fail(true, "viewport %dx%d: %v", spec.Width, spec.Height, err)
			}
			return fail(false, "viewport: %v", err)
		}
	}

	// The master paces page loads per host (its start gate): the browser
	// asks right before it sends the navigation.
	var gateErr error
	var goAt atomic.Int64 // unix ns; read on the browser's event goroutine
	var sent sync.Once
	started := func(s wire.JobStarted) {
		sent.Do(func() {
			s.ID, s.Attempt = run.ID, run.Attempt
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := e.rep.Started(rctx, s); err != nil {
				e.log.Debug().Err(err).Str("job", run.ID).Msg("start time not reported")
			}
		})
	}
	// When the request left: best from the browser's egress endpoint,
	// which sees it right before it contacts the site; the browser's own
	// "request sent" comes earlier, before its proxy, by as much as a
	// loaded machine delays it. That one is the fallback, for an https
	// request through a tunnel opened before (the endpoint does not see
	// it) and browsers without an endpoint.
	watcher, watched := b.Egress().(requestWatcher)
	hostport, secure := hostPort(spec.URL)
	watched = watched && hostport != ""
	sentAt := func(at time.Time) { started(wire.JobStarted{DelayNs: at.UnixNano() - goAt.Load()}) }
	var browserSent atomic.Int64 // unix ns of the browser's own report
	var unwatch atomic.Pointer[func()]
	res, err := b.Load(ctx, spec.URL, browser.LoadOptions{
		BeforeNavigate: func(ctx context.Context) error {
			t := e.cfg.Clock.Now()
			gateErr = e.awaitGo(ctx, run)
			goAt.Store(time.Now().UnixNano()) // wall clock, as the browser's request time
			out.Timings.GateMs = ms(e.cfg.Clock.Now().Sub(t))
			if gateErr == nil && watched {
				stop := watcher.OnNextRequest(hostport, sentAt)
				unwatch.Store(&stop)
			}
			return gateErr
		},
		OnRequestSent: func(at time.Time) {
			browserSent.Store(at.UnixNano())
			switch {
			case !watched:
				sentAt(at)
			case secure: // the endpoint sees only a new tunnel: wait a little for it
				time.AfterFunc(tunnelGrace, func() { sentAt(at) })
			}
		},
		WaitSelector:    spec.WaitSelector,
		WaitNetworkIdle: spec.WaitNetworkIdle,
		WaitDelay:       time.Duration(spec.WaitDelayMs) * time.Millisecond,
	})
	out.Status, out.FinalURL, out.Title, out.RetryAfter = res.Status, res.FinalURL, res.Title, res.RetryAfter
	out.Timings.NavigateMs, out.Timings.WaitMs = ms(res.Navigate), ms(res.Wait)
	if stop := unwatch.Load(); stop != nil {
		(*stop)()
	}
	if at := browserSent.Load(); at != 0 {
		sentAt(time.Unix(0, at)) // nothing if the endpoint reported it
	}
	if gateErr == nil && goAt.Load() != 0 {
		started(wire.JobStarted{NotSent: true}) // nothing if the request was reported
	}
	if gateErr != nil {
		if why, _ := stopped(); why != "" {
			return fail(false, "waiting for the start gate: %s", why)
		}
		return fail(false, "start gate: %v", gateErr)
	}
	if err != nil {
		return e.loadFailed(spec, out, err, stopped)
	}
	if spec.Kind == wire.JobCheck {
		return e.check(ctx, b, spec, out, stopped)
	}
	return e.render(ctx, b, spec, out, stopped)
}

type stoppedFn = func() (reason string, timedOut bool)

// failed makes out a failed attempt.
func failed(out *wire.JobOutcome, permanent bool, format string, args ...any) wire.JobOutcome {
	out.Err, out.Permanent = fmt.Sprintf(format, args...), permanent
	out.Body, out.ContentType, out.Hash = nil, "", ""
	return *out
}

// loadFailed sorts a Load error: the site's fault is a check's
// "unavailable" (a result) and a render's failure; the policy's refusal is
// permanent; the worker's fault (crash, cancel) is retried.
func (e *Executor) loadFailed(spec wire.JobSpec, out wire.JobOutcome, err error, stopped stoppedFn) wire.JobOutcome {
	fail := func(permanent bool, format string, args ...any) wire.JobOutcome {
		return failed(&out, permanent, format, args...)
	}
	var ue *browser.UnreachableError
	why, timedOut := stopped()
	switch {
	case why != "" && !timedOut:
		return fail(false, "load %s: %s", spec.URL, why)
	case errors.Is(err, browser.ErrBlocked):
		return fail(true, "refused by the navigation policy: %s", spec.URL)
	case errors.Is(err, browser.ErrInvalidSelector):
		return fail(true, "waitSelector: %v", err)
	case errors.Is(err, browser.ErrCrashed), errors.Is(err, browser.ErrClosed):
		return fail(false, "browser failed: %v", err)
	case errors.As(err, &ue), timedOut:
		reason := why
		if ue != nil {
			reason = ue.Reason
		}
		if ue != nil && ue.Reason == "blocked by egress guard" {
			// The guard applies the master's own rules (run.Allow): the
			// page led where jobs may not go. Not retried.
			out.Disallowed, out.Reason = true, spec.URL+": blocked by the worker's egress guard (a redirect or a name leading where jobs may not go)"
			return out
		}
		if spec.Kind == wire.JobCheck {
			out.Check, out.Reason = wire.CheckUnavailable, reason
			return out
		}
		return fail(false, "%s unavailable: %s", spec.URL, reason)
	}
	if spec.Kind == wire.JobCheck {
		out.Check, out.Reason = wire.CheckError, err.Error()
		return out
	}
	return fail(false, "load %s: %v", spec.URL, err)
}

// check sets a check's state from the status and the page text's hash.
func (e *Executor) check(ctx context.Context, b browser.Browser, spec wire.JobSpec, out wire.JobOutcome, stopped stoppedFn) wire.JobOutcome {
	fail := func(permanent bool, format string, args ...any) wire.JobOutcome {
		return failed(&out, permanent, format, args...)
	}
	switch {
	case out.Status >= 400:
		out.Check, out.Reason = wire.CheckUnavailable, fmt.Sprintf("HTTP %d", out.Status)
		return out
	case out.Status < 200:
		out.Check, out.Reason = wire.CheckError, fmt.Sprintf("no HTTP status for the page (%d)", out.Status)
		return out
	}
	t := e.cfg.Clock.Now()
	var text string
	err := b.Evaluate(ctx, textExpr, &text)
	out.Timings.CaptureMs = ms(e.cfg.Clock.Now().Sub(t))
	if err != nil {
		if why, timedOut := stopped(); why != "" {
			if timedOut {
				out.Check, out.Reason = wire.CheckUnavailable, why
				return out
			}
			return fail(false, "read the page text: %s", why)
		}
		if errors.Is(err, browser.ErrCrashed) || errors.Is(err, browser.ErrClosed) {
			return fail(false, "browser failed: %v", err)
		}
		out.Check, out.Reason = wire.CheckError, "read the page text: "+err.Error()
		return out
	}
	out.Hash = hash([]byte(text))
	out.Check = wire.CheckOK
	if spec.PrevHash != "" && spec.PrevHash != out.Hash {
		out.Check, out.Reason = wire.CheckChanged, "content changed"
	}
	return out
}

// render captures the page in the spec's format.
func (e *Executor) render(ctx context.Context, b browser.Browser, spec wire.JobSpec, out wire.JobOutcome, stopped stoppedFn) wire.JobOutcome {
	fail := func(permanent bool, format string, args ...any) wire.JobOutcome {
		return failed(&out, permanent, format, args...)
	}
	format := formatOf(spec)
	t := e.cfg.Clock.Now()
	var body []byte
	var err error
	switch format {
	case wire.FormatHTML, wire.FormatText:
		expr := htmlExpr
		if format == wire.FormatText {
			expr = textExpr
		}
		var s string
		err = b.Evaluate(ctx, expr, &s)
		body = []byte(s)
	default:
		body, err = b.Capture(ctx, browser.CaptureOptions{Format: format, Quality: spec.Quality, FullPage: spec.FullPage})
	}
	out.Timings.CaptureMs = ms(e.cfg.Clock.Now().Sub(t))
	if err != nil {
		if why, _ := stopped(); why != "" {
			return fail(false, "capture %s: %s", format, why)
		}
		return fail(errors.Is(err, errors.ErrUnsupported), "capture %s: %v", format, err)
	}
	limit := e.cfg.MaxResultBytes
	if spec.MaxBytes > 0 && spec.MaxBytes < limit {
		limit = spec.MaxBytes
	}
	if int64(len(body)) > limit {
		return fail(true, "result too large: %d bytes, the limit is %d bytes", len(body), limit)
	}
	out.Body, out.ContentType, out.Hash = body, contentTypes[format], hash(body)
	return out
}

// formatOf is the spec's render format (png by default).
func formatOf(spec wire.JobSpec) string {
	if spec.Format == "" {
		return wire.FormatPNG
	}
	return spec.Format
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

// awaitGo asks the master's start gate until it says go (AwaitGo).
func (e *Executor) awaitGo(ctx context.Context, run wire.JobRun) error {
	p := wire.JobProgress{ID: run.ID, Attempt: run.Attempt}
	return AwaitGo(ctx, func(ctx context.Context) (time.Duration, error) { return e.rep.Ready(ctx, p) })
}

// AwaitGo calls ask until it answers no wait: the master's start gate or
// request budget. A transient error (the master restarting) is retried
// with a back-off; a refusal (the attempt is no longer current) is
// returned; a master without the call lets it go.
func AwaitGo(ctx context.Context, ask func(context.Context) (time.Duration, error)) error {
	backoff := 100 * time.Millisecond
	for {
		wait, err := ask(ctx)
		if err == nil && wait <= 0 {
			return nil
		}
		if err != nil {
			var coded interface{ RMICode() string }
			if errors.As(err, &coded) {
				switch coded.RMICode() {
				case wire.CodeInvalid:
					return err
				case "rmi.no_method", "rmi.no_object":
					return nil // an older master: go
				}
			}
			wait, backoff = backoff, min(2*backoff, 2*time.Second)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-t.C:
		}
	}
}

// requestWatcher is the part of a browser's egress endpoint
// (internal/egress.Endpoint) that tells when it contacts a host.
type requestWatcher interface {
	OnNextRequest(hostport string, fn func(at time.Time)) (cancel func())
}

// tunnelGrace is how long a job's https request may take from the
// browser's "sent" to its endpoint opening a tunnel; past it the browser's
// time is taken (the request went through an open tunnel).
const tunnelGrace = 250 * time.Millisecond

// hostPort is the host:port a job URL's document request goes to, and
// whether it is https ("" if the URL is not http(s)).
func hostPort(raw string) (hostport string, secure bool) {
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		return "", false
	}
	port := u.Port()
	switch u.Scheme {
	case "http":
		if port == "" {
			port = "80"
		}
	case "https":
		secure = true
		if port == "" {
			port = "443"
		}
	default:
		return "", false
	}
	return net.JoinHostPort(u.Hostname(), port), secure
}
