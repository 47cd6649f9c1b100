// Package browsertest is a fake virtual browser for the tests of what drives
// one (the client engine's hub, the worker): it streams the frames a test
// feeds it, records the input it takes, and can crash. Everything else is
// a browser.Null browser's.
package browsertest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// Fake is a browser whose screencast sends the frames a test puts on
// Frames and returns the errors it puts on CastErr.
type Fake struct {
	browser.Browser
	Frames  chan browser.Frame
	CastErr chan error

	crashed     chan struct{}
	once        sync.Once
	mu          sync.Mutex
	inputs      []browser.InputEvent
	failResizes int
	prompts     *browser.Prompts
	answers     []browser.PromptAnswer
	copies      subs[string]

	pickers     subs[browser.FileChooser]
	downloads   subs[browser.Download]
	editable    subs[bool]
	cancelled   []string
	chosen      map[uint64][]string
	dropped     [][]string
	downloadDir string
	scroll      [2]float64 // the page's scroll (SetScroll)
	casts       int        // screencasts started
	scrollReads int        // the scroll read by Evaluate
}

// subs are the subscribers of one kind of event.
type subs[T any] struct {
	mu   sync.Mutex
	fns  map[int]func(T)
	next int
}

func (s *subs[T]) add(fn func(T)) (stop func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fns == nil {
		s.fns = map[int]func(T){}
	}
	id := s.next
	s.next++
	s.fns[id] = fn
	return func() {
		s.mu.Lock()
		delete(s.fns, id)
		s.mu.Unlock()
	}
}

func (s *subs[T]) send(v T) {
	s.mu.Lock()
	fns := make([]func(T), 0, len(s.fns))
	for _, fn := range s.fns {
		fns = append(fns, fn)
	}
	s.mu.Unlock()
	for _, fn := range fns {
		fn(v)
	}
}

// OpenChooser opens a file picker as the page would.
func (f *Fake) OpenChooser(fc browser.FileChooser) { f.pickers.send(fc) }

// Download reports a download as the page's would progress.
func (f *Fake) Download(d browser.Download) { f.downloads.send(d) }

// OnFileChooser implements browser.Browser.
func (f *Fake) OnFileChooser(fn func(browser.FileChooser)) (stop func()) { return f.pickers.add(fn) }

// OnDownload implements browser.Browser.
func (f *Fake) OnDownload(fn func(browser.Download)) (stop func()) { return f.downloads.add(fn) }

// ChooseFiles implements browser.Browser: it records the answer.
func (f *Fake) ChooseFiles(_ context.Context, id uint64, paths []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.chosen == nil {
		f.chosen = map[uint64][]string{}
	}
	if _, done := f.chosen[id]; done {
		return browser.ErrNoChooser
	}
	f.chosen[id] = paths
	return nil
}

// Chosen is the answer picker id got (ok false: none yet).
func (f *Fake) Chosen(id uint64) (paths []string, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	paths, ok = f.chosen[id]
	return paths, ok
}

// DropFiles implements browser.Browser: it records the drop.
func (f *Fake) DropFiles(_ context.Context, _, _ float64, paths []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dropped = append(f.dropped, paths)
	return nil
}

// SetDownloads implements browser.Browser: it records the folder.
func (f *Fake) SetDownloads(_ context.Context, dir string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.downloadDir = dir
	return nil
}

// CancelDownload implements browser.Browser: it records the id.
func (f *Fake) CancelDownload(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cancelled = append(f.cancelled, id)
	return nil
}

// Cancelled is the downloads CancelDownload stopped.
func (f *Fake) Cancelled() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.cancelled...)
}

// OnEditable implements browser.Browser.
func (f *Fake) OnEditable(fn func(bool)) (stop func()) { return f.editable.add(fn) }

// Focus reports a focus move as the page would.
func (f *Fake) Focus(editable bool) { f.editable.send(editable) }

// DownloadDir is the folder SetDownloads set last.
func (f *Fake) DownloadDir() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.downloadDir
}

// Wrap makes b a Fake.
func Wrap(b browser.Browser) *Fake {
	f := &Fake{Browser: b, Frames: make(chan browser.Frame), CastErr: make(chan error), crashed: make(chan struct{})}
	f.prompts = &browser.Prompts{Handle: func(_ context.Context, a browser.PromptAnswer) error {
		f.mu.Lock()
		f.answers = append(f.answers, a)
		f.mu.Unlock()
		f.prompts.Closed(a.Accept) // as Chromium reports it
		return nil
	}}
	return f
}

// OpenDialog opens a dialog as a page's script would.
func (f *Fake) OpenDialog(kind browser.PromptKind, message, def string) {
	f.prompts.Opened(kind, message, def, "http://page.test/")
}

// SetPromptTimeout sets how long a dialog waits (before any opens).
func (f *Fake) SetPromptTimeout(d time.Duration) { f.prompts.Timeout = d }

// Answers returns the answers the page got, in order.
func (f *Fake) Answers() []browser.PromptAnswer {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]browser.PromptAnswer(nil), f.answers...)
}

// OnPrompt implements browser.Browser.
func (f *Fake) OnPrompt(fn func(browser.Prompt)) (stop func()) { return f.prompts.Subscribe(fn) }

// OpenPrompt implements browser.Browser.
func (f *Fake) OpenPrompt() (browser.Prompt, bool) { return f.prompts.Open() }

// AnswerPrompt implements browser.Browser.
func (f *Fake) AnswerPrompt(ctx context.Context, id uint64, a browser.PromptAnswer) error {
	return f.prompts.Answer(ctx, id, a)
}

// Copy puts text on the page's clipboard, as a copy in the page would.
func (f *Fake) Copy(text string) { f.copies.send(text) }

// OnCopy implements browser.Browser.
func (f *Fake) OnCopy(fn func(string)) (stop func()) { return f.copies.add(fn) }

// New is a Fake over a new Null browser.
func New(t testing.TB) *Fake {
	t.Helper()
	nb, err := (&browser.Null{}).NewBrowser(context.Background(), browser.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return Wrap(nb)
}

// Screencast implements browser.Browser.
func (f *Fake) Screencast(ctx context.Context, _ browser.ScreencastOptions, sink func(browser.Frame)) error {
	f.mu.Lock()
	f.casts++
	f.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-f.crashed:
			return browser.ErrCrashed
		case err := <-f.CastErr:
			return err
		case fr := <-f.Frames:
			sink(fr)
		}
	}
}

// Input implements browser.Browser: it records ev, or fails a resize as a
// busy page's would (FailResizes).
func (f *Fake) Input(ctx context.Context, ev browser.InputEvent) error {
	if err := ev.Validate(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if ev.Type == browser.InputResize && f.failResizes > 0 {
		f.failResizes--
		return fmt.Errorf("Emulation.setDeviceMetricsOverride: %w", context.DeadlineExceeded)
	}
	f.inputs = append(f.inputs, ev)
	return nil
}

// SetScroll sets where the page is scrolled, as Evaluate("[scrollX,
// scrollY]") reads it.
func (f *Fake) SetScroll(x, y float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scroll = [2]float64{x, y}
}

// Evaluate implements browser.Browser for the page's scroll; anything
// else goes to the Null browser.
func (f *Fake) Evaluate(ctx context.Context, expr string, out any) error {
	if expr != "[scrollX, scrollY]" {
		return f.Browser.Evaluate(ctx, expr, out)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scrollReads++
	if p, ok := out.(*[2]float64); ok {
		*p = f.scroll
	}
	return nil
}

// Casts counts the screencasts started, and the times Evaluate read the
// scroll.
func (f *Fake) Casts() (started, scrollReads int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.casts, f.scrollReads
}

// FailResizes makes the next n resizes fail.
func (f *Fake) FailResizes(n int) {
	f.mu.Lock()
	f.failResizes = n
	f.mu.Unlock()
}

// Inputs are the input events the browser took, in order.
func (f *Fake) Inputs() []browser.InputEvent {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]browser.InputEvent(nil), f.inputs...)
}

// Resizes are the resizes the browser took, in order ("WxH").
func (f *Fake) Resizes() []string {
	var out []string
	for _, ev := range f.Inputs() {
		if ev.Type == browser.InputResize {
			out = append(out, fmt.Sprintf("%dx%d", ev.Width, ev.Height))
		}
	}
	return out
}

// Keys are the keys of the keydowns the browser took, in order.
func (f *Fake) Keys() string {
	var out string
	for _, ev := range f.Inputs() {
		if ev.Type == browser.InputKeyDown {
			out += ev.Key
		}
	}
	return out
}

// Done implements browser.Browser: closed when the browser crashed.
func (f *Fake) Done() <-chan struct{} { return f.crashed }

// Err implements browser.Browser.
func (f *Fake) Err() error {
	select {
	case <-f.crashed:
		return fmt.Errorf("renderer gone: %w", browser.ErrCrashed)
	default:
		return nil
	}
}

// Crash makes the browser's renderer "crash".
func (f *Fake) Crash() { f.once.Do(func() { close(f.crashed) }) }

// Close implements browser.Browser: a closed browser's screencast ends as
// after a crash.
func (f *Fake) Close(ctx context.Context) error {
	f.Crash()
	return f.Browser.Close(ctx)
}
