package chromium

import (
	"context"
	"fmt"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/page"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium/cdpinput"
)

// Input implements browser.Browser.
func (b *cbrowser) Input(ctx context.Context, ev browser.InputEvent) error {
	if err := ev.Validate(); err != nil {
		return err
	}
	cctx, cancel, err := b.call(ctx)
	if err != nil {
		return err
	}
	defer cancel()
	if err := b.input(cctx, ev); err != nil {
		return b.fail(string(ev.Type), err)
	}
	return nil
}

func (b *cbrowser) input(ctx context.Context, ev browser.InputEvent) error {
	switch ev.Type {
	case browser.InputMouseMove, browser.InputMouseDown, browser.InputMouseUp:
		_, err := pageCall(ctx, b, input.DispatchMouseEvent, cdpinput.Mouse(ev, b.toPage(ctx)))
		return err
	case browser.InputWheel:
		params := cdpinput.Wheel(ev, b.toPage(ctx))
		return retrySwap(ctx, func() error { return b.t.Call(ctx, input.CommandDispatchMouseEvent, params, nil) })
	case browser.InputKeyDown, browser.InputKeyUp, browser.InputRawKeyDown, browser.InputChar:
		_, err := pageCall(ctx, b, input.DispatchKeyEvent, cdpinput.Key(ev))
		return err
	case browser.InputInsertText:
		_, err := pageCall(ctx, b, input.InsertText, input.InsertTextParams{Text: ev.Text})
		return err
	case browser.InputCompose:
		_, err := pageCall(ctx, b, input.ImeSetComposition, cdpinput.Compose(ev.Text))
		return err
	case browser.InputTouch:
		return b.touch(ctx, ev)
	case browser.InputResize:
		return b.resize(ctx, ev.Width, ev.Height, ev.Scale, ev.Mobile)
	case browser.InputBack:
		return b.history(ctx, -1)
	case browser.InputForward:
		return b.history(ctx, +1)
	case browser.InputReload:
		_, err := pageCall(ctx, b, page.Reload, page.ReloadParams{})
		return err
	case browser.InputNavigate:
		return b.navigate(ctx, ev.URL)
	}
	return fmt.Errorf("%w: unhandled type %q", browser.ErrInvalidInput, ev.Type)
}
