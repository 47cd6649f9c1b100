// Package sequence is the language of declarative navigation sequences
// (navigate, click, type, press, wait, eval, sleep, reload, set cookie):
// steps, their JSON form and their validation. It sits under internal/ so
// that app manifests (internal/bundle) can be checked anywhere, the master
// included; worker/seqrun runs sequences on a browser.
//
// In JSON (an app manifest) a sequence is an array of steps, each an object
// whose one kind key holds the step's main argument:
//
//	[
//	  {"navigate": "https://demo.example/login"},
//	  {"type": "#user", "text": "demo"},
//	  {"type": "#password", "text": "${secret:DEMO_PASSWORD}"},
//	  {"click": "button[type=submit]", "timeout": "15s"},
//	  {"waitURL": "/search"},
//	  {"waitVisible": "#q"}
//	]
//
// Text values may reference worker secrets as ${secret:NAME}; they are
// resolved when the step runs by the Runner's Secrets func, never stored in
// the bundle. Other ${name} references are variables supplied by the caller
// of RunVars; Rules.NoVars rejects them (initialization sequences cannot
// contain variables). "$${" stands for a literal "${".
//
// What the worker calls: decode a Sequence from JSON, check it with
// Sequence.Validate at deploy time, and run it with worker/seqrun.Runner.
package sequence

import (
	"strconv"
	"strings"
	"time"
)

// Kind names what a step does; the values are the JSON keys.
type Kind string

// Step kinds.
const (
	KindNavigate    Kind = "navigate"    // load URL and wait for the DOM
	KindClick       Kind = "click"       // click the element matching Selector
	KindType        Kind = "type"        // replace the content of Selector with Text
	KindPress       Kind = "press"       // press Key ("Enter", "Tab", "Control+a")
	KindWaitVisible Kind = "waitVisible" // wait until Selector is visible
	KindWaitURL     Kind = "waitURL"     // wait until the URL contains (or matches) Pattern
	KindEval        Kind = "eval"        // evaluate JS; a throw or rejection fails the step
	KindSleep       Kind = "sleep"       // wait Sleep
	KindReload      Kind = "reload"      // reload the page and wait for the DOM
	KindSetCookie   Kind = "setCookie"   // add Cookie to the browser's cookie jar
)

// Kinds lists every step kind in documentation order.
var Kinds = []Kind{KindNavigate, KindClick, KindType, KindPress, KindWaitVisible, KindWaitURL,
	KindEval, KindSleep, KindReload, KindSetCookie}

// DefaultTimeout bounds a step whose Timeout is zero (sleep excepted).
const DefaultTimeout = 10 * time.Second

// MaxDuration bounds step timeouts and sleeps: a sequence is preparation
// work and should never hold a pooled browser for long.
const MaxDuration = 5 * time.Minute

// Step is one step of a sequence. Which fields matter depends on Kind.
type Step struct {
	Kind Kind
	// URL of navigate.
	URL string
	// Selector (CSS) of click, type and waitVisible.
	Selector string
	// Text that type puts into the element (it replaces the content).
	Text string
	// Key of press: a DOM key name ("Enter", "Tab", "a"), optionally with
	// modifiers ("Control+a", "Shift+Tab").
	Key string
	// Pattern of waitURL: a substring of the URL, or a regular expression
	// when Regexp is set.
	Pattern string
	Regexp  bool
	// JS of eval: an expression; a returned promise is awaited.
	JS string
	// Sleep is how long sleep waits.
	Sleep time.Duration
	// Cookie of setCookie.
	Cookie *Cookie
	// Timeout bounds the step (0 = DefaultTimeout). Sleep ignores it.
	Timeout time.Duration

	// problems found while decoding JSON, reported by Validate with
	// their field paths (relative to the step).
	problems []FieldError
}

// Cookie is the cookie of a setCookie step. Domain defaults to the host of
// the page shown when the step runs, Path to "/". It is a session cookie.
type Cookie struct {
	Name     string `json:"name"`
	Value    string `json:"value"`
	Domain   string `json:"domain,omitempty"`
	Path     string `json:"path,omitempty"`
	Secure   bool   `json:"secure,omitempty"`
	HTTPOnly bool   `json:"httpOnly,omitempty"`
	// SameSite is "Strict", "Lax", "None" or "" (browser default).
	SameSite string `json:"sameSite,omitempty"`
}

// Sequence is an ordered list of steps.
type Sequence []Step

// Constructors for use from Go (tests, benchmarks, built-in sequences).

// Navigate loads url.
func Navigate(url string) Step { return Step{Kind: KindNavigate, URL: url} }

// Click clicks the element matching selector.
func Click(selector string) Step { return Step{Kind: KindClick, Selector: selector} }

// Type replaces the content of the element matching selector with text.
func Type(selector, text string) Step { return Step{Kind: KindType, Selector: selector, Text: text} }

// Press presses key (with optional "Control+", "Shift+", "Alt+", "Meta+").
func Press(key string) Step { return Step{Kind: KindPress, Key: key} }

// WaitVisible waits until the element matching selector is visible.
func WaitVisible(selector string) Step { return Step{Kind: KindWaitVisible, Selector: selector} }

// WaitURL waits until the page URL contains substr.
func WaitURL(substr string) Step { return Step{Kind: KindWaitURL, Pattern: substr} }

// WaitURLMatch waits until the page URL matches the regular expression re.
func WaitURLMatch(re string) Step { return Step{Kind: KindWaitURL, Pattern: re, Regexp: true} }

// Eval evaluates the JavaScript expression js.
func Eval(js string) Step { return Step{Kind: KindEval, JS: js} }

// Sleep waits d.
func Sleep(d time.Duration) Step { return Step{Kind: KindSleep, Sleep: d} }

// Reload reloads the page.
func Reload() Step { return Step{Kind: KindReload} }

// SetCookie adds c to the cookie jar.
func SetCookie(c Cookie) Step { return Step{Kind: KindSetCookie, Cookie: &c} }

// WithTimeout returns s with its timeout set to d.
func (s Step) WithTimeout(d time.Duration) Step { s.Timeout = d; return s }

// String describes the step for logs, with variables and secrets left
// unexpanded (so a password never reaches a log line).
func (s Step) String() string {
	var b strings.Builder
	b.WriteString(string(s.Kind))
	arg := func(v string) { b.WriteByte(' '); b.WriteString(strconv.Quote(clip(v))) }
	switch s.Kind {
	case KindNavigate:
		arg(s.URL)
	case KindClick, KindWaitVisible:
		arg(s.Selector)
	case KindType:
		arg(s.Selector)
		arg(s.Text)
	case KindPress:
		arg(s.Key)
	case KindWaitURL:
		arg(s.Pattern)
		if s.Regexp {
			b.WriteString(" (regexp)")
		}
	case KindEval:
		arg(s.JS)
	case KindSleep:
		b.WriteByte(' ')
		b.WriteString(s.Sleep.String())
	case KindSetCookie:
		if s.Cookie != nil {
			arg(s.Cookie.Name)
		}
	}
	return b.String()
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}

// EffectiveTimeout is the step's timeout, DefaultTimeout when it sets none.
func (s Step) EffectiveTimeout() time.Duration {
	if s.Timeout > 0 {
		return s.Timeout
	}
	return DefaultTimeout
}

// FieldError names the field (a JSON path such as "pool.init[2].click")
// that is wrong.
type FieldError struct {
	Field string `json:"field"`
	Msg   string `json:"msg"`
}

func (e FieldError) Error() string { return e.Field + ": " + e.Msg }

// Errors is every problem found in one validation.
type Errors []FieldError

func (es Errors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "; ")
}
