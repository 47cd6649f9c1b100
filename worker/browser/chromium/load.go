package chromium

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium/pagescript"
)

// Polling periods of Load's waits: the selector is asked for in the page,
// network idleness is read from the events loadWatch records.
const (
	selectorPoll = 100 * time.Millisecond
	idlePoll     = 50 * time.Millisecond
)

// egressHeader marks the egress guard's own answers (internal/egress
// refuse): 403 = refused, 502 = could not connect.
const egressHeader = "x-cloudbrowser-egress"

// navFailed is a navigation Chromium answered with a network error.
type navFailed struct{ url, text string }

func (e *navFailed) Error() string { return e.url + ": " + e.text }

// loadWatch records, for one Load, the main document's responses, its
// commit and load event, and the requests in flight. Its fields are
// guarded by cbrowser.mu and written by onEvent.
type loadWatch struct {
	loader    cdp.LoaderID // of the last committed top document
	committed bool
	loaded    chan struct{}
	closed    bool
	responses map[cdp.LoaderID]docResponse
	last      *docResponse // the last main-frame document response, any loader
	inflight  map[network.RequestID]struct{}
	activity  time.Time // last request start or end
	// onSent is told once when the main document's first request leaves.
	onSent func(time.Time)
}

type docResponse struct {
	status     int
	url        string
	retryAfter string // its Retry-After header (the master's back-off)
	refused    bool   // answered by the egress guard
}

// see records ev; b.mu held (onEvent).
func (w *loadWatch) see(ev any, mainFrame cdp.FrameID) {
	switch ev := ev.(type) {
	case *page.EventFrameNavigated:
		if ev.Frame.ParentID == "" {
			w.loader, w.committed = ev.Frame.LoaderID, true
		}
	case *page.EventLoadEventFired:
		if w.committed && !w.closed {
			w.closed = true
			close(w.loaded)
		}
	case *network.EventRequestWillBeSent:
		w.inflight[ev.RequestID] = struct{}{}
		w.activity = time.Now()
		if w.onSent != nil && ev.Type == network.ResourceTypeDocument && ev.FrameID == mainFrame {
			at := w.activity
			if wt := ev.WallTime.Float64(); wt > 0 {
				at = time.Unix(0, int64(wt*1e9))
			}
			go w.onSent(at) // see runs under the browser's lock
			w.onSent = nil
		}
	case *network.EventLoadingFinished:
		delete(w.inflight, ev.RequestID)
		w.activity = time.Now()
	case *network.EventLoadingFailed:
		delete(w.inflight, ev.RequestID)
		w.activity = time.Now()
	case *network.EventResponseReceived:
		if ev.Type != network.ResourceTypeDocument || ev.FrameID != mainFrame || ev.Response == nil {
			return
		}
		r := docResponse{status: int(ev.Response.Status), url: ev.Response.URL}
		for k, v := range ev.Response.Headers {
			if strings.EqualFold(k, egressHeader) && fmt.Sprint(v) == "refused" {
				r.refused = true
			}
			if strings.EqualFold(k, "Retry-After") {
				r.retryAfter = fmt.Sprint(v)
			}
		}
		w.responses[ev.LoaderID] = r
		w.last = &r
	}
}

// gateError is BeforeNavigate's error, passed through as it is.
type gateError struct{ err error }

func (e *gateError) Error() string { return e.err.Error() }
func (e *gateError) Unwrap() error { return e.err }

// Load implements browser.Browser.

func (b *cbrowser) Load(ctx context.Context, url string, opts browser.LoadOptions) (browser.LoadResult, error) {
	b.loadMu.Lock()
	defer b.loadMu.Unlock()
	cctx, cancel, err := b.call(ctx)
	if err != nil {
		return browser.LoadResult{}, err
	}
	defer cancel()
	res, err := b.load(cctx, url, opts)
	if err != nil {
		var ue *browser.UnreachableError
		if errors.As(err, &ue) || errors.Is(err, browser.ErrBlocked) || errors.Is(err, browser.ErrInvalidSelector) {
			return res, err
		}
		var ge *gateError
		if errors.As(err, &ge) {
			return res, ge.err
		}
		return res, b.fail("load", err)
	}
	return res, nil
}

func (b *cbrowser) load(ctx context.Context, url string, opts browser.LoadOptions) (browser.LoadResult, error) {
	var res browser.LoadResult
	w := &loadWatch{
		loaded:    make(chan struct{}),
		responses: map[cdp.LoaderID]docResponse{},
		inflight:  map[network.RequestID]struct{}{},
		onSent:    opts.OnRequestSent,
	}
	// Network events only while loading: they stream every request of
	// the page, which an interactive browser does not need.
	if _, err := pageCall(ctx, b, network.Enable, network.EnableParams{}); err != nil {
		return res, fmt.Errorf("network events: %w", err)
	}
	b.mu.Lock()
	b.lw = w
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.lw = nil
		b.mu.Unlock()
		if !b.isDone() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_, _ = pageCall(dctx, b, network.Disable, cdp.Empty{})
			cancel()
		}
	}()
	if opts.BeforeNavigate != nil {
		if err := opts.BeforeNavigate(ctx); err != nil {
			return res, &gateError{err}
		}
	}
	t0 := time.Now()
	if err := b.navigate(ctx, url); err != nil {
		var nf *navFailed
		if errors.As(err, &nf) {
			return res, &browser.UnreachableError{URL: url, Reason: browser.NetErrorReason(nf.text)}
		}
		return res, err
	}
	b.mu.Lock()
	committed := w.committed
	b.mu.Unlock()
	if committed {
		select {
		case <-w.loaded:
		case <-b.done:
			return res, b.Err()
		case <-ctx.Done():
			return res, fmt.Errorf("%s: waiting for the load event: %w", url, ctx.Err())
		}
	}
	res.Navigate = time.Since(t0)
	b.mu.Lock()
	doc, ok := w.responses[w.loader]
	var last *docResponse
	if w.last != nil {
		l := *w.last
		last = &l
	}
	b.mu.Unlock()
	if !committed {
		// Nothing committed: a download or an empty answer (204), or a
		// move within the current document (no response at all).
		if last != nil {
			res.Status, res.FinalURL, res.RetryAfter = last.status, last.url, last.retryAfter
			return res, &browser.UnreachableError{URL: url, Reason: fmt.Sprintf("no document to show (HTTP %d: empty answer or download)", last.status)}
		}
	}
	if ok {
		res.Status, res.FinalURL, res.RetryAfter = doc.status, doc.url, doc.retryAfter
		if doc.refused {
			reason := "blocked by egress guard"
			if doc.status != 403 {
				reason = "could not connect (egress guard)"
			}
			return res, &browser.UnreachableError{URL: url, Reason: reason}
		}
	}

	t1 := time.Now()
	if err := b.waitSelector(ctx, opts.WaitSelector); err != nil {
		return res, err
	}
	if opts.WaitNetworkIdle {
		if err := b.waitIdle(ctx, w); err != nil {
			return res, err
		}
	}
	if opts.WaitDelay > 0 {
		t := time.NewTimer(opts.WaitDelay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return res, fmt.Errorf("fixed delay: %w", ctx.Err())
		}
	}
	var page struct {
		Title string `json:"title"`
		URL   string `json:"url"`
	}
	if err := b.Evaluate(ctx, `({title: document.title, url: location.href})`, &page); err != nil {
		return res, err
	}
	res.Title = page.Title
	if page.URL != "" {
		res.FinalURL = page.URL
	}
	res.Wait = time.Since(t1)
	return res, nil
}

// waitSelector polls until sel matches an element ("" = no wait).
func (b *cbrowser) waitSelector(ctx context.Context, sel string) error {
	if sel == "" {
		return nil
	}
	expr := pagescript.Selector(sel)
	for {
		var found any
		if err := b.Evaluate(ctx, expr, &found); err != nil {
			return err
		}
		switch v := found.(type) {
		case bool:
			if v {
				return nil
			}
		case string:
			return fmt.Errorf("%q: %s: %w", sel, v, browser.ErrInvalidSelector)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for selector %q: %w", sel, ctx.Err())
		case <-time.After(selectorPoll):
		}
	}
}

// waitIdle waits until no request of the page has been in flight for
// browser.NetworkIdleQuiet.
func (b *cbrowser) waitIdle(ctx context.Context, w *loadWatch) error {
	t := time.NewTicker(idlePoll)
	defer t.Stop()
	for {
		b.mu.Lock()
		idle := len(w.inflight) == 0 && time.Since(w.activity) >= browser.NetworkIdleQuiet
		b.mu.Unlock()
		if idle {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for network idle: %w", ctx.Err())
		case <-b.done:
			return b.Err()
		case <-t.C:
		}
	}
}

// Capture implements browser.Browser.
func (b *cbrowser) Capture(ctx context.Context, opts browser.CaptureOptions) ([]byte, error) {
	cctx, cancel, err := b.call(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	var data []byte
	switch opts.Format {
	case browser.CapturePDF:
		res, err := pageCall(cctx, b, page.PrintToPDF, page.PrintToPDFParams{PrintBackground: new(true)})
		if err != nil {
			return nil, b.fail("print to pdf", err)
		}
		data = res.Data
	case "", browser.CapturePNG, browser.CaptureJPEG:
		p := page.CaptureScreenshotParams{Format: page.CaptureScreenshotFormatPng}
		if opts.Format == browser.CaptureJPEG {
			q := int64(opts.Quality)
			if q <= 0 || q > 100 {
				q = 80
			}
			p.Format, p.Quality = page.CaptureScreenshotFormatJpeg, &q
		}
		if opts.FullPage {
			m, err := pageCall(cctx, b, page.GetLayoutMetrics, cdp.Empty{})
			if err != nil {
				return nil, b.fail("layout metrics", err)
			}
			b.mu.Lock()
			vw, vh := b.width, b.height
			b.mu.Unlock()
			if vw <= 0 || vh <= 0 {
				vw, vh = browser.DefaultWidth, browser.DefaultHeight
			}
			wd, ht := float64(vw), float64(vh)
			if c := m.CSSContentSize; c != nil {
				wd, ht = math.Max(wd, math.Ceil(c.Width)), math.Max(ht, math.Ceil(c.Height))
			}
			wd, ht = math.Min(wd, browser.MaxCaptureHeight), math.Min(ht, browser.MaxCaptureHeight)
			p.Clip = &page.Viewport{Width: wd, Height: ht, Scale: 1}
			p.CaptureBeyondViewport = new(true)
		}
		res, err := pageCall(cctx, b, page.CaptureScreenshot, p)
		if err != nil {
			return nil, b.fail("screenshot", err)
		}
		data = res.Data
	default:
		return nil, fmt.Errorf("chromium: capture: unknown format %q", opts.Format)
	}
	return data, nil
}
