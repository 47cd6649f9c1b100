package browser

import (
	"errors"
	"fmt"
	"math"

	"github.com/cloudbrowser-go/cloudbrowser/internal/navurl"
)

// ErrInvalidInput is wrapped by the errors of Browser.Input for events that
// fail validation.
var ErrInvalidInput = errors.New("browser: invalid input event")

// InputType says what an InputEvent does. The values are the wire names the
// worker's WebSocket clients send.
type InputType string

// Input event types.
const (
	InputMouseMove InputType = "mousemove"
	InputMouseDown InputType = "mousedown"
	InputMouseUp   InputType = "mouseup"
	// InputWheel scrolls by DeltaX/DeltaY at X/Y.
	InputWheel InputType = "wheel"
	// InputKeyDown types Text (or Key when it is one printable character)
	// and also runs the key's default action (Enter, Backspace, Tab, arrows).
	InputKeyDown InputType = "keydown"
	InputKeyUp   InputType = "keyup"
	// InputRawKeyDown is a key press that never inserts text.
	InputRawKeyDown InputType = "rawkeydown"
	// InputChar inserts Text as a keypress without keydown/keyup.
	InputChar InputType = "char"
	// InputInsertText inserts Text as one edit (paste, IME commit).
	InputInsertText InputType = "inserttext"
	// InputCompose shows Text as the IME's composition in progress,
	// underlined and not yet committed; an empty Text cancels it. The
	// commit is an InputInsertText.
	InputCompose InputType = "compose"
	// InputTouch is one step (Phase) of a touch gesture with the fingers
	// still down in Touches: tap, long-press, drag, pinch.
	InputTouch InputType = "touch"
	// InputResize sets the viewport to Width x Height CSS pixels.
	InputResize  InputType = "resize"
	InputBack    InputType = "back"
	InputForward InputType = "forward"
	InputReload  InputType = "reload"
	// InputNavigate loads URL (http, https, data or about:blank only).
	InputNavigate InputType = "navigate"
)

// MouseButton names a mouse button.
type MouseButton string

// Mouse buttons; "" means none.
const (
	ButtonNone    MouseButton = "none"
	ButtonLeft    MouseButton = "left"
	ButtonMiddle  MouseButton = "middle"
	ButtonRight   MouseButton = "right"
	ButtonBack    MouseButton = "back"
	ButtonForward MouseButton = "forward"
)

// Modifiers is a bit set of pressed modifier keys (the CDP encoding).
type Modifiers int

// Modifier bits.
const (
	ModAlt   Modifiers = 1
	ModCtrl  Modifiers = 2
	ModMeta  Modifiers = 4
	ModShift Modifiers = 8
)

// Limits for InputResize.
const (
	MinViewport = 1
	MaxViewport = 8192
	// MaxScale bounds a resize's device pixel ratio.
	MaxScale = 4
)

// MaxTouches bounds the fingers of one touch event.
const MaxTouches = 10

// TouchPhase says which step of a touch gesture an InputTouch is.
type TouchPhase string

// Touch phases.
const (
	TouchStart  TouchPhase = "start"
	TouchMove   TouchPhase = "move"
	TouchEnd    TouchPhase = "end"
	TouchCancel TouchPhase = "cancel"
)

// TouchPoint is one finger on the screen, in CSS pixels relative to the
// viewport; ID follows the finger through the gesture.
type TouchPoint struct {
	X  float64 `json:"x"`
	Y  float64 `json:"y"`
	ID int     `json:"id"`
}

// InputEvent is one user input event; which fields matter depends on Type.
// It is designed to be decoded straight from a client's JSON message.
type InputEvent struct {
	Type InputType `json:"type"`

	// Mouse and wheel: position in CSS pixels relative to the viewport.
	X float64 `json:"x,omitempty"`
	Y float64 `json:"y,omitempty"`
	// Button is the button that changed (mousedown/mouseup).
	Button MouseButton `json:"button,omitempty"`
	// Buttons is the set of pressed buttons (left=1, right=2, middle=4,
	// back=8, forward=16), e.g. for drags with mousemove.
	Buttons int `json:"buttons,omitempty"`
	// ClickCount is 1 for a click, 2 for a double click (0 = 1 on
	// mousedown/mouseup).
	ClickCount int `json:"clickCount,omitempty"`
	// DeltaX and DeltaY scroll (wheel), in CSS pixels.
	DeltaX float64 `json:"deltaX,omitempty"`
	DeltaY float64 `json:"deltaY,omitempty"`

	Modifiers Modifiers `json:"modifiers,omitempty"`

	// Keyboard: DOM KeyboardEvent.key ("a", "Enter", "ArrowLeft"), .code
	// ("KeyA"), the text the key produces and the Windows virtual key code
	// (KeyboardEvent.keyCode). Missing code/keyCode are filled in for known
	// keys. Text is also the text of char and inserttext.
	Key     string `json:"key,omitempty"`
	Code    string `json:"code,omitempty"`
	Text    string `json:"text,omitempty"`
	KeyCode int    `json:"keyCode,omitempty"`

	// Resize: the new viewport size in CSS pixels; Scale is the screen's
	// device pixel ratio (0 = 1), and Mobile asks for a phone's page: the
	// mobile viewport, touch, a coarse pointer.
	Width  int     `json:"width,omitempty"`
	Height int     `json:"height,omitempty"`
	Scale  float64 `json:"scale,omitempty"`
	Mobile bool    `json:"mobile,omitempty"`

	// Touch: the gesture's step and the fingers still down (none after
	// the last finger lifts).
	Phase   TouchPhase   `json:"phase,omitempty"`
	Touches []TouchPoint `json:"touches,omitempty"`

	// Navigate: the URL to load.
	URL string `json:"url,omitempty"`
}

// Validate reports whether ev is well formed; the error wraps
// ErrInvalidInput.
func (ev InputEvent) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidInput, ev.Type, fmt.Sprintf(format, args...))
	}
	finite := func(vs ...float64) bool {
		for _, v := range vs {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return false
			}
		}
		return true
	}
	if ev.Modifiers < 0 || ev.Modifiers > ModAlt|ModCtrl|ModMeta|ModShift {
		return bad("modifiers %d out of range", ev.Modifiers)
	}
	switch ev.Type {
	case InputMouseMove, InputMouseDown, InputMouseUp:
		if !finite(ev.X, ev.Y) {
			return bad("non-finite position")
		}
		switch ev.Button {
		case "", ButtonNone, ButtonLeft, ButtonMiddle, ButtonRight, ButtonBack, ButtonForward:
		default:
			return bad("unknown button %q", ev.Button)
		}
		if ev.Buttons < 0 || ev.Buttons > 31 {
			return bad("buttons %d out of range", ev.Buttons)
		}
		if ev.ClickCount < 0 || ev.ClickCount > 3 {
			return bad("click count %d out of range", ev.ClickCount)
		}
	case InputWheel:
		if !finite(ev.X, ev.Y, ev.DeltaX, ev.DeltaY) {
			return bad("non-finite position or delta")
		}
	case InputKeyDown, InputKeyUp, InputRawKeyDown:
		if ev.Key == "" && ev.Code == "" && ev.KeyCode == 0 {
			return bad("needs key, code or keyCode")
		}
		if ev.KeyCode < 0 || ev.KeyCode > 255 {
			return bad("keyCode %d out of range", ev.KeyCode)
		}
	case InputChar, InputInsertText:
		if ev.Text == "" {
			return bad("empty text")
		}
	case InputCompose:
		if len(ev.Text) > MaxComposition {
			return bad("composition of %d bytes, more than %d", len(ev.Text), MaxComposition)
		}
	case InputTouch:
		return ev.validTouch(bad, finite)
	case InputResize:
		if ev.Width < MinViewport || ev.Width > MaxViewport || ev.Height < MinViewport || ev.Height > MaxViewport {
			return bad("size %dx%d outside %d..%d", ev.Width, ev.Height, MinViewport, MaxViewport)
		}
		if !finite(ev.Scale) || ev.Scale < 0 || ev.Scale > MaxScale {
			return bad("scale %v outside 0..%d", ev.Scale, MaxScale)
		}
	case InputBack, InputForward, InputReload:
	case InputNavigate:
		if err := navurl.Check(ev.URL); err != nil {
			return bad("%v", err)
		}
	case "":
		return fmt.Errorf("%w: missing type", ErrInvalidInput)
	default:
		return fmt.Errorf("%w: unknown type %q", ErrInvalidInput, ev.Type)
	}
	return nil
}

// MaxComposition bounds an IME composition in progress: a sentence, not a
// document.
const MaxComposition = 4096

// validTouch checks an InputTouch: a known phase, fingers on the screen
// for start and move, and none twice.
func (ev InputEvent) validTouch(bad func(string, ...any) error, finite func(...float64) bool) error {
	switch ev.Phase {
	case TouchStart, TouchMove:
		if len(ev.Touches) == 0 {
			return bad("%s without touches", ev.Phase)
		}
	case TouchEnd, TouchCancel:
	default:
		return bad("unknown phase %q", ev.Phase)
	}
	if len(ev.Touches) > MaxTouches {
		return bad("%d touches, more than %d", len(ev.Touches), MaxTouches)
	}
	for i, t := range ev.Touches {
		if !finite(t.X, t.Y) {
			return bad("touch %d: non-finite position", i)
		}
		for _, u := range ev.Touches[:i] {
			if u.ID == t.ID {
				return bad("touch id %d twice", t.ID)
			}
		}
	}
	return nil
}
