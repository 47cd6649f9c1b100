package chromium

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/chromedp/cdproto/page"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// dialogs shows the page's dialogs (Page.javascriptDialogOpening), its
// sites' sign-in challenges (auth.go) and its permission requests
// (desk.go) to whoever watches and hands back
// their answer: without an answer a page that calls alert() would stop for
// good, and so would every command that needs its renderer.
type dialogs struct {
	b       *cbrowser
	prompts browser.Prompts
	signIns signIns
	perms   permAsks
	ids     atomic.Uint64 // numbers both kinds
}

func (d *dialogs) init(b *cbrowser, timeout time.Duration) {
	d.b = b
	d.prompts.Timeout = timeout
	d.prompts.Log = b.log
	d.prompts.IDs = &d.ids
	d.prompts.Handle = func(ctx context.Context, a browser.PromptAnswer) error {
		_, err := pageCall(ctx, b, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: a.Accept, PromptText: a.Text})
		return err
	}
	d.signIns.init(b, timeout, &d.ids)
	d.perms.b = b
	d.perms.prompts = browser.Prompts{Timeout: timeout, Log: b.log, IDs: &d.ids, Handle: d.perms.answer}
}

// OnPrompt implements browser.Browser.
func (d *dialogs) OnPrompt(fn func(browser.Prompt)) (stop func()) {
	stop1, stop2, stop3 := d.prompts.Subscribe(fn), d.signIns.prompts.Subscribe(fn), d.perms.prompts.Subscribe(fn)
	return func() { stop1(); stop2(); stop3() }
}

// OpenPrompt implements browser.Browser: a JavaScript dialog first (it
// stops the page's scripts), else a sign-in, else a permission request.
func (d *dialogs) OpenPrompt() (browser.Prompt, bool) {
	if p, ok := d.prompts.Open(); ok {
		return p, true
	}
	if p, ok := d.signIns.prompts.Open(); ok {
		return p, true
	}
	return d.perms.prompts.Open()
}

// AnswerPrompt implements browser.Browser.
func (d *dialogs) AnswerPrompt(ctx context.Context, id uint64, a browser.PromptAnswer) error {
	if err := d.b.Err(); err != nil {
		return err
	}
	if p, ok := d.signIns.prompts.Open(); ok && p.ID == id {
		return d.signIns.prompts.Answer(ctx, id, a)
	}
	if p, ok := d.perms.prompts.Open(); ok && p.ID == id {
		return d.perms.prompts.Answer(ctx, id, a)
	}
	return d.prompts.Answer(ctx, id, a)
}

// endDialogs ends both kinds: the browser is gone.
func (d *dialogs) endDialogs() {
	d.prompts.End()
	d.signIns.prompts.End()
	d.perms.prompts.End()
}
