package browser

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
)

// PromptKind says what a page asks its user.
type PromptKind string

// The page's JavaScript dialogs.
const (
	PromptAlert        PromptKind = "alert"
	PromptConfirm      PromptKind = "confirm"
	PromptPrompt       PromptKind = "prompt"
	PromptBeforeUnload PromptKind = "beforeunload"
	// PromptAuth is a site's sign-in challenge (HTTP basic or digest
	// auth): Message is its realm, URL the challenging origin, and the
	// answer's Text and Password the credentials.
	PromptAuth PromptKind = "auth"
	// PromptPermission is a page asking for a permission: Message is its
	// name (PermissionGeolocation, …), URL the origin asking. Accepting
	// grants it to that origin for the browser's life; cancelling, or no
	// answer, denies it.
	PromptPermission PromptKind = "permission"
)

// The permissions a page may ask its user for; others stay denied without
// asking.
const (
	PermissionGeolocation   = "geolocation"
	PermissionNotifications = "notifications"
	PermissionCamera        = "camera"
	PermissionMicrophone    = "microphone"
)

// Position is where a user is, as their own browser says: what a page
// granted geolocation sees.
type Position struct {
	Latitude, Longitude float64
	// Accuracy is in metres.
	Accuracy float64
}

// Prompt is a dialog the page opened and waits on: its scripts are stopped
// until it is answered, so someone must answer it (a user, or the timeout).
type Prompt struct {
	// ID names the dialog in this browser (answers name it, so a late
	// answer never reaches the next dialog).
	ID      uint64
	Kind    PromptKind
	Message string
	// Default is a prompt()'s default text.
	Default string
	// URL is the address of the document that asks.
	URL string
	// Closed is set on the call that tells the dialog is gone: answered
	// (by anyone), dismissed by the timeout, or ended with its document.
	Closed bool
	// Accepted says how it closed (OK / Leave: true).
	Accepted bool
}

// PromptAnswer is a user's answer to a Prompt: Accept is OK (confirm:
// true; beforeunload: leave the page; auth: sign in), otherwise Cancel
// (dismiss). Text is a prompt()'s answer or a sign-in's user name, Password
// a sign-in's password. Position is where the user is, for a geolocation
// permission accepted (nil: their browser did not say; the page then gets
// "position unavailable").
type PromptAnswer struct {
	Accept   bool
	Text     string
	Password string
	Position *Position
}

// ErrNoPrompt: the dialog answered is no longer open (someone else
// answered it first, or it timed out).
var ErrNoPrompt = errors.New("no such dialog open")

// DefaultPromptTimeout is how long a dialog waits for an answer before it
// is dismissed (Cancel) and the page goes on.
const DefaultPromptTimeout = 2 * time.Minute

// MaxPromptText bounds a prompt's message, default and answer as shown and
// sent: a page must not push megabytes through every viewer's socket.
const MaxPromptText = 4096

// ClipPromptText cuts s to MaxPromptText bytes on a rune boundary.
func ClipPromptText(s string) string {
	if len(s) <= MaxPromptText {
		return s
	}
	cut := MaxPromptText
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut]
}

// Prompts keeps one browser's open dialog and its listeners; a runtime
// feeds it the page's events (Opened, Closed) and answers through Handle.
// It answers for nobody: with no listener a dialog is dismissed at once,
// and one nobody answers within Timeout is dismissed then.
type Prompts struct {
	// Handle answers the open dialog in the page (Page.handleJavaScriptDialog).
	Handle func(ctx context.Context, a PromptAnswer) error
	// Timeout: DefaultPromptTimeout if zero.
	Timeout time.Duration
	// Clock runs the timeout (clock.Real if nil).
	Clock clock.Clock
	// Log notes dismissals.
	Log zerolog.Logger
	// IDs numbers the dialogs when set, so two Prompts of one browser
	// (its JavaScript dialogs and its sign-ins) never give one id twice.
	IDs *atomic.Uint64

	mu      sync.Mutex
	next    uint64
	open    *Prompt
	timer   clock.Timer
	subs    map[int]func(Prompt)
	nextSub int
	queue   []Prompt
	running bool // a drain goroutine delivers the queue
	ended   bool
}

// Opened records a dialog the page opened. It never blocks (a runtime's
// event reader calls it).
func (p *Prompts) Opened(kind PromptKind, message, def, url string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return
	}
	p.next++
	if p.IDs != nil {
		p.next = p.IDs.Add(1)
	}
	pr := Prompt{ID: p.next, Kind: kind, Message: ClipPromptText(message), Default: ClipPromptText(def), URL: url}
	p.open = &pr
	if p.timer != nil {
		p.timer.Stop()
	}
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = DefaultPromptTimeout
	}
	clk := p.Clock
	if clk == nil {
		clk = clock.Real
	}
	id := pr.ID
	p.timer = clk.AfterFunc(timeout, func() { p.dismiss(id, "nobody answered in time") })
	p.postLocked(pr)
}

// Closed records that the open dialog closed (answered in the page or by
// Handle, or gone with its document).
func (p *Prompts) Closed(accepted bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.open == nil {
		return
	}
	pr := *p.open
	p.open = nil
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	pr.Closed, pr.Accepted = true, accepted
	p.postLocked(pr)
}

// Subscribe implements Browser.OnPrompt.
func (p *Prompts) Subscribe(fn func(Prompt)) (stop func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.subs == nil {
		p.subs = map[int]func(Prompt){}
	}
	id := p.nextSub
	p.nextSub++
	p.subs[id] = fn
	return func() {
		p.mu.Lock()
		delete(p.subs, id)
		p.mu.Unlock()
	}
}

// Open implements Browser.OpenPrompt.
func (p *Prompts) Open() (Prompt, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.open == nil {
		return Prompt{}, false
	}
	return *p.open, true
}

// Answer implements Browser.AnswerPrompt: only the open dialog id is
// answered, so of two users answering at once the first wins.
func (p *Prompts) Answer(ctx context.Context, id uint64, a PromptAnswer) error {
	p.mu.Lock()
	if p.open == nil || p.open.ID != id || p.open.Closed {
		p.mu.Unlock()
		return ErrNoPrompt
	}
	p.open.Closed = true // answering: a second answer is refused
	p.mu.Unlock()
	a.Text, a.Password = ClipPromptText(a.Text), ClipPromptText(a.Password)
	if err := p.Handle(ctx, a); err != nil {
		p.mu.Lock()
		if p.open != nil && p.open.ID == id {
			p.open.Closed = false // still open: let someone try again
		}
		p.mu.Unlock()
		return err
	}
	return nil
}

// End stops the timeout and every delivery: the browser is gone.
func (p *Prompts) End() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended = true
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	p.queue = nil
}

// dismiss cancels dialog id if it is still open and unanswered.
func (p *Prompts) dismiss(id uint64, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Answer(ctx, id, PromptAnswer{}); err == nil {
		p.Log.Debug().Uint64("dialog", id).Str("why", why).Msg("dialog dismissed")
	} else if !errors.Is(err, ErrNoPrompt) {
		p.Log.Warn().Err(err).Uint64("dialog", id).Msg("cannot dismiss a dialog")
	}
}

func (p *Prompts) postLocked(pr Prompt) {
	p.queue = append(p.queue, pr)
	if !p.running {
		p.running = true
		go p.drain()
	}
}

// drain delivers the queue in order, then ends. An opened dialog with
// nobody to show it to is dismissed at once.
func (p *Prompts) drain() {
	for {
		p.mu.Lock()
		if len(p.queue) == 0 || p.ended {
			p.queue, p.running = nil, false
			p.mu.Unlock()
			return
		}
		pr := p.queue[0]
		p.queue = p.queue[1:]
		fns := make([]func(Prompt), 0, len(p.subs))
		for _, fn := range p.subs {
			fns = append(fns, fn)
		}
		p.mu.Unlock()
		if len(fns) == 0 && !pr.Closed {
			p.dismiss(pr.ID, "nobody watches")
			continue
		}
		for _, fn := range fns {
			fn(pr)
		}
	}
}
