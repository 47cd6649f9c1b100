package chromium

import (
	"context"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp/kb"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// keysByName maps DOM key names ("Enter", "ArrowLeft", "a") to their codes,
// so clients may send just the key.
var keysByName = func() map[string]*kb.Key {
	// Several keys share a name ("1" is Digit1 and Numpad1): prefer the
	// main keyboard, then the shortest code, so the pick is deterministic.
	rank := func(k *kb.Key) string {
		if strings.HasPrefix(k.Code, "Numpad") {
			return "1" + k.Code
		}
		return fmt.Sprintf("0%03d%s", len(k.Code), k.Code)
	}
	m := make(map[string]*kb.Key, len(kb.Keys))
	for _, k := range kb.Keys {
		if old, ok := m[k.Key]; !ok || rank(k) < rank(old) {
			m[k.Key] = k
		}
	}
	return m
}()

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
		_, err := pageCall(ctx, b, input.DispatchMouseEvent, mouseParams(ev))
		return err
	case browser.InputWheel:
		// cdproto omits a zero deltaX and Chromium rejects a wheel event
		// without both deltas, so this one goes out as raw params.
		params := map[string]any{
			"type":      input.DispatchMouseEventTypeMouseWheel,
			"x":         ev.X,
			"y":         ev.Y,
			"deltaX":    ev.DeltaX,
			"deltaY":    ev.DeltaY,
			"modifiers": int64(ev.Modifiers),
		}
		return retrySwap(ctx, func() error { return b.t.Call(ctx, input.CommandDispatchMouseEvent, params, nil) })
	case browser.InputKeyDown, browser.InputKeyUp, browser.InputRawKeyDown, browser.InputChar:
		_, err := pageCall(ctx, b, input.DispatchKeyEvent, keyParams(ev))
		return err
	case browser.InputInsertText:
		_, err := pageCall(ctx, b, input.InsertText, input.InsertTextParams{Text: ev.Text})
		return err
	case browser.InputResize:
		return b.resize(ctx, ev.Width, ev.Height)
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

// buttonBits are the DOM MouseEvent.buttons bits.
var buttonBits = map[browser.MouseButton]int{
	browser.ButtonLeft: 1, browser.ButtonRight: 2, browser.ButtonMiddle: 4,
	browser.ButtonBack: 8, browser.ButtonForward: 16,
}

func mouseParams(ev browser.InputEvent) input.DispatchMouseEventParams {
	p := input.DispatchMouseEventParams{
		X: ev.X, Y: ev.Y,
		Modifiers: int64(ev.Modifiers),
		Buttons:   int64(ev.Buttons),
		Button:    input.MouseButton(ev.Button),
	}
	switch ev.Type {
	case browser.InputMouseMove:
		p.Type = input.DispatchMouseEventTypeMouseMoved
		if p.Button == "" {
			// During a drag Chromium wants the held button too.
			p.Button = input.MouseButtonNone
			for _, btn := range []browser.MouseButton{browser.ButtonLeft, browser.ButtonRight, browser.ButtonMiddle, browser.ButtonBack, browser.ButtonForward} {
				if ev.Buttons&buttonBits[btn] != 0 {
					p.Button = input.MouseButton(btn)
					break
				}
			}
		}
	case browser.InputMouseDown, browser.InputMouseUp:
		p.Type = input.DispatchMouseEventTypeMousePressed
		if ev.Type == browser.InputMouseUp {
			p.Type = input.DispatchMouseEventTypeMouseReleased
		}
		if p.Button == "" {
			p.Button = input.MouseButtonLeft
		}
		p.ClickCount = max(1, int64(ev.ClickCount))
		if ev.Type == browser.InputMouseDown {
			p.Buttons |= int64(buttonBits[browser.MouseButton(p.Button)])
		}
	}
	return p
}

// keyParams fills in what clients may leave out: code and key codes of
// known keys, and the text a plain printable key or Enter produces.
// Chromium only runs a key's default action (typing, Backspace, caret
// moves, Tab focus) when it gets the Windows key code.
func keyParams(ev browser.InputEvent) input.DispatchKeyEventParams {
	p := input.DispatchKeyEventParams{
		Key:                   ev.Key,
		Code:                  ev.Code,
		Text:                  ev.Text,
		WindowsVirtualKeyCode: int64(ev.KeyCode),
		Modifiers:             int64(ev.Modifiers),
	}
	if k, ok := keysByName[ev.Key]; ok {
		if p.Code == "" {
			p.Code = k.Code
		}
		if p.WindowsVirtualKeyCode == 0 {
			p.WindowsVirtualKeyCode = k.Windows
		}
		p.NativeVirtualKeyCode = k.Native
	}
	if p.NativeVirtualKeyCode == 0 {
		p.NativeVirtualKeyCode = p.WindowsVirtualKeyCode
	}
	switch ev.Type {
	case browser.InputKeyDown:
		shortcut := ev.Modifiers&(browser.ModCtrl|browser.ModAlt|browser.ModMeta) != 0
		if p.Text == "" && !shortcut {
			if ev.Key == "Enter" {
				p.Text = "\r"
			} else if r, n := utf8.DecodeRuneInString(ev.Key); n == len(ev.Key) && n > 0 && unicode.IsPrint(r) {
				p.Text = ev.Key
			}
		}
		if p.Text != "" {
			p.Type = input.DispatchKeyEventTypeKeyDown
			p.UnmodifiedText = p.Text
		} else {
			p.Type = input.DispatchKeyEventTypeRawKeyDown
		}
		if shortcut {
			p.Commands = editingCommands(ev)
		}
	case browser.InputRawKeyDown:
		p.Type, p.Text = input.DispatchKeyEventTypeRawKeyDown, ""
	case browser.InputKeyUp:
		p.Type, p.Text = input.DispatchKeyEventTypeKeyUp, ""
	case browser.InputChar:
		p.Type = input.DispatchKeyEventTypeChar
		p.UnmodifiedText = p.Text
	}
	return p
}

// editingCommands maps the usual editing shortcuts to Chromium's editor
// commands: headless Chromium on Linux delivers Ctrl+A as a plain key event
// and never runs the command by itself. The clipboard lives in the user's
// own browser, so paste arrives as inserttext, not here.
func editingCommands(ev browser.InputEvent) []string {
	mod := ev.Modifiers &^ browser.ModShift
	if mod != browser.ModCtrl && mod != browser.ModMeta {
		return nil
	}
	shift := ev.Modifiers&browser.ModShift != 0
	switch strings.ToLower(ev.Key) {
	case "a":
		return []string{"selectAll"}
	case "z":
		if shift {
			return []string{"redo"}
		}
		return []string{"undo"}
	case "y":
		return []string{"redo"}
	case "x":
		return []string{"cut"}
	case "c":
		return []string{"copy"}
	case "backspace":
		return []string{"deleteWordBackward"}
	case "delete":
		return []string{"deleteWordForward"}
	case "arrowleft":
		if shift {
			return []string{"moveWordLeftAndModifySelection"}
		}
		return []string{"moveWordLeft"}
	case "arrowright":
		if shift {
			return []string{"moveWordRightAndModifySelection"}
		}
		return []string{"moveWordRight"}
	case "home":
		return []string{"moveToBeginningOfDocument"}
	case "end":
		return []string{"moveToEndOfDocument"}
	}
	return nil
}
