// Package seqrun runs declarative navigation sequences (internal/sequence)
// on a browser.Browser. Browser pools use them to log in once
// (initialization sequence), to put a returned browser back on its page
// (back sequence) and to keep an idle session alive (touch sequence).
//
// Everything goes through the browser.Browser interface: selectors are
// resolved with Evaluate in the page, and clicks and typing are real input
// events (Input) at the element's position, so the page sees the same
// events a user would produce.
package seqrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/internal/navurl"
	"github.com/cloudbrowser-go/cloudbrowser/internal/sequence"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// Runner runs sequences. The zero value works (no secrets, default
// timeouts); it is safe for concurrent use.
type Runner struct {
	// Secrets resolves ${secret:NAME} (nil = secrets are an error).
	Secrets sequence.Secrets
	// DefaultTimeout bounds steps without their own timeout (0 = DefaultTimeout).
	DefaultTimeout time.Duration
	// Poll is how often waiting steps check the page (0 = 50ms).
	Poll time.Duration
	// Log gets one debug line per step (secrets unexpanded).
	Log zerolog.Logger
}

// Run runs q on b, step by step, and stops at the first failure with a
// *StepError naming the step. Variables are not available (use RunVars).
func (r *Runner) Run(ctx context.Context, b browser.Browser, q sequence.Sequence) error {
	return r.RunVars(ctx, b, q, nil)
}

// RunVars runs q with ${name} variables resolved from vars.
func (r *Runner) RunVars(ctx context.Context, b browser.Browser, q sequence.Sequence, vars map[string]string) error {
	x := &sequence.Expander{Secrets: r.Secrets, Vars: vars}
	for i, s := range q {
		start := time.Now()
		err := ctx.Err()
		if err == nil {
			err = r.step(ctx, b, s, x)
		}
		if err != nil {
			serr := &StepError{Index: i, Kind: s.Kind, Step: s.String(), Err: err, redact: x.Used}
			r.Log.Debug().Int("step", i).Str("kind", string(s.Kind)).Dur("took", time.Since(start)).
				Str("error", serr.Error()).Msg("sequence step failed")
			return serr
		}
		r.Log.Debug().Int("step", i).Str("kind", string(s.Kind)).Stringer("desc", s).
			Dur("took", time.Since(start)).Msg("sequence step done")
	}
	return nil
}

func (r *Runner) poll() time.Duration {
	if r.Poll > 0 {
		return r.Poll
	}
	return 50 * time.Millisecond
}

func (r *Runner) step(ctx context.Context, b browser.Browser, s sequence.Step, x *sequence.Expander) error {
	if s.Kind == sequence.KindSleep {
		t := time.NewTimer(s.Sleep)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	timeout := s.Timeout
	config.OrDefault(&timeout, r.DefaultTimeout)
	config.OrDefault(&timeout, sequence.DefaultTimeout)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	switch s.Kind {
	case sequence.KindNavigate:
		u, err := x.Expand(s.URL, false)
		if err != nil {
			return err
		}
		if err := navurl.Check(u); err != nil {
			return err
		}
		if err := b.Navigate(ctx, u); err != nil {
			return err
		}
		return r.waitDOM(ctx, b, "")
	case sequence.KindClick:
		sel, err := x.Expand(s.Selector, false)
		if err != nil {
			return err
		}
		var at locateResult
		if err := r.locate(ctx, b, sel, "click", &at); err != nil {
			return err
		}
		return click(ctx, b, at.X, at.Y)
	case sequence.KindType:
		sel, err := x.Expand(s.Selector, false)
		if err != nil {
			return err
		}
		text, err := x.Expand(s.Text, false)
		if err != nil {
			return err
		}
		if err := r.locate(ctx, b, sel, "focus", nil); err != nil {
			return err
		}
		// The content is selected: inserting replaces it, Delete clears it.
		if text == "" {
			return pressKey(ctx, b, "Delete", 0)
		}
		return b.Input(ctx, browser.InputEvent{Type: browser.InputInsertText, Text: text})
	case sequence.KindPress:
		k, err := x.Expand(s.Key, false)
		if err != nil {
			return err
		}
		key, mods, err := sequence.ParseKey(k)
		if err != nil {
			return err
		}
		return pressKey(ctx, b, key, cdpModifiers(mods))
	case sequence.KindWaitVisible:
		sel, err := x.Expand(s.Selector, false)
		if err != nil {
			return err
		}
		return r.locate(ctx, b, sel, "visible", nil)
	case sequence.KindWaitURL:
		pat, err := x.Expand(s.Pattern, false)
		if err != nil {
			return err
		}
		match := func(u string) bool { return strings.Contains(u, pat) }
		if s.Regexp {
			re, err := regexp.Compile(pat)
			if err != nil {
				return fmt.Errorf("bad regexp: %w", err)
			}
			match = re.MatchString
		}
		return r.until(ctx, b, func(context.Context) (bool, string, error) {
			u := b.Page().URL
			return match(u), "url is " + u, nil
		})
	case sequence.KindEval:
		js, err := x.Expand(s.JS, true)
		if err != nil {
			return err
		}
		return b.Evaluate(ctx, js, nil)
	case sequence.KindReload:
		// A marker on the old window tells the reloaded document apart:
		// Chromium answers the reload before the new document exists.
		if err := b.Evaluate(ctx, "window.__cbSeqReload = true", nil); err != nil {
			return err
		}
		if err := b.Input(ctx, browser.InputEvent{Type: browser.InputReload}); err != nil {
			return err
		}
		return r.waitDOM(ctx, b, "window.__cbSeqReload === undefined && ")
	case sequence.KindSetCookie:
		if s.Cookie == nil {
			return errors.New("no cookie")
		}
		c := browser.Cookie{Secure: s.Cookie.Secure, HTTPOnly: s.Cookie.HTTPOnly, SameSite: s.Cookie.SameSite}
		for _, f := range []struct {
			dst *string
			src string
		}{{&c.Name, s.Cookie.Name}, {&c.Value, s.Cookie.Value}, {&c.Domain, s.Cookie.Domain}, {&c.Path, s.Cookie.Path}} {
			v, err := x.Expand(f.src, false)
			if err != nil {
				return err
			}
			*f.dst = v
		}
		if c.Domain == "" {
			u, err := url.Parse(b.Page().URL)
			if err != nil || u.Hostname() == "" {
				return fmt.Errorf("cookie %s: no domain given and the page %q has no host", c.Name, b.Page().URL)
			}
			c.Domain = u.Hostname()
		}
		if c.Path == "" {
			c.Path = "/"
		}
		return b.SetCookies(ctx, []browser.Cookie{c})
	}
	return fmt.Errorf("unknown step kind %q", s.Kind)
}

// until calls check now and then every poll interval until it reports
// done, fails, the browser closes or ctx ends. state describes what was
// last seen, for the timeout error.
func (r *Runner) until(ctx context.Context, b browser.Browser, check func(context.Context) (done bool, state string, err error)) error {
	t := time.NewTicker(r.poll())
	defer t.Stop()
	var last string
	for {
		done, state, err := check(ctx)
		if err != nil || done {
			return err
		}
		// A check cut short by the deadline saw nothing worth reporting.
		if ctx.Err() == nil || last == "" {
			last = state
		}
		select {
		case <-t.C:
		case <-b.Done():
			return fmt.Errorf("browser ended: %w", b.Err())
		case <-ctx.Done():
			if last == "" {
				return ctx.Err()
			}
			return fmt.Errorf("%w (%s)", ctx.Err(), last)
		}
	}
}

// waitDOM waits until the document is parsed (readyState is not
// "loading"); extra is a JS condition prefix that must also hold.
func (r *Runner) waitDOM(ctx context.Context, b browser.Browser, extra string) error {
	expr := extra + `document.readyState !== "loading"`
	return r.until(ctx, b, func(ctx context.Context) (bool, string, error) {
		var ok bool
		// Errors are expected while a navigation swaps documents.
		if err := b.Evaluate(ctx, expr, &ok); err != nil {
			return false, "page not ready: " + err.Error(), nil
		}
		return ok, "document still loading", nil
	})
}

// locateJS finds the element of a selector and checks it can be acted on.
// act is "visible" (only visibility), "click" (scroll into view, the
// center point must hit the element) or "focus" (focus it and select its
// content). The tag comment lets test fakes recognize the call.
const locateJS = `/*cb:locate*/(function (sel, act) {
  let el;
  try { el = document.querySelector(sel); } catch (e) { return {state: "invalid", detail: String(e && e.message || e)}; }
  if (!el) return {state: "missing"};
  const st = getComputedStyle(el);
  if (st.visibility === "hidden" || st.display === "none" || el.getClientRects().length === 0) return {state: "hidden"};
  let r = el.getBoundingClientRect();
  if (r.width === 0 || r.height === 0) return {state: "hidden"};
  if (act === "visible") return {state: "ok"};
  if (act === "focus") {
    if (el.disabled || el.readOnly) return {state: "disabled"};
    el.focus();
    try {
      if (typeof el.select === "function") el.select();
      else { const g = document.createRange(); g.selectNodeContents(el); const s = getSelection(); s.removeAllRanges(); s.addRange(g); }
    } catch (e) {}
    const a = document.activeElement;
    if (a !== el && !el.contains(a)) return {state: "unfocusable"};
    return {state: "ok"};
  }
  el.scrollIntoView({block: "center", inline: "center", behavior: "instant"});
  r = el.getBoundingClientRect();
  const x = r.left + r.width / 2, y = r.top + r.height / 2;
  const hit = document.elementFromPoint(x, y);
  if (hit && hit !== el && !el.contains(hit)) {
    let d = hit.tagName.toLowerCase();
    if (hit.id) d += "#" + hit.id;
    return {state: "covered", detail: d};
  }
  return {state: "ok", x: x, y: y};
})`

type locateResult struct {
	State  string  `json:"state"`
	Detail string  `json:"detail"`
	X      float64 `json:"x"`
	Y      float64 `json:"y"`
}

// locate polls until the element of sel is ready for act; the result of
// the successful check goes to out.
func (r *Runner) locate(ctx context.Context, b browser.Browser, sel, act string, out *locateResult) error {
	expr := locateJS + "(" + jsString(sel) + "," + jsString(act) + ")"
	return r.until(ctx, b, func(ctx context.Context) (bool, string, error) {
		var res locateResult
		if err := b.Evaluate(ctx, expr, &res); err != nil {
			return false, "page not ready: " + err.Error(), nil
		}
		switch res.State {
		case "ok":
			if out != nil {
				*out = res
			}
			return true, "", nil
		case "invalid":
			return false, "", fmt.Errorf("invalid selector %q: %s", sel, res.Detail)
		case "covered":
			return false, fmt.Sprintf("%s is covered by %s", sel, res.Detail), nil
		case "missing":
			return false, fmt.Sprintf("no element matches %s", sel), nil
		default:
			return false, fmt.Sprintf("%s is %s", sel, res.State), nil
		}
	})
}

// click sends a left click at x, y (CSS pixels in the viewport).
func click(ctx context.Context, b browser.Browser, x, y float64) error {
	for _, ev := range []browser.InputEvent{
		{Type: browser.InputMouseMove, X: x, Y: y},
		{Type: browser.InputMouseDown, X: x, Y: y, Button: browser.ButtonLeft, Buttons: 1, ClickCount: 1},
		{Type: browser.InputMouseUp, X: x, Y: y, Button: browser.ButtonLeft, ClickCount: 1},
	} {
		if err := b.Input(ctx, ev); err != nil {
			return err
		}
	}
	return nil
}

func pressKey(ctx context.Context, b browser.Browser, key string, mods browser.Modifiers) error {
	if err := b.Input(ctx, browser.InputEvent{Type: browser.InputKeyDown, Key: key, Modifiers: mods}); err != nil {
		return err
	}
	return b.Input(ctx, browser.InputEvent{Type: browser.InputKeyUp, Key: key, Modifiers: mods})
}

// jsString quotes s as a JavaScript string literal (JSON is valid JS,
// U+2028/U+2029 included, which encoding/json escapes).
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// StepError is the error of a failed sequence: which step failed and why.
type StepError struct {
	Index int // 0-based position in the sequence
	Kind  sequence.Kind
	Step  string // sequence.Step.String(), secrets unexpanded
	Err   error
	// redact are secret values to hide from Error().
	redact []string
}

func (e *StepError) Error() string {
	msg := e.Err.Error()
	for _, s := range e.redact {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "***")
		}
	}
	return fmt.Sprintf("step %d (%s): %s", e.Index, e.Step, msg)
}

func (e *StepError) Unwrap() error { return e.Err }

// cdpModifiers encodes a press step's modifiers for browser.InputEvent.
func cdpModifiers(m sequence.Modifiers) browser.Modifiers {
	var mods browser.Modifiers
	for _, f := range []struct {
		on  bool
		bit browser.Modifiers
	}{{m.Alt, browser.ModAlt}, {m.Ctrl, browser.ModCtrl}, {m.Meta, browser.ModMeta}, {m.Shift, browser.ModShift}} {
		if f.on {
			mods |= f.bit
		}
	}
	return mods
}
