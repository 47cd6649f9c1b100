// Package engine is the worker's side of the client engine: the WebSocket
// hub of each virtual browser and the protocol it speaks.
//
// It owns the hub (the clients of one browser, the broadcast of control
// messages, the screencast while someone watches and its fan-out with
// latest-frame-wins slots), the clients' input to the browser (input.go)
// and the page's dialogs (dialog.go), frame pacing by acknowledgements
// (pace.go), the grading of frames to the viewers' links (grade.go),
// precasting, the idle-release and resting countdowns of a browser nobody
// watches (countdown.go, rest.go), the typed control messages
// (enginemsg.go) and the socket tickets that let an engine open its socket
// at another origin (ticket.go).
//
// It does not own the browsers, their instances or apps, who may see or
// drive a browser (roles), the quotas, snapshots or the migration's input
// holds, nor HTTP routing: package worker decides those and hands the hub
// what it needs when it makes one (Config, Host, Client). This package
// never imports worker.
package engine

import (
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/grade"
)

// PrecastWindow is how long a screencast started for a client about to
// connect waits for it (a page load over a slow link included).
const PrecastWindow = 5 * time.Second

// RestTimeout bounds one SetResting call (resting or waking a page).
const RestTimeout = 10 * time.Second

// Config is what a hub serves and what it is told by its worker.
type Config struct {
	// Browser is the virtual browser the hub's clients see and drive.
	Browser browser.Browser
	// ID, Instance and App name the browser, its instance and its app's
	// mount point, and Worker this worker, in the clients' hello and
	// the hub's log lines.
	ID, Instance, App, Worker string
	// Released is closed when the browser goes back to its pool: it lives
	// on, and the hub stops following its pages.
	Released <-chan struct{}
	// Host is the browser's side the hub does not own (nil: nothing held,
	// nothing tracked, no client navigation).
	Host Host
	// Grade is the worker's CPU grade of the frames (nil = full size).
	Grade *grade.Governor
	// Admit applies the socket quotas to a client from addr while open
	// clients are connected; refused is what the client is told (nil =
	// no quotas).
	Admit func(addr string, open int) (release func(), refused string)
	// OnPage is told of the browser's page changes (nil = none).
	OnPage func(browser.Page)
	// Counters are the worker's totals (nil: the hub's own).
	Counters *Counters
	// NoFrames says the browser renders nothing (the "none" runtime):
	// clients are told so at hello instead of waiting for a frame.
	NoFrames bool
	// Tiles sends engines that compose them tile updates, the changed
	// 64×64 tiles, instead of whole frames (tiles.go).
	Tiles bool
	// Files is what the browser may exchange as files (a zero value:
	// nothing).
	Files FilesConfig
	// Clock times the window in which what the page does (a copy, a file
	// picker) is taken as the doing of the viewer who acted last (nil =
	// the real clock).
	Clock clock.Clock
	// OnGesture, if set, is told of each gesture (a key, a click, a touch,
	// a paste) of a viewer who may drive, by user: a person acting on the
	// browser (an automation session's takeover). It must not block.
	OnGesture func(user string)
	// OnHandBack, if set, is told when a viewer who may drive hands the
	// browser back to its automation (the engine's Hand back button). It
	// must not block.
	OnHandBack func(user string)
	Log        zerolog.Logger
}

// Host is what a hub needs of its browser's side in package worker.
type Host interface {
	// Input runs take with the browser's input gate held for reading:
	// held tells whether a migration holds the input (take then sends
	// the event back to its client), and a hold waits for a take under
	// way, so once the hold is on no input reaches the page.
	Input(take func(held bool))
	// InputHeld reports whether a migration holds the input now.
	InputHeld() bool
	// Touched says the page may have changed (a frame painted, an input
	// taken): it is due for a snapshot.
	Touched()
	// Resized says the page took this viewport size (CSS pixels).
	Resized(width, height int)
	// MayNavigate reports whether a client may send the browser to url.
	MayNavigate(url string) bool
}

// noHost holds nothing, tracks nothing and lets no client navigate.
type noHost struct{}

func (noHost) Input(take func(held bool)) { take(false) }
func (noHost) InputHeld() bool            { return false }
func (noHost) Touched()                   {}
func (noHost) Resized(int, int)           {}
func (noHost) MayNavigate(string) bool    { return false }

// Access is what a client may do with the browser, from the user's role
// on it.
type Access int

const (
	// AccessNone: the browser is not shared with the user (any more).
	AccessNone Access = iota
	// AccessRead: the client watches.
	AccessRead
	// AccessWrite: the client drives (input).
	AccessWrite
	// AccessOwner: the client drives, and its window sets the viewport.
	AccessOwner
)

// Client is who a socket is for.
type Client struct {
	User string
	// Addr is the client's address, for the socket quotas.
	Addr string
	// Sessions are the ids of the login and dashboard sessions the socket
	// was opened with: ending one closes it (Hub.DisconnectSession).
	Sessions []string
	// Access gives the user's current access to the browser; it is read
	// again on Hub.Recheck, as the owner may change it while connected.
	Access func() Access
	// LinkKbps is the client's estimate of its link (LinkHint; 0 = none).
	LinkKbps int
}

// Counters are a worker's totals over its hubs.
type Counters struct {
	produced, sent, dropped, held, acks atomic.Uint64
	inputs, ignored                     atomic.Uint64
	linkGraded                          atomic.Int64 // browsers whose frames are small for their viewers' links
	resting                             atomic.Int64 // browsers resting now
	rests, wakes                        atomic.Uint64
	castRestarts                        atomic.Uint64 // screencasts restarted for a missed scroll (settle.go)
}

// Stats are the counters' values.
type Stats struct {
	Produced uint64 // frames painted while someone watched
	Sent     uint64 // frame messages written to clients
	Dropped  uint64 // frames replaced by a newer one before a slow client got them
	// Held counts the times a frame waited for its client to acknowledge
	// earlier ones (pacing); Acks the acknowledgements clients sent.
	Held, Acks uint64
	// Inputs are the input events dispatched to browsers, Ignored those
	// that were not (read-only clients).
	Inputs, Ignored uint64
	// LinkGraded are the browsers whose frames are small for their
	// viewers' links now.
	LinkGraded int64
	// Resting are the browsers resting now; Rests and Wakes count the
	// times one started resting and was woken.
	Resting      int64
	Rests, Wakes uint64
	// ScrollRestarts: screencasts restarted because their last frame
	// missed where the page was scrolled (settle.go).
	ScrollRestarts uint64
}

// Stats reads the counters.
func (c *Counters) Stats() Stats {
	return Stats{Produced: c.produced.Load(), Sent: c.sent.Load(), Dropped: c.dropped.Load(), Held: c.held.Load(), Acks: c.acks.Load(),
		Inputs: c.inputs.Load(), Ignored: c.ignored.Load(), LinkGraded: c.linkGraded.Load(),
		Resting: c.resting.Load(), Rests: c.rests.Load(), Wakes: c.wakes.Load(), ScrollRestarts: c.castRestarts.Load()}
}
