// Package browser is the worker's virtual-browser layer: the interface the
// rest of the worker uses, independent of how pages are rendered. The
// Chromium implementation lives in the chromium subpackage; Null is an
// honest placeholder that keeps page state but renders nothing, for tests of
// the cluster backbone and for workers started with --runtime none.
package browser

import (
	"context"
	"errors"
	"strings"
	"time"
)

// Options describe a new virtual browser.
type Options struct {
	// URL is loaded first ("" = about:blank).
	URL string
	// Width and Height of the viewport in CSS pixels (0 = 1280x800).
	Width, Height int
	// Script is JavaScript run in every new document of the page (its
	// same-process frames included) before the page's own scripts, from
	// the first document on.
	Script string
	// Bindings are functions the page can call as window.<name>(string),
	// also before its own scripts run (Script may hide them). Each call
	// reaches its fn with the argument, in call order, on one goroutine the
	// browser owns for all its bindings; fn must not block for long. Names
	// must be JavaScript identifiers. A page that floods a binding loses
	// calls beyond a few thousand queued ones.
	Bindings map[string]func(payload string)
	// Allow is the browser's navigation policy (nil = allow everything,
	// at no cost). When set, every network request of the browser is
	// checked before it is sent: documents, redirects (each hop),
	// subresources, XHR/fetch, and those of popups, iframes and workers
	// (dedicated, shared, service) its pages open. A denied request fails
	// as blocked by the client, so the page sees a network error. data:,
	// blob: and about: URLs are never checked. Navigate, Input of type
	// navigate and the initial URL are checked before anything is loaded
	// and fail with an error wrapping ErrBlocked. Not covered with
	// Chromium: WebSocket handshakes and speculation-rules prefetches.
	//
	// Allow gets the full URL (with fragment, if any), may be called
	// concurrently, must be fast and must not call into the browser. A
	// panicking Allow denies the request.
	Allow func(url string) bool
	// Egress, when set, is the browser's network exit: every request of
	// the browser (loopback destinations included) goes through the
	// forward proxy at Egress.ProxyURL(). The browser owns it from then
	// on and closes it when the browser is gone, also if creation fails.
	Egress Egress
	// PromptTimeout is how long a page's dialog waits for an answer
	// before it is dismissed (0 = DefaultPromptTimeout).
	PromptTimeout time.Duration
}

// Egress is a browser's network exit (package internal/egress implements
// it).
type Egress interface {
	// ProxyURL is the proxy server, e.g. http://127.0.0.1:41234.
	ProxyURL() string
	Close() error
}

// DefaultWidth and DefaultHeight are the viewport size used when Options
// leave it at zero.
const (
	DefaultWidth  = 1280
	DefaultHeight = 800
)

// Page is what a virtual browser currently shows.
type Page struct {
	URL   string `json:"url"`
	Title string `json:"title"`
}

// Stats describe a runtime's resource use for load reports.
type Stats struct {
	Browsers  int
	Processes int    // OS processes (Chromium main + children)
	PSS       uint64 // bytes, proportional set size of all processes
	// Blocked counts the requests denied by browsers' Options.Allow since
	// the runtime started (closed browsers included).
	Blocked uint64
	// ResizeRestarts counts the screencast restarts made because a
	// resized page sent no frame of its new size in time (closed browsers
	// included): Chromium losing frames, which viewers would see as a
	// stale screen.
	ResizeRestarts uint64
}

// ErrClosed is returned by operations on a closed browser or runtime.
var ErrClosed = errors.New("browser: closed")

// ErrCrashed marks a browser whose renderer or Chromium process died.
var ErrCrashed = errors.New("browser: crashed")

// ErrBlocked is wrapped by the errors of navigations that the browser's
// navigation policy (Options.Allow) denied.
var ErrBlocked = errors.New("browser: blocked by the navigation policy")

// ErrBusy is returned by Screencast when another screencast of the same
// browser is running; the caller fans frames out itself.
var ErrBusy = errors.New("browser: screencast already running")

// ScreencastOptions tune a screencast. Zero values pick the defaults.
type ScreencastOptions struct {
	// Quality of the JPEG frames, 1..100 (0 = 80).
	Quality int
	// MaxWidth and MaxHeight bound the frame size in device pixels
	// (0 = the viewport's device pixels: its CSS size times the device
	// pixel ratio of its last resize).
	MaxWidth, MaxHeight int
	// EveryNthFrame sends only every n-th painted frame (0 = 1, every frame).
	EveryNthFrame int
	// Grade, if set, is asked before each frame for the frames' size and
	// quality now; a change restarts the screencast with them (which sends
	// a frame at once). Smaller frames cost Chromium less CPU (a worker
	// short of it grades them down) and a viewer less bandwidth.
	Grade func() Grade
	// Refresh, if set: a receive asks Grade again at once and, if it
	// changed, restarts the screencast with it (which sends a frame),
	// instead of waiting for the page to paint: a grade decided between
	// frames (a joining viewer's link) reaches a page that does not change.
	Refresh <-chan struct{}
	// Sharpen, if positive, follows a scaled-down frame that no frame
	// follows for this long with a full-size one, when the Grade allows:
	// a page at rest is shown sharp whatever the scale while it changed.
	Sharpen time.Duration
}

// Grade is a screencast's frame size and quality at a moment.
type Grade struct {
	// Scale of the frames within MaxWidth×MaxHeight, in (0, 1] (0 = 1).
	Scale float64
	// Quality of the JPEG frames, 1..100 (0 = ScreencastOptions.Quality).
	Quality int
	// Sharpen allows the full-size frame for a page at rest
	// (ScreencastOptions.Sharpen): false when the frames are small for the
	// viewer's link, which a full-size frame would clog.
	Sharpen bool
}

// Frame is one screencast frame.
type Frame struct {
	Data          []byte // JPEG
	Width, Height int    // of the JPEG, in pixels
	// DeviceWidth and DeviceHeight are the viewport size in CSS pixels.
	DeviceWidth, DeviceHeight float64
	// OffsetTop is the top offset of the content in CSS pixels.
	OffsetTop float64
	// ScrollX and ScrollY are the page scroll position in CSS pixels.
	ScrollX, ScrollY float64
	// Timestamp is when the frame was painted.
	Timestamp time.Time
	// Seq numbers the frames of one browser, starting at 1, across
	// screencasts; a gap means frames were skipped.
	Seq uint64
}

// Cookie is a browser cookie, independent of the protocol used to move it.
type Cookie struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Domain string `json:"domain"`
	Path   string `json:"path"`
	// Expires is zero for a session cookie.
	Expires  time.Time `json:"expires,omitzero"`
	HTTPOnly bool      `json:"httpOnly,omitempty"`
	Secure   bool      `json:"secure,omitempty"`
	// SameSite is "Strict", "Lax", "None" or "" (browser default).
	SameSite string `json:"sameSite,omitempty"`
}

// Browser is one isolated virtual browser (in Chromium: a browser context
// with one page target). Methods are safe for concurrent use.
type Browser interface {
	// Page returns the current URL and title.
	Page() Page
	// OnPageChange calls fn with the new Page whenever the URL or title
	// changes (navigation, history, document.title); it is not called for
	// the current page, so read Page after registering. Calls for one
	// browser are serialized and coalesced: a slow fn may miss intermediate
	// pages but always gets the latest one. fn must not block for long and
	// must not call stop. stop unregisters fn; a call already in flight may
	// still complete. Nothing is called after Done is closed.
	OnPageChange(fn func(Page)) (stop func())
	// Navigate loads url and waits for it to commit.
	Navigate(ctx context.Context, url string) error
	// Screencast streams JPEG frames of the viewport to sink until ctx ends
	// or the browser closes, then stops the stream. Frames come only when
	// the page repaints. sink runs on the screencast's goroutine and must not
	// block: every frame is acknowledged right after sink returns, and the
	// next frame is produced only after that, so a slow sink throttles the
	// stream. Frame.Data is never reused, so sink may keep it.
	//
	// Only one screencast per browser runs at a time (ErrBusy otherwise).
	// It returns ctx.Err() when ctx ends and Err() when the browser closes.
	Screencast(ctx context.Context, opts ScreencastOptions, sink func(Frame)) error
	// Input dispatches one user input event (mouse, wheel, keyboard, text,
	// resize, navigation). Invalid events fail with an error wrapping
	// ErrInvalidInput.
	Input(ctx context.Context, ev InputEvent) error
	// Evaluate runs a JavaScript expression in the page, awaits a returned
	// promise and JSON-decodes the result into out (nil = ignore it; an
	// undefined result leaves out untouched). A thrown exception is an error.
	Evaluate(ctx context.Context, expr string, out any) error
	// Blocked returns how many requests Options.Allow denied so far (0
	// without a policy). Navigations refused before they started (Navigate,
	// Input) return ErrBlocked and are not counted: they sent nothing.
	Blocked() uint64
	// Install adds page-to-worker bindings and a script that runs in every
	// new document (and at once in the current one), like Options.Script
	// and Options.Bindings but on a browser that already exists (a pooled
	// browser given to a user). A later Install replaces the previous
	// script for new documents and the functions of bindings it names
	// again.
	Install(ctx context.Context, script string, bindings map[string]func(string)) error
	// SetPolicy gives a browser created without Options.Allow its
	// navigation policy (a blank pooled browser leased for an app). It
	// fails if the browser already has one.
	SetPolicy(ctx context.Context, allow func(string) bool) error
	// Egress returns the browser's network exit (Options.Egress), nil
	// without one.
	Egress() Egress
	// Cookies returns every cookie of this browser's isolated cookie jar.
	Cookies(ctx context.Context) ([]Cookie, error)
	// SetCookies adds or replaces cookies in this browser's cookie jar.
	SetCookies(ctx context.Context, cookies []Cookie) error
	// Done is closed when the browser is closed or crashed; Err says which.
	Done() <-chan struct{}
	Err() error
	// Close disposes the browser; it is idempotent.
	Close(ctx context.Context) error
	// Load navigates to url (under the navigation policy, like Navigate),
	// waits for the load event, then for what opts ask, and says what the
	// page is: the main document's HTTP status (the final response after
	// redirects), the final URL and the title. A site that cannot be
	// reached (DNS, refused connection, TLS, the egress guard) fails with
	// an *UnreachableError; a policy refusal wraps ErrBlocked; an invalid
	// WaitSelector wraps ErrInvalidSelector. One Load per browser at a
	// time (others wait).
	Load(ctx context.Context, url string, opts LoadOptions) (LoadResult, error)
	// Capture renders what the page shows: an image of the viewport or the
	// whole page, or a PDF.
	Capture(ctx context.Context, opts CaptureOptions) ([]byte, error)
	// SetResting hides the page (resting) or shows it again. A browser
	// nobody watches rests: its page renders nothing, which frees the
	// compositor's tiles and buffers (in Chromium ~8 MiB of ~20 private
	// per idle browser), while its scripts keep running as in a
	// background tab (timers at most once a second). No screencast frames
	// come while it rests. Calls with the current state do nothing.
	SetResting(ctx context.Context, resting bool) error
	// OnPrompt calls fn when the page opens a dialog (alert, confirm,
	// prompt, beforeunload) and again, with Closed set, when it closes.
	// The page's scripts wait meanwhile. While nobody listens a dialog is
	// dismissed at once, so a job's or a pooled browser's page never hangs
	// on one; one nobody answers is dismissed after
	// Options.PromptTimeout. Calls are serialized; fn must not block for
	// long. stop unregisters fn.
	OnPrompt(fn func(Prompt)) (stop func())
	// OpenPrompt returns the dialog open now, if any.
	OpenPrompt() (Prompt, bool)
	// AnswerPrompt answers dialog id; ErrNoPrompt if it is not open (or
	// is being answered: the first answer wins).
	AnswerPrompt(ctx context.Context, id uint64, a PromptAnswer) error
	// OnCopy calls fn with the text the page puts on its clipboard: a
	// copy or cut (keys or document.execCommand, with the page's own
	// clipboardData if it sets any) and navigator.clipboard.writeText.
	// At most MaxCopyText bytes; fn must not block. stop unregisters fn.
	OnCopy(fn func(text string)) (stop func())

	// OnFileChooser calls fn when the page opens a file picker. While
	// nobody listens a picker is cancelled at once (no page waits for a
	// user who is not there). stop unregisters fn.
	OnFileChooser(fn func(FileChooser)) (stop func())
	// ChooseFiles answers picker id with the files at paths (local files
	// the browser's process can read); none cancels it. ErrNoChooser if it
	// is not open.
	ChooseFiles(ctx context.Context, id uint64, paths []string) error
	// DropFiles drops the files at paths on the page at x, y (CSS
	// pixels), as a user dragging them from a desktop would.
	DropFiles(ctx context.Context, x, y float64, paths []string) error
	// SetDownloads saves the page's downloads in dir from now on, each
	// under its ID, and reports them to OnDownload; "" refuses them (the
	// default: the page's download fails).
	SetDownloads(ctx context.Context, dir string) error
	// OnDownload calls fn as each download begins, progresses and ends;
	// fn must not block. stop unregisters fn.
	OnDownload(fn func(Download)) (stop func())
	// CancelDownload stops download id in progress; its partial file
	// goes. ErrNoDownload if it is not in progress.
	CancelDownload(ctx context.Context, id string) error
	// OnEditable calls fn with whether the page's focused element takes
	// text (a text field, a textarea, an editable element), each time that
	// changes: a phone's keyboard is wanted only then. fn must not block.
	OnEditable(fn func(bool)) (stop func())
}

// MaxCopyText bounds the text of one copy that leaves the page: longer
// text is cut there.
const MaxCopyText = 1 << 20

// LoadOptions say what Load waits for after the load event, in this order.
type LoadOptions struct {
	// WaitSelector: a CSS selector that must match an element.
	WaitSelector string
	// WaitNetworkIdle: no request in flight for NetworkIdleQuiet.
	WaitNetworkIdle bool
	// WaitDelay: a fixed pause at the end.
	WaitDelay time.Duration
	// BeforeNavigate, if set, runs right before the navigation is sent,
	// after everything else is ready (a job's start gate: the moment it
	// returns should be the moment the request leaves). Its error ends the
	// Load with that error.
	BeforeNavigate func(ctx context.Context) error
	// OnRequestSent, if set, is told (once, on its own goroutine) when the
	// main document's request leaves the browser.
	OnRequestSent func(at time.Time)
}

// NetworkIdleQuiet is how long the network must stay quiet for
// LoadOptions.WaitNetworkIdle.
const NetworkIdleQuiet = 500 * time.Millisecond

// LoadResult is what Load found.
type LoadResult struct {
	// Status is the HTTP status of the main document's final response (0
	// when it had none, e.g. a data: URL).
	Status   int
	FinalURL string
	Title    string
	// RetryAfter is that response's Retry-After header, as sent.
	RetryAfter string
	// Navigate is the time until the load event; Wait the time of the
	// waits of LoadOptions after it.
	Navigate, Wait time.Duration
}

// Capture formats (the same words as wire's render formats).
const (
	CapturePNG  = "png"
	CaptureJPEG = "jpeg"
	CapturePDF  = "pdf"
)

// MaxCaptureHeight bounds a full-page image, in CSS pixels: a page that
// grows without end must not make an image of gigabytes.
const MaxCaptureHeight = 16384

// CaptureOptions choose what Capture renders.
type CaptureOptions struct {
	Format string // CapturePNG (default), CaptureJPEG or CapturePDF
	// Quality of a JPEG, 1..100 (0 = 80).
	Quality int
	// FullPage captures the whole scrollable page (up to
	// MaxCaptureHeight), not only the viewport. PDFs are always whole.
	FullPage bool
}

// ErrUnreachable is wrapped by Load's errors for sites that could not be
// reached.
var ErrUnreachable = errors.New("browser: site unreachable")

// ErrInvalidSelector is wrapped by Load's error for a WaitSelector the
// browser cannot parse.
var ErrInvalidSelector = errors.New("browser: invalid CSS selector")

// UnreachableError says why Load could not reach a site, in words a user
// understands ("connection refused", "DNS lookup failed", "blocked by
// egress guard").
type UnreachableError struct {
	URL    string
	Reason string
}

func (e *UnreachableError) Error() string {
	return "browser: load " + e.URL + ": " + e.Reason
}

// Unwrap makes errors.Is(err, ErrUnreachable) true.
func (e *UnreachableError) Unwrap() error { return ErrUnreachable }

// NetErrorReason turns a Chromium network error ("net::ERR_CONNECTION_REFUSED")
// into UnreachableError.Reason words ("connection refused").
func NetErrorReason(text string) string {
	code := strings.TrimPrefix(strings.TrimSpace(text), "net::")
	switch code {
	case "ERR_NAME_NOT_RESOLVED":
		return "DNS lookup failed"
	case "ERR_TUNNEL_CONNECTION_FAILED":
		// An https:// site through the egress proxy: the guard refused
		// the tunnel or could not connect.
		return "blocked by egress guard or unreachable (tunnel refused)"
	case "ERR_BLOCKED_BY_CLIENT":
		return "blocked by the navigation policy"
	}
	if !strings.HasPrefix(code, "ERR_") {
		return text
	}
	return strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(code, "ERR_"), "_", " "))
}

// Runtime creates virtual browsers.
type Runtime interface {
	// Name identifies the implementation in logs and status ("chromium", "none").
	Name() string
	NewBrowser(ctx context.Context, opts Options) (Browser, error)
	Stats(ctx context.Context) (Stats, error)
	// Close closes every browser and stops the runtime's processes.
	Close() error
}

// CheckURL applies a navigation policy (Options.Allow) to url: a nil allow
// allows everything, data:, blob: and about: URLs are always allowed, and an
// allow that panics denies; its panic value is returned for logging.
func CheckURL(allow func(url string) bool, url string) (ok bool, panicked any) {
	if allow == nil || exemptURL(url) {
		return true, nil
	}
	defer func() {
		if p := recover(); p != nil {
			ok, panicked = false, p
		}
	}()
	return allow(url), nil
}

// exemptURL reports URLs that load nothing from the network.
func exemptURL(url string) bool {
	for _, scheme := range []string{"data:", "blob:", "about:"} {
		if len(url) >= len(scheme) && strings.EqualFold(url[:len(scheme)], scheme) {
			return true
		}
	}
	return false
}

// DevToolsEndpoint is where a CDP client of its own reaches a browser:
// its Chromium's browser endpoint and its browser context there.
type DevToolsEndpoint struct {
	// URL is the browser endpoint (ws://127.0.0.1:…/devtools/browser/…).
	URL string
	// Context is the browser's context id, Page its page's target id.
	Context, Page string
	// ProxyURL is the egress proxy the browser's requests go through
	// ("" = none); contexts the client creates must use it too.
	ProxyURL string
	// Policy says a navigation policy filters the browser's requests
	// (Options.Allow): it covers the pages of its context, not contexts a
	// client creates.
	Policy bool
}

// DevTools is implemented by browsers an automation client may drive over
// CDP (Chromium with its DevTools port open); ok false when this one
// cannot be (no port, or the browser ended).
type DevTools interface {
	DevTools() (DevToolsEndpoint, bool)
}
