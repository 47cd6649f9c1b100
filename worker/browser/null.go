package browser

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// Null is a Runtime whose browsers remember their URL, history, viewport and
// cookies but render nothing: Screencast sends no frames, Evaluate is
// unsupported, and Options.Script and Bindings are never run or called.
// Options.Allow is applied to the initial URL, Navigate and Input navigate
// (ErrBlocked); since nothing is loaded, Blocked is always 0.
type Null struct {
	n      atomic.Int64
	closed atomic.Bool

	mu       sync.Mutex
	browsers map[*nullBrowser]struct{}
}

var _ Runtime = (*Null)(nil)

// Name implements Runtime.
func (r *Null) Name() string { return "none" }

// NewBrowser implements Runtime.
func (r *Null) NewBrowser(ctx context.Context, opts Options) (Browser, error) {
	b, err := r.newBrowser(ctx, opts)
	if err != nil {
		if opts.Egress != nil {
			_ = opts.Egress.Close()
		}
		return nil, err
	}
	return b, nil
}

func (r *Null) newBrowser(ctx context.Context, opts Options) (*nullBrowser, error) {
	if r.closed.Load() {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if opts.URL != "" {
		if ok, _ := CheckURL(opts.Allow, opts.URL); !ok {
			return nil, fmt.Errorf("browser: new browser: %s: %w", opts.URL, ErrBlocked)
		}
	}
	b := &nullBrowser{rt: r, done: make(chan struct{}), subs: map[int]func(Page){}, allow: opts.Allow, egress: opts.Egress}
	b.page.URL = opts.URL
	if b.page.URL == "" {
		b.page.URL = "about:blank"
	}
	b.history = []string{b.page.URL}
	b.width, b.height = opts.Width, opts.Height
	if b.width == 0 || b.height == 0 {
		b.width, b.height = DefaultWidth, DefaultHeight
	}
	r.mu.Lock()
	if r.closed.Load() {
		r.mu.Unlock()
		return nil, ErrClosed
	}
	if r.browsers == nil {
		r.browsers = map[*nullBrowser]struct{}{}
	}
	r.browsers[b] = struct{}{}
	r.n.Add(1)
	r.mu.Unlock()
	return b, nil
}

// Stats implements Runtime.
func (r *Null) Stats(context.Context) (Stats, error) {
	return Stats{Browsers: int(r.n.Load())}, nil
}

// Close implements Runtime: it closes every browser.
func (r *Null) Close() error {
	r.mu.Lock()
	r.closed.Store(true)
	bs := make([]*nullBrowser, 0, len(r.browsers))
	for b := range r.browsers {
		bs = append(bs, b)
	}
	r.mu.Unlock()
	for _, b := range bs {
		_ = b.Close(context.Background())
	}
	return nil
}

type nullBrowser struct {
	rt      *Null
	once    sync.Once
	done    chan struct{}
	allowMu sync.Mutex
	allow   func(string) bool
	egress  Egress
	resting atomic.Bool

	mu            sync.Mutex
	page          Page
	history       []string // URLs, current at index cur
	cur           int
	width, height int
	cookies       []Cookie
	subs          map[int]func(Page)
	nextSub       int

	notifyMu    sync.Mutex // serializes OnPageChange calls
	screencasts atomic.Bool
}

// A Null page runs no scripts, so it never opens a dialog or copies.
func (b *nullBrowser) OnPrompt(func(Prompt)) (stop func()) { return func() {} }
func (b *nullBrowser) OpenPrompt() (Prompt, bool)          { return Prompt{}, false }
func (b *nullBrowser) OnCopy(func(string)) (stop func())   { return func() {} }

// Nor does it open pickers or download: its files go nowhere.
func (b *nullBrowser) OnFileChooser(func(FileChooser)) (stop func()) { return func() {} }
func (b *nullBrowser) OnDownload(func(Download)) (stop func())       { return func() {} }
func (b *nullBrowser) ChooseFiles(context.Context, uint64, []string) error {
	return ErrNoChooser
}
func (b *nullBrowser) DropFiles(context.Context, float64, float64, []string) error { return b.Err() }
func (b *nullBrowser) SetDownloads(context.Context, string) error                  { return b.Err() }
func (b *nullBrowser) CancelDownload(context.Context, string) error                { return ErrNoDownload }
func (b *nullBrowser) OnEditable(func(bool)) (stop func())                         { return func() {} }
func (b *nullBrowser) AnswerPrompt(context.Context, uint64, PromptAnswer) error {
	return ErrNoPrompt
}

func (b *nullBrowser) Page() Page { b.mu.Lock(); defer b.mu.Unlock(); return b.page }

func (b *nullBrowser) OnPageChange(fn func(Page)) (stop func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	id := b.nextSub
	b.nextSub++
	b.subs[id] = fn
	return func() { b.mu.Lock(); delete(b.subs, id); b.mu.Unlock() }
}

func (b *nullBrowser) closed() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// setURL moves to url (push adds a history entry) and notifies subscribers
// from the calling goroutine; notifyMu keeps the calls serialized.
func (b *nullBrowser) setURL(url string, push bool) {
	b.notifyMu.Lock()
	defer b.notifyMu.Unlock()
	b.mu.Lock()
	if push {
		b.history = append(b.history[:b.cur+1], url)
		b.cur = len(b.history) - 1
	}
	b.page = Page{URL: url}
	p := b.page
	fns := make([]func(Page), 0, len(b.subs))
	for _, fn := range b.subs {
		fns = append(fns, fn)
	}
	b.mu.Unlock()
	for _, fn := range fns {
		if b.closed() {
			return
		}
		fn(p)
	}
}

func (b *nullBrowser) Navigate(ctx context.Context, url string) error {
	if b.closed() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if ok, _ := CheckURL(b.policy(), url); !ok {
		return fmt.Errorf("browser: navigate %s: %w", url, ErrBlocked)
	}
	b.setURL(url, true)
	return nil
}

// Blocked is always 0: a Null browser loads nothing.
func (b *nullBrowser) Blocked() uint64 { return 0 }

func (b *nullBrowser) policy() func(string) bool {
	b.allowMu.Lock()
	defer b.allowMu.Unlock()
	return b.allow
}

// SetPolicy implements Browser.
func (b *nullBrowser) SetPolicy(ctx context.Context, allow func(string) bool) error {
	b.allowMu.Lock()
	defer b.allowMu.Unlock()
	if b.allow != nil && allow != nil {
		return errors.New("browser: a navigation policy is already set")
	}
	if allow != nil {
		b.allow = allow
	}
	return nil
}

// Install implements Browser: nothing runs scripts here.
func (b *nullBrowser) Install(ctx context.Context, script string, bindings map[string]func(string)) error {
	return b.Err()
}

// Screencast never produces a frame: it only waits for the end.
func (b *nullBrowser) Screencast(ctx context.Context, _ ScreencastOptions, _ func(Frame)) error {
	if b.closed() {
		return ErrClosed
	}
	if !b.screencasts.CompareAndSwap(false, true) {
		return ErrBusy
	}
	defer b.screencasts.Store(false)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-b.done:
		return ErrClosed
	}
}

// Input validates ev and applies what Null can model: navigation, history
// and viewport size. Pointer and keyboard events are accepted and dropped.
func (b *nullBrowser) Input(ctx context.Context, ev InputEvent) error {
	if err := ev.Validate(); err != nil {
		return err
	}
	if b.closed() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	switch ev.Type {
	case InputNavigate:
		if ok, _ := CheckURL(b.policy(), ev.URL); !ok {
			return fmt.Errorf("browser: navigate %s: %w", ev.URL, ErrBlocked)
		}
		b.setURL(ev.URL, true)
	case InputBack, InputForward:
		b.mu.Lock()
		i := b.cur - 1
		if ev.Type == InputForward {
			i = b.cur + 1
		}
		if i < 0 || i >= len(b.history) {
			b.mu.Unlock()
			return nil // like a browser: nothing to go to
		}
		b.cur = i
		url := b.history[i]
		b.mu.Unlock()
		b.setURL(url, false)
	case InputResize:
		b.mu.Lock()
		b.width, b.height = ev.Width, ev.Height
		b.mu.Unlock()
	}
	return nil
}

func (b *nullBrowser) Evaluate(context.Context, string, any) error {
	if b.closed() {
		return ErrClosed
	}
	return fmt.Errorf("browser: the null runtime runs no JavaScript: %w", errors.ErrUnsupported)
}

func (b *nullBrowser) Cookies(ctx context.Context) ([]Cookie, error) {
	if b.closed() {
		return nil, ErrClosed
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Cookie(nil), b.cookies...), nil
}

// SetCookies replaces cookies with the same name, domain and path, as a
// browser does.
func (b *nullBrowser) SetCookies(ctx context.Context, cookies []Cookie) error {
	if b.closed() {
		return ErrClosed
	}
	b.mu.Lock()
	defer b.mu.Unlock()
next:
	for _, c := range cookies {
		if c.Name == "" {
			return errors.New("browser: cookie without a name")
		}
		for i, old := range b.cookies {
			if old.Name == c.Name && old.Domain == c.Domain && old.Path == c.Path {
				b.cookies[i] = c
				continue next
			}
		}
		b.cookies = append(b.cookies, c)
	}
	return nil
}

func (b *nullBrowser) Done() <-chan struct{} { return b.done }

func (b *nullBrowser) Err() error {
	if b.closed() {
		return ErrClosed
	}
	return nil
}

func (b *nullBrowser) Close(context.Context) error {
	b.once.Do(func() {
		close(b.done)
		b.rt.mu.Lock()
		delete(b.rt.browsers, b)
		b.rt.mu.Unlock()
		b.rt.n.Add(-1)
		if b.egress != nil {
			_ = b.egress.Close()
		}
	})
	return nil
}

// Egress implements Browser.
func (b *nullBrowser) Egress() Egress { return b.egress }

// size reports the viewport (for tests).
func (b *nullBrowser) size() (int, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.width, b.height
}

// Load implements Browser: it navigates like Navigate (policy included) and
// reports the URL only; nothing is fetched, so Status is 0.
func (b *nullBrowser) Load(ctx context.Context, url string, opts LoadOptions) (LoadResult, error) {
	if opts.BeforeNavigate != nil {
		if err := opts.BeforeNavigate(ctx); err != nil {
			return LoadResult{}, err
		}
	}
	if err := b.Navigate(ctx, url); err != nil {
		return LoadResult{}, err
	}
	return LoadResult{FinalURL: url}, nil
}

// SetResting implements Browser: the state is kept (Resting reports it).
func (b *nullBrowser) SetResting(_ context.Context, resting bool) error {
	if b.closed() {
		return ErrClosed
	}
	b.resting.Store(resting)
	return nil
}

// Resting reports the state SetResting set last (for tests).
func (b *nullBrowser) Resting() bool { return b.resting.Load() }

// Capture implements Browser: the null runtime renders nothing.
func (b *nullBrowser) Capture(context.Context, CaptureOptions) ([]byte, error) {
	if b.closed() {
		return nil, ErrClosed
	}
	return nil, fmt.Errorf("browser: the null runtime renders nothing: %w", errors.ErrUnsupported)
}
