package chromium

import (
	"context"
	"time"

	"github.com/chromedp/cdproto/page"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// initPrompts wires the page's dialogs (Page.javascriptDialogOpening) to
// b.prompts: without this a page that calls alert() would stop for good,
// and so would every command that needs its renderer.
func (b *cbrowser) initPrompts(timeout time.Duration) {
	b.prompts.Timeout = timeout
	b.prompts.Log = b.log
	b.prompts.Handle = func(ctx context.Context, a browser.PromptAnswer) error {
		_, err := pageCall(ctx, b, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: a.Accept, PromptText: a.Text})
		return err
	}
}

// OnPrompt implements browser.Browser.
func (b *cbrowser) OnPrompt(fn func(browser.Prompt)) (stop func()) { return b.prompts.Subscribe(fn) }

// OpenPrompt implements browser.Browser.
func (b *cbrowser) OpenPrompt() (browser.Prompt, bool) { return b.prompts.Open() }

// AnswerPrompt implements browser.Browser.
func (b *cbrowser) AnswerPrompt(ctx context.Context, id uint64, a browser.PromptAnswer) error {
	if err := b.Err(); err != nil {
		return err
	}
	return b.prompts.Answer(ctx, id, a)
}
