package seqrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// fakeEl is an element of the fake page.
type fakeEl struct {
	hidden      bool
	hiddenPolls int // reported hidden for the first n checks
	x, y        float64
	covered     string
	disabled    bool
	value       string
	onClick     func(b *fakeBrowser) // runs on mouseup over the element
}

// fakeBrowser models just enough of a page for the runner: elements by
// selector, focus, the reload marker, cookies and recorded input.
type fakeBrowser struct {
	mu        sync.Mutex
	page      browser.Page
	els       map[string]*fakeEl
	focused   string
	events    []browser.InputEvent
	evals     []string
	cookies   []browser.Cookie
	marker    bool
	reloads   int
	navErr    error
	navigates []string
	done      chan struct{}
}

func newFake(url string, els map[string]*fakeEl) *fakeBrowser {
	if els == nil {
		els = map[string]*fakeEl{}
	}
	return &fakeBrowser{page: browser.Page{URL: url}, els: els, done: make(chan struct{})}
}

func (b *fakeBrowser) Page() browser.Page {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.page
}

func (b *fakeBrowser) OnPageChange(func(browser.Page)) func() { return func() {} }

func (b *fakeBrowser) Blocked() uint64 { return 0 }

func (b *fakeBrowser) Install(context.Context, string, map[string]func(string)) error { return nil }

func (b *fakeBrowser) SetPolicy(context.Context, func(string) bool) error { return nil }
func (b *fakeBrowser) Egress() browser.Egress                             { return nil }

func (b *fakeBrowser) Load(ctx context.Context, url string, _ browser.LoadOptions) (browser.LoadResult, error) {
	if err := b.Navigate(ctx, url); err != nil {
		return browser.LoadResult{}, err
	}
	return browser.LoadResult{Status: 200, FinalURL: url}, nil
}

func (b *fakeBrowser) Capture(context.Context, browser.CaptureOptions) ([]byte, error) {
	return nil, errors.ErrUnsupported
}

func (b *fakeBrowser) Navigate(ctx context.Context, url string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.navigates = append(b.navigates, url)
	if b.navErr != nil {
		return b.navErr
	}
	b.page.URL = url
	return nil
}

func (b *fakeBrowser) Screencast(context.Context, browser.ScreencastOptions, func(browser.Frame)) error {
	return errors.New("fake: no screencast")
}

func (b *fakeBrowser) Input(ctx context.Context, ev browser.InputEvent) error {
	if err := ev.Validate(); err != nil {
		return err
	}
	b.mu.Lock()
	b.events = append(b.events, ev)
	var after func(*fakeBrowser)
	switch ev.Type {
	case browser.InputInsertText:
		if el := b.els[b.focused]; el != nil {
			el.value = ev.Text
		}
	case browser.InputKeyDown:
		if ev.Key == "Delete" {
			if el := b.els[b.focused]; el != nil {
				el.value = ""
			}
		}
	case browser.InputReload:
		b.marker = false
		b.reloads++
	case browser.InputMouseUp:
		for _, el := range b.els {
			if el.x == ev.X && el.y == ev.Y && el.onClick != nil {
				after = el.onClick
			}
		}
	}
	b.mu.Unlock()
	if after != nil {
		after(b)
	}
	return nil
}

func (b *fakeBrowser) Evaluate(ctx context.Context, expr string, out any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.evals = append(b.evals, expr)
	var res any
	switch {
	case strings.HasPrefix(expr, locateJS+"("):
		var args []string
		if err := json.Unmarshal([]byte("["+strings.TrimSuffix(strings.TrimPrefix(expr, locateJS+"("), ")")+"]"), &args); err != nil {
			return fmt.Errorf("fake: bad locate args: %w", err)
		}
		res = b.locate(args[0], args[1])
	case expr == "window.__cbSeqReload = true":
		b.marker = true
	case strings.HasPrefix(expr, "window.__cbSeqReload === undefined && "):
		res = !b.marker
	case expr == `document.readyState !== "loading"`:
		res = true
	case strings.Contains(expr, "throw"):
		return errors.New("fake: evaluate: Error: thrown")
	}
	if out != nil && res != nil {
		raw, _ := json.Marshal(res)
		return json.Unmarshal(raw, out)
	}
	return nil
}

func (b *fakeBrowser) locate(sel, act string) locateResult {
	if strings.HasPrefix(sel, "!!") {
		return locateResult{State: "invalid", Detail: "'" + sel + "' is not a valid selector"}
	}
	el := b.els[sel]
	if el == nil {
		return locateResult{State: "missing"}
	}
	if el.hiddenPolls > 0 {
		el.hiddenPolls--
		return locateResult{State: "hidden"}
	}
	if el.hidden {
		return locateResult{State: "hidden"}
	}
	switch act {
	case "focus":
		if el.disabled {
			return locateResult{State: "disabled"}
		}
		b.focused = sel
	case "click":
		if el.covered != "" {
			return locateResult{State: "covered", Detail: el.covered}
		}
		return locateResult{State: "ok", X: el.x, Y: el.y}
	}
	return locateResult{State: "ok"}
}

func (b *fakeBrowser) Cookies(context.Context) ([]browser.Cookie, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]browser.Cookie(nil), b.cookies...), nil
}

func (b *fakeBrowser) SetCookies(ctx context.Context, cs []browser.Cookie) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.cookies = append(b.cookies, cs...)
	return nil
}

func (b *fakeBrowser) SetResting(context.Context, bool) error { return nil }

func (b *fakeBrowser) Done() <-chan struct{} { return b.done }
func (b *fakeBrowser) Err() error            { return nil }
func (b *fakeBrowser) Close(context.Context) error {
	select {
	case <-b.done:
	default:
		close(b.done)
	}
	return nil
}

var _ browser.Browser = (*fakeBrowser)(nil)

func (b *fakeBrowser) OnPrompt(func(browser.Prompt)) func() { return func() {} }

func (b *fakeBrowser) OpenPrompt() (browser.Prompt, bool) { return browser.Prompt{}, false }

func (b *fakeBrowser) OnCopy(func(string)) func() { return func() {} }

func (b *fakeBrowser) OnFileChooser(func(browser.FileChooser)) func() { return func() {} }
func (b *fakeBrowser) OnDownload(func(browser.Download)) func()       { return func() {} }
func (b *fakeBrowser) ChooseFiles(context.Context, uint64, []string) error {
	return browser.ErrNoChooser
}
func (b *fakeBrowser) DropFiles(context.Context, float64, float64, []string) error { return nil }
func (b *fakeBrowser) SetDownloads(context.Context, string) error                  { return nil }
func (b *fakeBrowser) CancelDownload(context.Context, string) error                { return browser.ErrNoDownload }
func (b *fakeBrowser) OnEditable(func(bool)) func()                                { return func() {} }

func (b *fakeBrowser) AnswerPrompt(context.Context, uint64, browser.PromptAnswer) error {
	return browser.ErrNoPrompt
}
