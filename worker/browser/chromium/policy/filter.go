package policy

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/target"
	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// maxLoggedURL is how much of a URL goes into a log line or an error.
const maxLoggedURL = 200

// blockedErrorText is what Page.navigate reports for a document request that
// the policy failed.
const blockedErrorText = "net::ERR_BLOCKED_BY_CLIENT"

// ShortURL truncates u to maxLoggedURL bytes on a rune boundary, for log
// lines and errors.
func ShortURL(u string) string {
	if len(u) <= maxLoggedURL {
		return u
	}
	i := maxLoggedURL
	for i > 0 && !utf8.RuneStart(u[i]) {
		i--
	}
	return u[:i] + "…"
}

// IsBlockedError reports whether a Page.navigate error text is a filter's:
// the document or a redirect of it was denied.
func IsBlockedError(text string) bool { return strings.Contains(text, blockedErrorText) }

// Browser is what a Filter knows of the browser it filters.
type Browser struct {
	Target  target.ID            // its page, which must not have loaded anything yet
	Context cdp.BrowserContextID // its browser context
	Allow   func(url string) bool
	Log     zerolog.Logger
	// OnBlock is called for each request the filter denies, besides its
	// own count (Filter.Blocked).
	OnBlock func()
	// Go runs the filter's loop on a goroutine of the runtime's; it is
	// called once, by NewFilter.
	Go func(loop func())
}

// Filter applies one browser's policy to every request of its browser
// context.
type Filter struct {
	b   Browser
	hub *Hub
	c   *conn

	blocked atomic.Uint64
	ready   chan error // the main page's session is set up (cap 1)

	// guarded by conn.mu
	mainSession  target.SessionID
	unregistered bool

	mu      sync.Mutex
	queue   []pausedRequest
	stopped bool          // the loop ended; enqueue refuses
	wake    chan struct{} // cap 1
	quit    chan struct{}
	once    sync.Once
}

type pausedRequest struct {
	session target.SessionID
	ev      pausedEvent
}

// NewFilter registers b's policy with the hub, starting it if needed, and
// waits until the page's requests are intercepted.
func (h *Hub) NewFilter(ctx context.Context, b Browser) (*Filter, error) {
	f := &Filter{
		b:     b,
		hub:   h,
		ready: make(chan error, 1),
		wake:  make(chan struct{}, 1),
		quit:  make(chan struct{}),
	}
	b.Go(f.loop)
	c, err := h.acquire(ctx)
	if err != nil {
		f.stopLoop()
		return nil, err
	}
	f.c = c
	c.mu.Lock()
	c.byContext[b.Context] = f
	c.mu.Unlock()
	// The page may already be attached (paused) to the hub if the hub ran
	// when chromedp created it; asking again is harmless, the first session
	// wins.
	if _, err = c.call(ctx, "", target.CommandAttachToTarget, map[string]any{"targetId": b.Target, "flatten": true}); err == nil {
		select {
		case err = <-f.ready:
		case <-ctx.Done():
			err = ctx.Err()
		case <-c.ctx.Done():
			err = errHubStopped
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("chromium: request filter: %w", err)
	}
	return f, nil
}

// Close unregisters the filter (after the browser's targets are gone) and
// stops its loop; the hub stops with its last filter.
func (f *Filter) Close() {
	f.stopLoop()
	c := f.c
	if c == nil {
		return
	}
	c.mu.Lock()
	if f.unregistered {
		c.mu.Unlock()
		return
	}
	f.unregistered = true
	if c.byContext[f.b.Context] == f {
		delete(c.byContext, f.b.Context)
	}
	for sid, g := range c.sessions {
		if g == f {
			delete(c.sessions, sid)
		}
	}
	c.mu.Unlock()
	f.hub.release(c)
}

// Blocked is how many requests the filter denied.
func (f *Filter) Blocked() uint64 { return f.blocked.Load() }

func (f *Filter) stopLoop() { f.once.Do(func() { close(f.quit) }) }

// enqueue hands a paused request to the filter's loop; false if the loop
// has ended.
func (f *Filter) enqueue(req pausedRequest) bool {
	f.mu.Lock()
	if f.stopped {
		f.mu.Unlock()
		return false
	}
	f.queue = append(f.queue, req)
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
	return true
}

// loop decides and answers the paused requests in arrival order, so a
// slow policy func delays only its own browser. When it ends it answers
// what is left, and enqueue refuses from then on.
func (f *Filter) loop() {
	for {
		select {
		case <-f.wake:
			f.decide(f.take(false))
		case <-f.quit:
			f.decide(f.take(true))
			return
		}
	}
}

func (f *Filter) take(stop bool) []pausedRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.queue
	f.queue = nil
	f.stopped = f.stopped || stop
	return q
}

func (f *Filter) decide(q []pausedRequest) {
	for _, req := range q {
		url := req.ev.Request.URL + req.ev.Request.URLFragment
		ok := f.Check(url)
		if !ok {
			f.blocked.Add(1)
			f.b.OnBlock()
			f.b.Log.Debug().Str("url", ShortURL(url)).Str("type", req.ev.ResourceType).Msg("request blocked")
		}
		f.c.answer(req.session, req.ev.RequestID, ok)
	}
}

// Check applies the policy to url; a panicking policy denies.
func (f *Filter) Check(url string) bool {
	ok, p := browser.CheckURL(f.b.Allow, url)
	if p != nil {
		f.b.Log.Error().Str("url", ShortURL(url)).Str("panic", fmt.Sprint(p)).Msg("navigation policy panicked; denied")
	}
	return ok
}
