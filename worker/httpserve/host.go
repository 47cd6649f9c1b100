package httpserve

import (
	"context"
	"errors"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/engine"
)

// Host is the worker's instances side as its HTTP side sees it: the apps,
// instances and browsers hosted here, and the master.
type Host interface {
	// App is an app installed on this worker.
	App(name string) (wire.App, bool)
	// Instance is an instance hosted on this worker.
	Instance(id string) (Instance, bool)
	// Master calls the master: placements, landing pages, logins,
	// session ends, new identities.
	Master() contract.Caller
	// Registered reports a registration with the master in force; Ready
	// also that the worker is not stopping (/readyz).
	Registered() bool
	Ready() bool
	// EndSession refuses a logged-out session on this worker at once
	// (the master then tells every worker).
	EndSession(ctx context.Context, rev wire.SessionRevocation) error
}

// Instance is an app instance hosted on this worker.
type Instance interface {
	ID() string
	App() wire.App
	// Role is user's role on the instance.
	Role(user string) Role
	// HasBrowserFor reports whether user already has a browser in it.
	HasBrowserFor(user string) bool
	// AwaitRestore waits for browser id if it is being restored (a
	// re-placed instance); Browser finds a browser; WasReleased reports
	// one given back for being idle.
	AwaitRestore(ctx context.Context, id string)
	Browser(id string) (Browser, bool)
	WasReleased(id string) bool
	// Released is what a client of a released browser is told, and the
	// address that gives a new one.
	Released() (reason, reloadURL string)
	// Browsers are the instance's browsers; Page what its page shows of
	// the instance itself for user, read at once.
	Browsers() []Browser
	Page(user string) InstancePage
	// NewBrowser makes user a new browser; BrowserFor returns their
	// browser, made if needed. ip counts in the per-address quota.
	NewBrowser(ctx context.Context, user, ip string) (Browser, error)
	BrowserFor(ctx context.Context, user, ip string) (Browser, error)
	// Close closes the instance; Rename names it (stored by the master);
	// Grant sets principal's role on it (RoleNone revokes), if by owns it.
	Close(ctx context.Context, reason string)
	Rename(name string) error
	Grant(ctx context.Context, by, principal string, role Role) error
}

// InstancePage is an instance as its page shows it to one user.
type InstancePage struct {
	Name string
	// Owner: the user owns the instance; Grants are its grants (a copy).
	Owner  bool
	Grants map[string]Role
	// Released: the user's previous browser was released after Idle
	// without a connection (told once).
	Released bool
	Idle     time.Duration
}

// Browser is a virtual browser of a hosted instance.
type Browser interface {
	Owner() string
	URL() string
	Info() BrowserInfo
	// Role is user's role on the browser: ownership, or the strongest
	// grant on it or its instance.
	Role(user string) Role
	// Hub serves its client engines.
	Hub() *engine.Hub
	// TakeNotice is the owner's notice, once; Made is how it was made (a
	// Server-Timing value).
	TakeNotice() string
	Made() string
	Rename(name string)
	Close(reason string)
	// Grant sets principal's role on the browser, if by owns it.
	Grant(ctx context.Context, by, principal string, role Role) error
	// DevTools is where an automation client reaches it over CDP (ok
	// false: its runtime has no DevTools port, or it ended), and a channel
	// closed when it ends.
	DevTools() (e browser.DevToolsEndpoint, done <-chan struct{}, ok bool)
	// Resize sets its viewport (CSS pixels), as its owner's window does.
	Resize(ctx context.Context, width, height int) error
	// HoldIdle keeps it from being released as idle (no viewer) until
	// release: an automation session drives it.
	HoldIdle() (release func())
	// ClientConnected counts an automation client connected to it until
	// left (the dashboard's session states).
	ClientConnected() (left func())
	// OnPeople calls fn with what the viewers who drive it do in the
	// client engine: each gesture (a key, a click, a touch) and each Hand
	// back.
	OnPeople(fn func(PersonAct)) (stop func())
}

// PersonAct is what a viewer who drives a browser did in the client
// engine: a gesture, or handing it back to its automation.
type PersonAct struct {
	User     string
	HandBack bool
}

// BrowserInfo is a browser as the instance's page lists it.
type BrowserInfo struct {
	ID, Owner, Name string
	Created         time.Time
	// Grants on the browser (a copy).
	Grants map[string]Role
}

// Errors of the Host's methods that the pages tell apart.
var (
	// ErrInstanceClosed: the instance closed while a browser was being made.
	ErrInstanceClosed = errors.New("app instance closed")
	// ErrBrowserLimit: the app's browserLimit is reached.
	ErrBrowserLimit = errors.New("browser limit reached")
	// ErrNotSaved marks a write the master did not store.
	ErrNotSaved = errors.New("shared state not saved")
)

// QuotaError is a refusal by a quota, with the words for the user.
type QuotaError struct {
	Limit string
	Msg   string
}

func (e *QuotaError) Error() string { return e.Msg }
