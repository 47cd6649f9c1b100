package chromium

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/chromedp/cdproto"
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
		p := mouseParams(ev)
		k := b.toPage(ctx)
		p.X, p.Y = p.X*k, p.Y*k
		_, err := pageCall(ctx, b, input.DispatchMouseEvent, p)
		return err
	case browser.InputWheel:
		// cdproto omits a zero deltaX and Chromium rejects a wheel event
		// without both deltas, so this one goes out as raw params.
		k := b.toPage(ctx)
		params := map[string]any{
			"type":      input.DispatchMouseEventTypeMouseWheel,
			"x":         ev.X * k,
			"y":         ev.Y * k,
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
	case browser.InputCompose:
		// The caret at the composition's end, in UTF-16 units as the
		// page counts them.
		n := int64(len(utf16.Encode([]rune(ev.Text))))
		_, err := pageCall(ctx, b, input.ImeSetComposition, input.ImeSetCompositionParams{Text: ev.Text, SelectionStart: n, SelectionEnd: n})
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

// touch sends one step of a gesture. The client sends the fingers still
// down, as a DOM TouchEvent's touches; Chromium wants those that changed,
// by kind: touchStart presses the points it gets, touchMove moves them,
// touchEnd lifts them, and touchCancel (with no points) cancels them all.
// Its gesture detection makes the rest: a tap clicks, a drag scrolls, a
// pinch zooms.
func (b *cbrowser) touch(ctx context.Context, ev browser.InputEvent) error {
	b.touchMu.Lock()
	defer b.touchMu.Unlock()
	// A pinch zooms desktop pages too.
	b.zoomable.Store(true)
	if b.fingers == nil {
		b.fingers = map[int]browser.TouchPoint{}
	}
	if ev.Phase == browser.TouchCancel {
		// CDP cancels all fingers or none: those still down come back
		// pressed anew with their next move.
		if len(b.fingers) == 0 {
			return nil
		}
		clear(b.fingers)
		return b.dispatchTouch(ctx, input.DispatchTouchEventTypeTouchCancel, nil, ev.Modifiers)
	}
	var moved, lifted, pressed []browser.TouchPoint
	down := make(map[int]bool, len(ev.Touches))
	for _, t := range ev.Touches {
		down[t.ID] = true
		if old, ok := b.fingers[t.ID]; !ok {
			pressed = append(pressed, t)
		} else if old != t {
			moved = append(moved, t)
		}
	}
	for id, t := range b.fingers {
		if !down[id] {
			lifted = append(lifted, t)
		}
	}
	slices.SortFunc(lifted, func(a, b browser.TouchPoint) int { return cmp.Compare(a.ID, b.ID) })
	if len(moved) > 0 {
		err := b.dispatchTouch(ctx, input.DispatchTouchEventTypeTouchMove, moved, ev.Modifiers)
		switch {
		case isNoTouch(err):
			// Chromium forgot the fingers (its input state goes with a
			// renderer swap): these are new ones to it.
			clear(b.fingers)
			pressed, lifted = append(pressed, moved...), nil
		case err != nil:
			return err
		default:
			for _, t := range moved {
				b.fingers[t.ID] = t
			}
		}
	}
	if len(lifted) > 0 {
		err := b.dispatchTouch(ctx, input.DispatchTouchEventTypeTouchEnd, lifted, ev.Modifiers)
		if err != nil && !isNoTouch(err) { // none down is what a lift leaves
			return err
		}
		for _, t := range lifted {
			delete(b.fingers, t.ID)
		}
	}
	if len(pressed) > 0 {
		if err := b.dispatchTouch(ctx, input.DispatchTouchEventTypeTouchStart, pressed, ev.Modifiers); err != nil {
			return err
		}
		for _, t := range pressed {
			b.fingers[t.ID] = t
		}
	}
	return nil
}

// dispatchTouch sends one CDP touch event of points, converted from the
// screen's positions to the page's (toPage).
func (b *cbrowser) dispatchTouch(ctx context.Context, typ input.DispatchTouchEventType, points []browser.TouchPoint, mods browser.Modifiers) error {
	k := b.toPage(ctx)
	p := input.DispatchTouchEventParams{
		Type:        typ,
		TouchPoints: make([]*input.TouchPoint, 0, len(points)),
		Modifiers:   int64(mods),
	}
	for _, t := range points {
		p.TouchPoints = append(p.TouchPoints, &input.TouchPoint{X: t.X * k, Y: t.Y * k, ID: new(float64(t.ID))})
	}
	_, err := pageCall(ctx, b, input.DispatchTouchEvent, p)
	return err
}

// isNoTouch reports Chromium's refusal of a move or lift while it holds no
// finger down.
func isNoTouch(err error) bool {
	var cerr *cdproto.Error
	return errors.As(err, &cerr) && strings.HasPrefix(cerr.Message, "Must send a TouchStart first")
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
