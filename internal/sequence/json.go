package sequence

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
)

// Duration is a time.Duration written in JSON as a Go duration string
// ("500ms", "30s", "10m"). The number 0 is accepted too, since 0 is how
// configurations disable a feature.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON implements json.Unmarshaler. The error is a
// *json.UnmarshalTypeError, so encoding/json prefixes it with the path of
// the field ("pool.ttl").
func (d *Duration) UnmarshalJSON(b []byte) error {
	v, err := parseDuration(b)
	if err != nil {
		return &json.UnmarshalTypeError{Value: err.Error(), Type: reflect.TypeFor[Duration]()}
	}
	*d = Duration(v)
	return nil
}

// parseDuration reads a JSON duration; the error text is a short
// description of the bad value.
func parseDuration(b []byte) (time.Duration, error) {
	b = bytes.TrimSpace(b)
	if string(b) == "0" {
		return 0, nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return 0, fmt.Errorf("%s (want a duration string such as \"30s\")", clip(string(b)))
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q (want a duration string such as \"30s\")", clip(s))
	}
	return v, nil
}

// stepKeys are the modifiers a step object may carry besides its kind key,
// and the kinds that accept them.
var stepKeys = map[string][]Kind{
	"timeout": nil, // every kind
	"text":    {KindType},
	"regexp":  {KindWaitURL},
}

func isKind(k string) bool { return slices.Contains(Kinds, Kind(k)) }

// UnmarshalJSON reads a step object. It fails only on malformed JSON or a
// value that is not an object: every other problem (unknown kind, wrong
// types, misplaced keys) is kept and reported by Validate with its field
// path, so one deploy lists every mistake at once.
func (s *Step) UnmarshalJSON(b []byte) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil || obj == nil {
		*s = Step{problems: []FieldError{{Msg: "must be an object such as {\"navigate\": \"https://...\"}"}}}
		return nil
	}
	*s = Step{}
	bad := func(field, format string, args ...any) {
		s.problems = append(s.problems, FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var kinds []string
	for _, k := range keys {
		if isKind(k) {
			kinds = append(kinds, k)
		}
	}
	switch len(kinds) {
	case 0:
		bad("", "no step kind: want one key of %s", kindList())
		return nil
	case 1:
		s.Kind = Kind(kinds[0])
	default:
		bad("", "more than one step kind (%s): one step per object", strings.Join(kinds, ", "))
		return nil
	}
	str := func(key string, dst *string) {
		if err := json.Unmarshal(obj[key], dst); err != nil {
			bad(key, "must be a string")
		}
	}
	raw := obj[string(s.Kind)]
	switch s.Kind {
	case KindNavigate:
		str(string(s.Kind), &s.URL)
	case KindClick, KindType, KindWaitVisible:
		str(string(s.Kind), &s.Selector)
	case KindPress:
		str(string(s.Kind), &s.Key)
	case KindWaitURL:
		str(string(s.Kind), &s.Pattern)
	case KindEval:
		str(string(s.Kind), &s.JS)
	case KindSleep:
		d, err := parseDuration(raw)
		if err != nil {
			bad(string(s.Kind), "%v", err)
		}
		s.Sleep = d
	case KindReload:
		var v bool
		if err := json.Unmarshal(raw, &v); err != nil || !v {
			bad(string(s.Kind), "must be true")
		}
	case KindSetCookie:
		var c Cookie
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			bad(string(s.Kind), "must be an object with name, value and optionally domain, path, secure, httpOnly, sameSite: %v", err)
		} else {
			s.Cookie = &c
		}
	}
	for _, k := range keys {
		if k == string(s.Kind) {
			continue
		}
		allowed, known := stepKeys[k]
		switch {
		case !known:
			bad(k, "unknown key (a step has one kind key of %s, plus timeout, text for type, regexp for waitURL)", kindList())
			continue
		case allowed != nil && !slices.Contains(allowed, s.Kind):
			bad(k, "not allowed in a %s step", s.Kind)
			continue
		}
		switch k {
		case "timeout":
			d, err := parseDuration(obj[k])
			if err != nil {
				bad(k, "%v", err)
			} else if d <= 0 {
				bad(k, "must be positive (leave it out for the default %s)", DefaultTimeout)
			}
			s.Timeout = d
		case "text":
			str(k, &s.Text)
		case "regexp":
			if err := json.Unmarshal(obj[k], &s.Regexp); err != nil {
				bad(k, "must be true or false")
			}
		}
	}
	if s.Kind == KindType {
		if _, ok := obj["text"]; !ok {
			bad("text", "required (the text to type; \"\" clears the field)")
		}
	}
	return nil
}

func kindList() string {
	names := make([]string, len(Kinds))
	for i, k := range Kinds {
		names[i] = string(k)
	}
	return strings.Join(names, ", ")
}

// MarshalJSON writes a step in the form UnmarshalJSON reads.
func (s Step) MarshalJSON() ([]byte, error) {
	m := map[string]any{}
	switch s.Kind {
	case KindNavigate:
		m[string(s.Kind)] = s.URL
	case KindClick, KindWaitVisible:
		m[string(s.Kind)] = s.Selector
	case KindType:
		m[string(s.Kind)] = s.Selector
		m["text"] = s.Text
	case KindPress:
		m[string(s.Kind)] = s.Key
	case KindWaitURL:
		m[string(s.Kind)] = s.Pattern
		if s.Regexp {
			m["regexp"] = true
		}
	case KindEval:
		m[string(s.Kind)] = s.JS
	case KindSleep:
		m[string(s.Kind)] = Duration(s.Sleep)
	case KindReload:
		m[string(s.Kind)] = true
	case KindSetCookie:
		m[string(s.Kind)] = s.Cookie
	default:
		return nil, fmt.Errorf("sequence: cannot marshal step of unknown kind %q", s.Kind)
	}
	if s.Timeout > 0 {
		m["timeout"] = Duration(s.Timeout)
	}
	return json.Marshal(m)
}
