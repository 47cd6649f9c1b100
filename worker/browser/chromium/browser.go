package chromium

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chromedp/cdproto"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/css"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/cdproto/inspector"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium/pagescript"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium/policy"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium/sitedata"
)

// commitTimeout bounds the wait for a navigation to commit when the caller
// gave no deadline.
const commitTimeout = 2 * time.Minute

// cbrowser is one virtual browser: a browser context with one page target.
type cbrowser struct {
	rt  *Runtime
	p   *process
	log zerolog.Logger

	// ctx is the chromedp context of the page; it ends on release or when
	// the process dies. t and bc are its page and browser sessions.
	ctx       context.Context
	cancel    context.CancelFunc
	t         *chromedp.Target
	bc        *chromedp.Browser
	contextID cdp.BrowserContextID
	// egress is Options.Egress; the browser closes it on release once it
	// owns it (created successfully; NewBrowser closes it otherwise).
	egress     browser.Egress
	ownsEgress atomic.Bool

	done        chan struct{}
	doneOnce    sync.Once
	releaseOnce sync.Once
	crashed     chan struct{} // closed by the event listener
	crashOnce   sync.Once
	wake        chan struct{} // page changed (cap 1)

	pageBindings // the page's calls to the worker (bindings.go)

	mu        sync.Mutex
	err       error
	page      browser.Page
	pageVer   uint64
	mainFrame cdp.FrameID
	// titles of the last top documents, for pages restored from the
	// back-forward cache (off by default): those are no new documents, so
	// the title script does not report them again.
	titles        titleBook
	loader        cdp.LoaderID // of the top document
	navs          map[*navWatch]struct{}
	subs          map[int]func(browser.Page)
	nextSub       int
	width, height int

	// lw follows the Load in progress (nil otherwise); loadMu lets one
	// Load run at a time.
	lw     *loadWatch
	loadMu sync.Mutex

	rester       // hides the page while nobody watches (rest.go)
	screen       // the device it is shown on and touched (viewport.go)
	screencaster // streams its frames (screencast.go)
	gcWatch      // collects its renderer's garbage (gc.go)
	// resized tells a screencast the viewport changed (cap 1): it follows
	// the resize up until a frame of the new size comes (screencast.go).
	resized chan struct{}

	navPolicy // applies Options.Allow (navpolicy.go)
	released  atomic.Bool

	dialogs   // the page's open dialog and who watches it (prompt.go)
	copyWatch // what the page copies (clipboard.go)
	desk      // print, focus (desk.go)

	fileTransfers               // its file pickers, dropped files and downloads (files.go)
	origins       sitedata.Book // its documents' origins since the last Reset (reset.go)
}

type docTitle struct {
	loader cdp.LoaderID
	title  string
}

// maxTitles bounds cbrowser.titles: the back-forward cache holds 6 pages.
const maxTitles = 8

var _ browser.Browser = (*cbrowser)(nil)

// newBrowser creates a browser on p.
func (r *Runtime) newBrowser(ctx context.Context, p *process, opts browser.Options) (*cbrowser, error) {
	r.mu.Lock()
	r.nextID++
	id := r.nextID
	r.mu.Unlock()
	b := &cbrowser{
		rt:      r,
		p:       p,
		log:     r.log.With().Int("slot", p.slot.idx).Uint64("browser", id).Logger(),
		done:    make(chan struct{}),
		crashed: make(chan struct{}),
		wake:    make(chan struct{}, 1),
		resized: make(chan struct{}, 1),
		page:    browser.Page{URL: "about:blank"},
		subs:    map[int]func(browser.Page){},
		navs:    map[*navWatch]struct{}{},
		width:   opts.Width,
		height:  opts.Height,

		egress: opts.Egress,
	}
	b.pageBindings = pageBindings{b: b, bindings: maps.Clone(opts.Bindings), callWake: make(chan struct{}, 1)}
	b.rester.b, b.screen.b, b.screencaster.b, b.navPolicy.b, b.gcWatch = b, b, b, b, gcWatch{b: b, wake: make(chan struct{}, 1)}
	b.dialogs.init(b, opts.PromptTimeout)
	for name, fn := range b.bindings {
		if !pagescript.BindingName(name) || fn == nil {
			return nil, fmt.Errorf("chromium: new browser: bad binding %q", name)
		}
	}
	// The page's context hangs off the process's root context, so the
	// page goes when Chromium goes.
	b.ctx, b.cancel = chromedp.NewContext(p.rootCtx,
		chromedp.WithNewBrowserContext(func(cp *target.CreateBrowserContextParams) {
			if opts.Egress != nil {
				// Every request through the guard; "<-loopback>" removes
				// Chromium's implicit direct route to loopback.
				cp.ProxyServer = opts.Egress.ProxyURL()
				cp.ProxyBypassList = "<-loopback>"
			}
		}),
		chromedp.WithListener(b.onEvent),
	)
	r.mu.Lock()
	switch {
	case r.closed:
		r.mu.Unlock()
		b.cancel()
		return nil, browser.ErrClosed
	case p.dead:
		r.mu.Unlock()
		b.cancel()
		return nil, fmt.Errorf("chromium: new browser: process %d died: %w", p.pid, browser.ErrCrashed)
	}
	// Registered before the target exists, so a crash meanwhile fails it.
	p.browsers[b] = struct{}{}
	r.mu.Unlock()

	t0 := time.Now()
	detached, err := b.setup(ctx, opts)
	if err == nil {
		r.mu.Lock()
		if r.closed {
			err = browser.ErrClosed
		} else if b.Err() == nil {
			r.wg.Add(1)
			go b.loop(detached)
			if minGarbage := r.minGarbageDocs(); minGarbage > 0 {
				r.wg.Add(1)
				go b.gcLoop(minGarbage)
			}
			if len(b.bindings) > 0 {
				b.mu.Lock()
				b.callLoopOn = true
				b.mu.Unlock()
				r.wg.Add(1)
				go b.callLoop()
			}
		}
		r.mu.Unlock()
	}
	if err != nil && b.ctx.Err() != nil {
		// The page's context ended under us: Chromium died or the runtime
		// is closing. The supervisor's verdict follows in a moment.
		select {
		case <-b.done:
		case <-time.After(2 * time.Second):
		}
	}
	if cause := b.Err(); cause != nil {
		err = cause // crashed or closed meanwhile: that is the real reason
	}
	if err != nil {
		b.finish(err)
		return nil, fmt.Errorf("chromium: new browser: %w", err)
	}
	b.ownsEgress.Store(true)
	if b.egress != nil && b.released.Load() {
		_ = b.egress.Close() // released before it owned the exit (Close is idempotent)
	}
	b.log.Debug().Dur("took", time.Since(t0)).Str("url", opts.URL).Msg("browser created")
	return b, nil
}

// setup creates the browser context and page, and prepares the page. ctx
// bounds the creation; the page itself lives on b.ctx.
func (b *cbrowser) setup(ctx context.Context, opts browser.Options) (<-chan struct{}, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// The first run on b.ctx creates the browser context and the page and
	// binds the page to b.ctx, so it must get b.ctx itself. It is not
	// interrupted: chromedp cannot dispose a browser context whose page
	// it had not attached yet.
	if err := chromedp.Do(b.ctx); err != nil {
		if c := chromedp.FromContext(b.ctx); c.Target == nil && c.BrowserContextID != "" {
			dctx, cancel := context.WithTimeout(b.p.rootCtx, 5*time.Second)
			_, _ = cdp.Call(dctx, b.p.browser, target.DisposeBrowserContext, target.DisposeBrowserContextParams{BrowserContextID: c.BrowserContextID})
			cancel()
		}
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(b.ctx, cancel)
	defer stop()
	c := chromedp.FromContext(b.ctx)
	b.t, b.bc, b.contextID = c.Target, c.Browser, c.BrowserContextID
	b.mu.Lock()
	b.mainFrame = cdp.FrameID(b.t.TargetID) // a page's main frame has its target's id
	b.mu.Unlock()
	detached, err := chromedp.Detached(b.ctx)
	if err != nil {
		return nil, err
	}
	if opts.Allow != nil {
		// Before anything loads (the page is blank so far).
		f, err := b.newFilter(ctx, opts.Allow)
		if err != nil {
			return nil, err
		}
		b.filter.Store(f)
		if b.released.Load() {
			f.Close() // released meanwhile, maybe before seeing f
		}
	}
	// chromedp enables these for its DOM queries, which we do not use;
	// they would stream every request, node and stylesheet of the page.
	for _, method := range []string{network.CommandDisable, dom.CommandDisable, css.CommandDisable, cdplog.CommandDisable} {
		if err := b.t.Call(ctx, method, nil, nil); err != nil {
			return nil, fmt.Errorf("%s: %w", method, err)
		}
	}
	if _, err := pageCall(ctx, b, runtime.AddBinding, runtime.AddBindingParams{Name: pagescript.TitleBinding}); err != nil {
		return nil, fmt.Errorf("title binding: %w", err)
	}
	if _, err := pageCall(ctx, b, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: pagescript.Title}); err != nil {
		return nil, fmt.Errorf("title script: %w", err)
	}
	if _, err := pageCall(ctx, b, runtime.AddBinding, runtime.AddBindingParams{Name: pagescript.CopyBinding}); err != nil {
		return nil, fmt.Errorf("copy binding: %w", err)
	}
	if _, err := pageCall(ctx, b, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: pagescript.Copy}); err != nil {
		return nil, fmt.Errorf("copy script: %w", err)
	}
	if err := b.setupDesk(ctx); err != nil {
		return nil, err
	}
	if _, err := pageCall(ctx, b, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
		Source: pagescript.SteadyCaret, WorldName: pagescript.SteadyCaretWorld, RunImmediately: new(true),
	}); err != nil {
		return nil, fmt.Errorf("steady caret: %w", err)
	}
	for name := range b.bindings {
		if _, err := pageCall(ctx, b, runtime.AddBinding, runtime.AddBindingParams{Name: name}); err != nil {
			return nil, fmt.Errorf("binding %s: %w", name, err)
		}
	}
	if opts.Script != "" {
		if _, err := pageCall(ctx, b, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
			Source: opts.Script, RunImmediately: new(true),
		}); err != nil {
			return nil, fmt.Errorf("script: %w", err)
		}
	}
	if err := b.setupFiles(ctx, b); err != nil {
		return nil, err
	}
	b.origins.Listen(b.ctx, b.contextID)
	if err := setupAuth(ctx, b); err != nil {
		return nil, fmt.Errorf("sign-ins: %w", err)
	}
	if err := b.resize(ctx, opts.Width, opts.Height, 0, false); err != nil {
		return nil, err
	}
	if opts.URL != "" && opts.URL != "about:blank" {
		if err := b.navigate(ctx, opts.URL); err != nil {
			return nil, err
		}
	}
	return detached, nil
}

// onEvent sees every event of the page, in order, on chromedp's reader
// goroutine: it must only record and signal, never call back into CDP.
func (b *cbrowser) onEvent(ev any) {
	b.fileEvent(ev)
	b.origins.SeePage(ev)
	b.signIns.authEvent(ev)
	if c, ok := ev.(*runtime.EventBindingCalled); ok && c.Name == pagescript.CopyBinding {
		b.copied(c.Payload) // b.mu not held: the watchers may take theirs
		return
	}
	if c, ok := ev.(*runtime.EventBindingCalled); ok && c.Name == pagescript.DeskBinding {
		b.deskCall(c.Payload)
		return
	}
	b.mu.Lock()
	old := b.page
	if b.lw != nil {
		b.lw.see(ev, b.mainFrame)
	}
	switch ev := ev.(type) {
	case *page.EventFrameNavigated:
		if ev.Frame.ParentID == "" {
			// A new document, whose title comes from the title script,
			// or one restored from the back-forward cache, which the
			// script does not report again.
			b.mainFrame = ev.Frame.ID
			b.page = browser.Page{URL: ev.Frame.URL + ev.Frame.URLFragment}
			b.loader = ev.Frame.LoaderID
			if ev.Type == page.NavigationTypeBackForwardCacheRestore {
				b.page.Title = b.titles.get(b.loader)
			}
			for w := range b.navs {
				w.committed = append(w.committed, ev.Frame.LoaderID)
				if w.want == ev.Frame.LoaderID {
					w.finish()
				}
			}
		}
	case *page.EventNavigatedWithinDocument:
		if ev.FrameID == b.mainFrame {
			b.page.URL = ev.URL
			b.loaded()
		}
	case *page.EventLoadEventFired: // of the top document
		b.loaded()
	case *runtime.EventBindingCalled:
		if ev.Name == pagescript.TitleBinding {
			b.page.Title = ev.Payload
			b.titles.set(b.loader, ev.Payload)
		} else {
			b.queue(ev.Name, ev.Payload)
		}
	case *page.EventJavascriptDialogOpening:
		b.prompts.Opened(browser.PromptKind(ev.Type), ev.Message, ev.DefaultPrompt, ev.URL)
	case *page.EventJavascriptDialogClosed:
		b.prompts.Closed(ev.Result)
	case *inspector.EventTargetCrashed:
		b.crashOnce.Do(func() { close(b.crashed) })
	}
	changed := b.page != old
	if changed {
		b.pageVer++
	}
	b.mu.Unlock()
	if changed {
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
}

// titleBook holds the titles of the last top documents.
type titleBook []docTitle

// set remembers the title of the document loader loaded.
func (t *titleBook) set(loader cdp.LoaderID, title string) {
	if i := slices.IndexFunc(*t, func(d docTitle) bool { return d.loader == loader }); i >= 0 {
		*t = slices.Delete(*t, i, i+1)
	}
	*t = append(*t, docTitle{loader, title})
	if len(*t) > maxTitles {
		*t = slices.Delete(*t, 0, len(*t)-maxTitles)
	}
}

// get is the last title of the document loader loaded.
func (t titleBook) get(loader cdp.LoaderID) string {
	if i := slices.IndexFunc(t, func(d docTitle) bool { return d.loader == loader }); i >= 0 {
		return t[i].title
	}
	return ""
}

// navWatch follows one navigation until its document commits. (One that
// never commits, like a 204 or a download, fails or says so in
// Page.navigate's answer.) Its fields are guarded by cbrowser.mu and
// written by onEvent.
type navWatch struct {
	committed []cdp.LoaderID // main-frame commits seen since the watch began
	want      cdp.LoaderID   // set once Page.navigate answered
	done      chan struct{}
	closed    bool
}

func (w *navWatch) finish() {
	if !w.closed {
		w.closed = true
		close(w.done)
	}
}

// loop delivers page changes and ends the browser when its renderer
// crashes or its page goes away. It runs until the browser is done.
func (b *cbrowser) loop(detached <-chan struct{}) {
	defer b.rt.wg.Done()
	var delivered uint64
	for {
		select {
		case <-b.done:
			return
		case <-b.crashed:
			b.log.Warn().Msg("renderer crashed")
			b.finish(fmt.Errorf("renderer crashed: %w", browser.ErrCrashed))
			return
		case <-detached:
			b.finish(fmt.Errorf("page target went away: %w", browser.ErrClosed))
			return
		case <-b.wake:
			b.mu.Lock()
			p, ver := b.page, b.pageVer
			fns := make([]func(browser.Page), 0, len(b.subs))
			for _, fn := range b.subs {
				fns = append(fns, fn)
			}
			b.mu.Unlock()
			if ver == delivered {
				continue
			}
			delivered = ver
			for _, fn := range fns {
				if b.isDone() {
					return
				}
				fn(p)
			}
		}
	}
}

// markDone ends the browser with err (first caller wins) and takes it out
// of the runtime's books.
func (b *cbrowser) markDone(err error) {
	b.doneOnce.Do(func() {
		b.mu.Lock()
		b.err = err
		b.mu.Unlock()
		close(b.done)
		b.rt.mu.Lock()
		delete(b.p.browsers, b)
		b.rt.mu.Unlock()
	})
}

// release closes the page and disposes the browser context. It blocks
// until Chromium confirms (quick when the process is gone).
func (b *cbrowser) release() {
	b.releaseOnce.Do(func() {
		b.released.Store(true)
		b.cancel()
		if f := b.filter.Load(); f != nil {
			f.Close()
		}
		if b.egress != nil && b.ownsEgress.Load() {
			_ = b.egress.Close()
		}
	})
}

// Egress implements browser.Browser.
func (b *cbrowser) Egress() browser.Egress { return b.egress }

func (b *cbrowser) finish(err error) {
	b.markDone(err)
	b.endDialogs()
	b.release()
}

func (b *cbrowser) isDone() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// Page implements browser.Browser.
func (b *cbrowser) Page() browser.Page {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.page
}

// OnPageChange implements browser.Browser.
func (b *cbrowser) OnPageChange(fn func(browser.Page)) (stop func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	id := b.nextSub
	b.nextSub++
	b.subs[id] = fn
	return func() {
		b.mu.Lock()
		delete(b.subs, id)
		b.mu.Unlock()
	}
}

// Done implements browser.Browser.
func (b *cbrowser) Done() <-chan struct{} { return b.done }

// Err implements browser.Browser.
func (b *cbrowser) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// Close implements browser.Browser. The page is closed and the browser
// context disposed even if ctx ends first.
func (b *cbrowser) Close(ctx context.Context) error {
	done := make(chan struct{})
	b.rt.track(func() {
		b.finish(browser.ErrClosed)
		close(done)
	})
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pageCall runs a command on the page. See retrySwap.
func pageCall[P, R any](ctx context.Context, b *cbrowser, cmd cdp.Command[P, R], params P) (R, error) {
	var res R
	err := retrySwap(ctx, func() error {
		var err error
		res, err = cdp.Call(ctx, b.t, cmd, params)
		return err
	})
	return res, err
}

// retrySwap retries fn while the page is between two renderers: for a few
// milliseconds around a cross-process navigation's commit Chromium rejects
// page commands with this error before doing anything, so a retry is safe.
func retrySwap(ctx context.Context, fn func() error) error {
	const retryFor = 3 * time.Second
	deadline := time.Now().Add(retryFor)
	delay := 2 * time.Millisecond
	for {
		err := fn()
		var cerr *cdproto.Error
		if err == nil || !errors.As(err, &cerr) || cerr.Message != "Not attached to an active page" || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// call returns a context for one CDP command: it ends with ctx or when the
// browser's page goes away, so no command outlives the browser.
func (b *cbrowser) call(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if b.isDone() {
		return nil, nil, b.Err()
	}
	cctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(b.ctx, cancel)
	return cctx, func() { stop(); cancel() }, nil
}

// fail turns an error of a command into the browser's error if the browser
// ended meanwhile (closed, crashed), else wraps it.
func (b *cbrowser) fail(op string, err error) error {
	if b.ctx.Err() != nil {
		// The page's context ends a moment before the supervisor marks a
		// dead process's browsers; wait for the verdict.
		select {
		case <-b.done:
			err = b.Err()
		case <-time.After(2 * time.Second):
			err = browser.ErrClosed
		}
	}
	return fmt.Errorf("chromium: %s: %w", op, err)
}

// Navigate implements browser.Browser.
func (b *cbrowser) Navigate(ctx context.Context, url string) error {
	cctx, cancel, err := b.call(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if err := b.navigate(cctx, url); err != nil {
		return b.fail("navigate", err)
	}
	return nil
}

// navigate loads url and waits until the new document commits, so Page
// is current when it returns. Page.navigate itself answers earlier.
func (b *cbrowser) navigate(ctx context.Context, url string) error {
	if f := b.filter.Load(); f != nil && !f.Check(url) {
		b.log.Debug().Str("url", policy.ShortURL(url)).Msg("navigation refused")
		return fmt.Errorf("%s: %w", policy.ShortURL(url), browser.ErrBlocked)
	}
	// Watch before asking: a fast commit may beat the answer.
	w := &navWatch{done: make(chan struct{})}
	b.mu.Lock()
	b.navs[w] = struct{}{}
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		delete(b.navs, w)
		b.mu.Unlock()
	}()
	res, err := pageCall(ctx, b, page.Navigate, page.NavigateParams{URL: url})
	if err != nil {
		return err
	}
	if res.ErrorText != "" {
		if b.filter.Load() != nil && policy.IsBlockedError(res.ErrorText) {
			// The document or a redirect of it was denied.
			return fmt.Errorf("%s: %s: %w", policy.ShortURL(url), res.ErrorText, browser.ErrBlocked)
		}
		return &navFailed{url: url, text: res.ErrorText}
	}
	if res.LoaderID == "" || res.IsDownload {
		return nil // same-document navigation, or no document at all
	}
	b.mu.Lock()
	if slices.Contains(w.committed, res.LoaderID) {
		b.mu.Unlock()
		return nil
	}
	w.want = res.LoaderID
	b.mu.Unlock()
	// A navigation superseded before it commits (a script navigating
	// again) never commits; without a deadline that must not hang.
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, commitTimeout)
		defer cancel()
	}
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: waiting for the page to commit: %w", url, ctx.Err())
	}
}

// Evaluate implements browser.Browser.
func (b *cbrowser) Evaluate(ctx context.Context, expr string, out any) error {
	cctx, cancel, err := b.call(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	res, err := pageCall(cctx, b, runtime.Evaluate, runtime.EvaluateParams{
		Expression:    expr,
		ReturnByValue: new(true),
		AwaitPromise:  new(true),
	})
	if err != nil {
		return b.fail("evaluate", err)
	}
	if d := res.ExceptionDetails; d != nil {
		msg := d.Text
		if d.Exception != nil && d.Exception.Description != "" {
			msg = d.Exception.Description
		}
		return fmt.Errorf("chromium: evaluate: %s (line %d)", msg, d.LineNumber+1)
	}
	if out == nil || res.Result == nil || len(res.Result.Value) == 0 {
		return nil
	}
	if err := json.Unmarshal(res.Result.Value, out); err != nil {
		return fmt.Errorf("chromium: evaluate: decoding result: %w", err)
	}
	return nil
}

// history moves delta entries back (-1) or forward (+1); at the end of the
// history it does nothing, like a browser's button.
func (b *cbrowser) history(ctx context.Context, delta int) error {
	h, err := pageCall(ctx, b, page.GetNavigationHistory, cdp.Empty{})
	if err != nil {
		return err
	}
	i := int(h.CurrentIndex) + delta
	if i < 0 || i >= len(h.Entries) {
		return nil
	}
	_, err = pageCall(ctx, b, page.NavigateToHistoryEntry, page.NavigateToHistoryEntryParams{EntryID: h.Entries[i].ID})
	return err
}
