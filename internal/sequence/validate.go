package sequence

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/cloudbrowser-go/cloudbrowser/internal/navurl"
)

// MaxSteps bounds the length of one sequence.
const MaxSteps = 200

// Rules are the context-dependent checks of Validate.
type Rules struct {
	// NoVars rejects ${name} variables; ${secret:NAME} stays allowed.
	// Initialization sequences cannot contain variables (they run before
	// any user exists), and pool sequences have nobody to supply them.
	NoVars bool
	// What names the sequence in the NoVars message, e.g. "the
	// initialization sequence".
	What string
}

// Validate checks every step and returns Errors naming the path of each
// problem (path is the sequence's own path, e.g. "pool.init"), or nil.
func (q Sequence) Validate(path string, r Rules) error {
	var es Errors
	if len(q) > MaxSteps {
		es = append(es, FieldError{Field: path, Msg: fmt.Sprintf("has %d steps, more than %d", len(q), MaxSteps)})
	}
	for i, s := range q {
		es = append(es, s.validate(fmt.Sprintf("%s[%d]", path, i), r)...)
	}
	if len(es) > 0 {
		return es
	}
	return nil
}

func (s Step) validate(path string, r Rules) []FieldError {
	var es []FieldError
	at := func(field string) string {
		if field == "" {
			return path
		}
		return path + "." + field
	}
	for _, p := range s.problems {
		es = append(es, FieldError{Field: at(p.Field), Msg: p.Msg})
	}
	if len(s.problems) > 0 && (s.Kind == "" || !isKind(string(s.Kind))) {
		return es // nothing more to check without a kind
	}
	bad := func(field, format string, args ...any) {
		for _, p := range s.problems {
			if p.Field == field {
				return // already reported while decoding
			}
		}
		es = append(es, FieldError{Field: at(field), Msg: fmt.Sprintf(format, args...)})
	}
	k := string(s.Kind)
	// text checks a templated string field and returns its literal form
	// (references replaced by "x") and whether it has references.
	text := func(field, v string, required bool) (string, bool) {
		if required && strings.TrimSpace(v) == "" {
			bad(field, "required")
			return "", false
		}
		parts, err := parseTemplate(v)
		if err != nil {
			bad(field, "%v", err)
			return "", false
		}
		var lit strings.Builder
		refs := false
		for _, p := range parts {
			if p.ref == nil {
				lit.WriteString(p.lit)
				continue
			}
			refs = true
			lit.WriteString("x")
			if !p.ref.secret && r.NoVars {
				what := r.What
				if what == "" {
					what = "this sequence"
				}
				bad(field, "variable ${%s}: %s cannot contain variables (only ${secret:NAME})", p.ref.name, what)
			}
		}
		return lit.String(), refs
	}
	switch s.Kind {
	case KindNavigate:
		lit, refs := text(k, s.URL, true)
		parts, _ := parseTemplate(s.URL)
		// A URL starting with a reference (a secret base URL) can only be
		// checked when the step runs.
		if lit != "" && !(refs && len(parts) > 0 && parts[0].ref != nil) {
			if err := navurl.Check(lit); err != nil {
				bad(k, "%v", err)
			}
		}
	case KindClick, KindType, KindWaitVisible:
		text(k, s.Selector, true)
		if s.Kind == KindType {
			text("text", s.Text, false)
		}
	case KindPress:
		if _, refs := text(k, s.Key, true); !refs && strings.TrimSpace(s.Key) != "" {
			if _, _, err := ParseKey(s.Key); err != nil {
				bad(k, "%v", err)
			}
		}
	case KindWaitURL:
		if _, refs := text(k, s.Pattern, true); s.Regexp && !refs && s.Pattern != "" {
			if _, err := regexp.Compile(s.Pattern); err != nil {
				bad(k, "bad regexp: %v", err)
			}
		}
	case KindEval:
		text(k, s.JS, true)
	case KindSleep:
		if s.Sleep <= 0 {
			bad(k, "must be a positive duration")
		} else if s.Sleep > MaxDuration {
			bad(k, "must be at most %s", MaxDuration)
		}
	case KindReload:
	case KindSetCookie:
		c := s.Cookie
		if c == nil {
			bad(k, "required (an object with name and value)")
			break
		}
		text(k+".name", c.Name, true)
		text(k+".value", c.Value, false)
		text(k+".domain", c.Domain, false)
		text(k+".path", c.Path, false)
		switch c.SameSite {
		case "", "Strict", "Lax", "None":
		default:
			bad(k+".sameSite", "must be Strict, Lax, None or empty")
		}
	default:
		bad("", "unknown step kind %q (want one of %s)", s.Kind, kindList())
	}
	if s.Timeout < 0 {
		bad("timeout", "must not be negative")
	} else if s.Timeout > MaxDuration {
		bad("timeout", "must be at most %s", MaxDuration)
	}
	return es
}

// ref is a ${...} reference in a text value.
type ref struct {
	secret bool
	name   string
}

// part is a literal run or a reference of a template.
type part struct {
	lit string
	ref *ref
}

var nameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// parseTemplate splits s into literals and ${name} / ${secret:NAME}
// references; "$${" is a literal "${".
func parseTemplate(s string) ([]part, error) {
	var parts []part
	var lit strings.Builder
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$${"):
			lit.WriteString("${")
			i += 3
		case strings.HasPrefix(s[i:], "${"):
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				return nil, fmt.Errorf("unterminated ${ at offset %d (write $${ for a literal ${)", i)
			}
			body := s[i+2 : i+end]
			r := &ref{name: body}
			if n, ok := strings.CutPrefix(body, "secret:"); ok {
				r = &ref{secret: true, name: n}
			}
			if !nameRe.MatchString(r.name) {
				return nil, fmt.Errorf("bad reference ${%s}: want ${NAME} or ${secret:NAME} with NAME of letters, digits and _", clip(body))
			}
			if lit.Len() > 0 {
				parts = append(parts, part{lit: lit.String()})
				lit.Reset()
			}
			parts = append(parts, part{ref: r})
			i += end + 1
		default:
			lit.WriteByte(s[i])
			i++
		}
	}
	if lit.Len() > 0 {
		parts = append(parts, part{lit: lit.String()})
	}
	return parts, nil
}

// Secrets resolves a secret by name; ok is false when it is not set.
type Secrets func(name string) (value string, ok bool)

// EnvSecrets resolves secret NAME from the environment variable
// prefix+NAME (e.g. CB_SECRET_DEMO_PASSWORD with prefix "CB_SECRET_").
func EnvSecrets(prefix string) Secrets {
	return func(name string) (string, bool) { return os.LookupEnv(prefix + name) }
}

// MapSecrets resolves secrets from a map (tests, static configuration).
func MapSecrets(m map[string]string) Secrets {
	return func(name string) (string, bool) { v, ok := m[name]; return v, ok }
}

var errNoSecrets = errors.New("no secret resolver configured")

// Expander expands the references of one sequence run and remembers the
// secret values it used (Used), to keep them out of error messages.
type Expander struct {
	Secrets Secrets
	Vars    map[string]string
	Used    []string
}

// Expand resolves s; with js, each reference becomes a JavaScript string
// literal, so a secret with quotes cannot change the script.
func (x *Expander) Expand(s string, js bool) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	parts, err := parseTemplate(s)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, p := range parts {
		if p.ref == nil {
			b.WriteString(p.lit)
			continue
		}
		var v string
		if p.ref.secret {
			if x.Secrets == nil {
				return "", fmt.Errorf("secret %s: %w", p.ref.name, errNoSecrets)
			}
			val, ok := x.Secrets(p.ref.name)
			if !ok {
				return "", fmt.Errorf("secret %s is not set on this worker", p.ref.name)
			}
			v = val
			x.Used = append(x.Used, val)
		} else {
			val, ok := x.Vars[p.ref.name]
			if !ok {
				return "", fmt.Errorf("variable ${%s} is not defined", p.ref.name)
			}
			v = val
		}
		if js {
			q, _ := json.Marshal(v)
			v = string(q)
		}
		b.WriteString(v)
	}
	return b.String(), nil
}

// Modifiers are the modifier keys of a press step.
type Modifiers struct{ Alt, Ctrl, Meta, Shift bool }

// ParseKey splits "Control+Shift+a" into the key and its modifiers.
func ParseKey(s string) (string, Modifiers, error) {
	var key, prefix string
	switch {
	case s == "+":
		key = "+"
	case strings.HasSuffix(s, "++"):
		key, prefix = "+", strings.TrimSuffix(s, "++")
	default:
		i := strings.LastIndexByte(s, '+')
		key, prefix = s[i+1:], s[:max(i, 0)]
	}
	if key == "" {
		return "", Modifiers{}, fmt.Errorf("key %q: no key after the modifiers", s)
	}
	var mods Modifiers
	if prefix != "" {
		for m := range strings.SplitSeq(prefix, "+") {
			switch strings.ToLower(m) {
			case "alt":
				mods.Alt = true
			case "control", "ctrl":
				mods.Ctrl = true
			case "meta", "cmd", "command":
				mods.Meta = true
			case "shift":
				mods.Shift = true
			default:
				return "", Modifiers{}, fmt.Errorf("key %q: unknown modifier %q (want Alt, Control, Meta or Shift)", s, m)
			}
		}
	}
	return key, mods, nil
}
