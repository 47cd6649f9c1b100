package chromium

import (
	"context"
	"time"

	"github.com/chromedp/cdproto/page"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// dialogs shows the page's dialogs (Page.javascriptDialogOpening) to
// whoever watches and hands back their answer: without an answer a page
// that calls alert() would stop for good, and so would every command that
// needs its renderer.
type dialogs struct {
	b       *cbrowser
	prompts browser.Prompts
}

func (d *dialogs) init(b *cbrowser, timeout time.Duration) {
	d.b = b
	d.prompts.Timeout = timeout
	d.prompts.Log = b.log
	d.prompts.Handle = func(ctx context.Context, a browser.PromptAnswer) error {
		_, err := pageCall(ctx, b, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: a.Accept, PromptText: a.Text})
		return err
	}
}

// OnPrompt implements browser.Browser.
func (d *dialogs) OnPrompt(fn func(browser.Prompt)) (stop func()) { return d.prompts.Subscribe(fn) }

// OpenPrompt implements browser.Browser.
func (d *dialogs) OpenPrompt() (browser.Prompt, bool) { return d.prompts.Open() }

// AnswerPrompt implements browser.Browser.
func (d *dialogs) AnswerPrompt(ctx context.Context, id uint64, a browser.PromptAnswer) error {
	if err := d.b.Err(); err != nil {
		return err
	}
	return d.prompts.Answer(ctx, id, a)
}
