// Package cdpinput maps worker/browser's input events to the DevTools
// protocol's Input commands: mouse, wheel, keys (with the codes and text
// Chromium needs to run a key's default action, and the editing commands
// of the usual shortcuts), IME composition and touch. Its functions are
// pure; sending the commands is the runtime's.
package cdpinput

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/chromedp/cdproto"
	"github.com/chromedp/cdproto/input"
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

// buttonBits are the DOM MouseEvent.buttons bits.
var buttonBits = map[browser.MouseButton]int{
	browser.ButtonLeft: 1, browser.ButtonRight: 2, browser.ButtonMiddle: 4,
	browser.ButtonBack: 8, browser.ButtonForward: 16,
}

// Mouse is a mouse move, down or up, at ev's position times k (the
// screen's CSS pixels to the page's).
func Mouse(ev browser.InputEvent, k float64) input.DispatchMouseEventParams {
	p := input.DispatchMouseEventParams{
		X: ev.X * k, Y: ev.Y * k,
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

// Wheel is the raw params of a wheel event at ev's position times k, for
// Input.dispatchMouseEvent: cdproto omits a zero deltaX and Chromium
// rejects a wheel event without both deltas.
func Wheel(ev browser.InputEvent, k float64) map[string]any {
	return map[string]any{
		"type":      input.DispatchMouseEventTypeMouseWheel,
		"x":         ev.X * k,
		"y":         ev.Y * k,
		"deltaX":    ev.DeltaX,
		"deltaY":    ev.DeltaY,
		"modifiers": int64(ev.Modifiers),
	}
}

// Compose sets the IME composition to text with the caret at its end, in
// UTF-16 units as the page counts them.
func Compose(text string) input.ImeSetCompositionParams {
	n := int64(len(utf16.Encode([]rune(text))))
	return input.ImeSetCompositionParams{Text: text, SelectionStart: n, SelectionEnd: n}
}

// Key fills in what clients may leave out: code and key codes of known
// keys, and the text a plain printable key or Enter produces. Chromium
// only runs a key's default action (typing, Backspace, caret moves, Tab
// focus) when it gets the Windows key code.
func Key(ev browser.InputEvent) input.DispatchKeyEventParams {
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

// TouchChanges compares the fingers Chromium holds down (down, by id) with
// those a step of a gesture has down (touches, as a DOM TouchEvent's
// touches): the ones that moved, were lifted (by id) and were pressed.
func TouchChanges(down map[int]browser.TouchPoint, touches []browser.TouchPoint) (moved, lifted, pressed []browser.TouchPoint) {
	still := make(map[int]bool, len(touches))
	for _, t := range touches {
		still[t.ID] = true
		if old, ok := down[t.ID]; !ok {
			pressed = append(pressed, t)
		} else if old != t {
			moved = append(moved, t)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(down)) {
		if !still[id] {
			lifted = append(lifted, down[id])
		}
	}
	return moved, lifted, pressed
}

// Touch is a touch event of points at their positions times k (the
// screen's CSS pixels to the page's).
func Touch(typ input.DispatchTouchEventType, points []browser.TouchPoint, k float64, mods browser.Modifiers) input.DispatchTouchEventParams {
	p := input.DispatchTouchEventParams{
		Type:        typ,
		TouchPoints: make([]*input.TouchPoint, 0, len(points)),
		Modifiers:   int64(mods),
	}
	for _, t := range points {
		p.TouchPoints = append(p.TouchPoints, &input.TouchPoint{X: t.X * k, Y: t.Y * k, ID: new(float64(t.ID))})
	}
	return p
}

// IsNoTouch reports Chromium's refusal of a move or lift while it holds no
// finger down.
func IsNoTouch(err error) bool {
	var cerr *cdproto.Error
	return errors.As(err, &cerr) && strings.HasPrefix(cerr.Message, "Must send a TouchStart first")
}
