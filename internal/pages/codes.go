package pages

import (
	"net/http"
	"strings"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// The pages of failures that have no master error code.
var (
	// MasterUnavailable: the master could not be asked.
	MasterUnavailable = Page{Status: http.StatusServiceUnavailable, Title: "Service unavailable",
		Message: "The cluster master is unreachable, retry shortly.", RetryAfter: "2"}
	// NotHere: a worker was asked for an instance it does not host (a
	// proxy's route predates a move, or the instance just closed). Only the
	// master knows which, so the answer is to ask again: 421 Misdirected
	// Request, which proxies take as a stale route, and a page (or a
	// refused WebSocket handshake, which the client engine retries) that
	// reloads itself.
	NotHere = Page{Status: http.StatusMisdirectedRequest, Title: "App instance moving",
		Message: "This app instance is moving to another worker. This page reloads by itself in a moment.", RetryAfter: "1", Refresh: "1"}
	// BrowserNotFound: the instance is here, the virtual browser is not.
	BrowserNotFound = Page{Status: http.StatusNotFound, Title: "Browser not found",
		Message: "This virtual browser does not exist (it may have been closed)."}
)

// vocab is the one table from the master's error codes to what users see.
// linkToApp pages link to the app's Application URL.
var vocab = map[string]struct {
	Page
	linkToApp bool
}{
	wire.CodeUnknownApp: {Page: Page{Status: http.StatusNotFound, Title: "Application not found",
		Message: "There is no application at this address."}},
	wire.CodeUnknownInstance: {Page: Page{Status: http.StatusNotFound, Title: "App instance not found",
		Message: "This app instance does not exist (it may have been closed).", LinkText: "Start the application again"}, linkToApp: true},
	wire.CodeAppDisabled: {Page: Page{Status: http.StatusServiceUnavailable, Title: "Application unavailable",
		Message: "This application has been disabled by an administrator."}},
	wire.CodeInstanceLost: {Page: Page{Status: http.StatusGone, Title: "App instance lost",
		Message: "The worker that hosted this app instance stopped, and the instance stopped with it.", LinkText: "Start the application again"}, linkToApp: true},
	wire.CodeInstanceMerged: {Page: Page{Status: http.StatusGone, Title: "App instance replaced",
		Message: "While its worker was unreachable, this app instance was replaced by a new one, and it was closed when the worker came back. The application goes on in the new one.", LinkText: "Go to the application"}, linkToApp: true},
	wire.CodeInstanceMoving: {Page: Page{Status: http.StatusServiceUnavailable, Title: "App instance moving",
		Message: "The worker that hosted this app instance stopped; the instance is being restored on another worker. Reload in a moment.", RetryAfter: "1"}},
	// A newcomer who clicked the URL the moment `up` printed it: the page
	// reloads itself until a worker is there.
	wire.CodeStarting: {Page: Page{Status: http.StatusServiceUnavailable, Title: "Starting",
		Message: "CloudBrowser is starting: its workers are coming up. This page reloads by itself in a moment.", RetryAfter: "2", Refresh: "2"}},
	wire.CodeNoWorkers: {Page: Page{Status: http.StatusServiceUnavailable, Title: "No workers available",
		Message: "No worker can host this application right now. Please retry shortly.", RetryAfter: "5"}},
	wire.CodeUnknownWorker: {Page: Page{Status: http.StatusBadGateway, Title: "Worker unreachable",
		Message: "The worker hosting this instance is not reachable."}},
	wire.CodePoolLimit: {Page: Page{Status: http.StatusServiceUnavailable, Title: "No browser available",
		Message: "Please retry later.", RetryAfter: "10"}},
}

// movingNoWorker replaces the instance_moving message when the master says
// the instance waits for a worker (none is live).
const movingNoWorker = "The worker that hosted this app instance stopped, and no other worker is live. The instance will be restored as soon as one is."

// ForCode is the page for a master error code about app (its mount point,
// without "/"); detail is the master's message, shown only where it helps
// (which browser limit was reached). ok is false for codes with no page.
func ForCode(code, app, detail string) (p Page, ok bool) {
	e, ok := vocab[code]
	if !ok {
		return Page{}, false
	}
	p = e.Page
	if e.linkToApp {
		p.LinkURL = "/" + app
	}
	switch code {
	case wire.CodePoolLimit:
		if detail != "" {
			p.Message = detail + ". " + p.Message
		}
	case wire.CodeInstanceMoving:
		if strings.Contains(detail, "waits for a worker") {
			p.Message = movingNoWorker
		}
	}
	return p, true
}
