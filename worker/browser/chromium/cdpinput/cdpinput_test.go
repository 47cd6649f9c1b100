package cdpinput

import (
	"fmt"
	"slices"
	"testing"

	"github.com/chromedp/cdproto"
	"github.com/chromedp/cdproto/input"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

func TestKey(t *testing.T) {
	for _, c := range []struct {
		ev         browser.InputEvent
		typ        input.DispatchKeyEventType
		code, text string
		windows    int64
		commands   []string
	}{
		{browser.InputEvent{Type: browser.InputKeyDown, Key: "a"}, input.DispatchKeyEventTypeKeyDown, "KeyA", "a", 65, nil},
		{browser.InputEvent{Type: browser.InputKeyDown, Key: "Enter"}, input.DispatchKeyEventTypeKeyDown, "Enter", "\r", 13, nil},
		{browser.InputEvent{Type: browser.InputKeyDown, Key: "1"}, input.DispatchKeyEventTypeKeyDown, "Digit1", "1", 49, nil},
		{browser.InputEvent{Type: browser.InputKeyDown, Key: "ArrowLeft"}, input.DispatchKeyEventTypeRawKeyDown, "ArrowLeft", "", 37, nil},
		{browser.InputEvent{Type: browser.InputKeyDown, Key: "a", Modifiers: browser.ModCtrl}, input.DispatchKeyEventTypeRawKeyDown, "KeyA", "", 65, []string{"selectAll"}},
		{browser.InputEvent{Type: browser.InputKeyDown, Key: "z", Modifiers: browser.ModMeta | browser.ModShift}, input.DispatchKeyEventTypeRawKeyDown, "KeyZ", "", 90, []string{"redo"}},
		{browser.InputEvent{Type: browser.InputKeyDown, Key: "a", Modifiers: browser.ModAlt}, input.DispatchKeyEventTypeRawKeyDown, "KeyA", "", 65, nil},
		{browser.InputEvent{Type: browser.InputKeyUp, Key: "a", Text: "a"}, input.DispatchKeyEventTypeKeyUp, "KeyA", "", 65, nil},
		{browser.InputEvent{Type: browser.InputChar, Text: "é"}, input.DispatchKeyEventTypeChar, "", "é", 0, nil},
	} {
		p := Key(c.ev)
		if p.Type != c.typ || p.Code != c.code || p.Text != c.text || p.WindowsVirtualKeyCode != c.windows || !slices.Equal(p.Commands, c.commands) {
			t.Errorf("%+v: %+v", c.ev, p)
		}
	}
}

func TestMouse(t *testing.T) {
	down := Mouse(browser.InputEvent{Type: browser.InputMouseDown, X: 10, Y: 20}, 2)
	if down.Type != input.DispatchMouseEventTypeMousePressed || down.Button != input.MouseButtonLeft ||
		down.Buttons != 1 || down.ClickCount != 1 || down.X != 20 || down.Y != 40 {
		t.Errorf("down %+v", down)
	}
	drag := Mouse(browser.InputEvent{Type: browser.InputMouseMove, Buttons: 2 | 4}, 1)
	if drag.Type != input.DispatchMouseEventTypeMouseMoved || drag.Button != input.MouseButtonRight {
		t.Errorf("drag %+v", drag)
	}
	move := Mouse(browser.InputEvent{Type: browser.InputMouseMove}, 1)
	if move.Button != input.MouseButtonNone {
		t.Errorf("move %+v", move)
	}
}

func TestCompose(t *testing.T) {
	if p := Compose("😀a"); p.SelectionStart != 3 || p.SelectionEnd != 3 {
		t.Errorf("%+v: the caret is at 3 UTF-16 units", p)
	}
}

func TestTouchChanges(t *testing.T) {
	pt := func(id int, x float64) browser.TouchPoint { return browser.TouchPoint{ID: id, X: x, Y: 1} }
	down := map[int]browser.TouchPoint{1: pt(1, 10), 2: pt(2, 20), 3: pt(3, 30), 5: pt(5, 50)}
	moved, lifted, pressed := TouchChanges(down, []browser.TouchPoint{pt(1, 11), pt(2, 20), pt(4, 40)})
	str := func(ps []browser.TouchPoint) string { return fmt.Sprint(ps) }
	if str(moved) != str([]browser.TouchPoint{pt(1, 11)}) ||
		str(lifted) != str([]browser.TouchPoint{pt(3, 30), pt(5, 50)}) ||
		str(pressed) != str([]browser.TouchPoint{pt(4, 40)}) {
		t.Errorf("moved %v, lifted %v, pressed %v", moved, lifted, pressed)
	}
	p := Touch(input.DispatchTouchEventTypeTouchStart, pressed, 0.5, browser.ModShift)
	if len(p.TouchPoints) != 1 || p.TouchPoints[0].X != 20 || *p.TouchPoints[0].ID != 4 || p.Modifiers != int64(browser.ModShift) {
		t.Errorf("touch %+v", p)
	}
}

func TestIsNoTouch(t *testing.T) {
	if !IsNoTouch(fmt.Errorf("x: %w", &cdproto.Error{Message: "Must send a TouchStart first to start a new touch."})) {
		t.Error("Chromium's refusal not recognized")
	}
	if IsNoTouch(nil) || IsNoTouch(&cdproto.Error{Message: "other"}) {
		t.Error("another error taken for a refusal")
	}
}
