package sequence

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseKey(t *testing.T) {
	for _, tc := range []struct {
		in   string
		key  string
		mods Modifiers
		bad  bool
	}{
		{in: "Enter", key: "Enter"},
		{in: "a", key: "a"},
		{in: "+", key: "+"},
		{in: "Control++", key: "+", mods: Modifiers{Ctrl: true}},
		{in: "Control+Shift+Tab", key: "Tab", mods: Modifiers{Ctrl: true, Shift: true}},
		{in: "ctrl+alt+meta+x", key: "x", mods: Modifiers{Ctrl: true, Alt: true, Meta: true}},
		{in: "Control+", bad: true},
		{in: "Hyper+a", bad: true},
	} {
		key, mods, err := ParseKey(tc.in)
		if (err != nil) != tc.bad || key != tc.key && !tc.bad || mods != tc.mods && !tc.bad {
			t.Errorf("ParseKey(%q) = %q, %+v, %v", tc.in, key, mods, err)
		}
	}
}

func TestParseTemplate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // parts rendered as lit|{ref}|{secret:ref}
		bad  bool
	}{
		{in: "plain", want: "plain"},
		{in: "a${x}b", want: "a|{x}|b"},
		{in: "${secret:PW}", want: "{secret:PW}"},
		{in: "$${x}", want: "${x}"},
		{in: "cost $5 {x}", want: "cost $5 {x}"},
		{in: "${x", bad: true},
		{in: "${}", bad: true},
		{in: "${secret:}", bad: true},
		{in: "${a-b}", bad: true},
		{in: "${env:X}", bad: true},
	} {
		parts, err := parseTemplate(tc.in)
		if (err != nil) != tc.bad {
			t.Errorf("%q: err %v", tc.in, err)
			continue
		}
		var out []string
		for _, p := range parts {
			switch {
			case p.ref == nil:
				out = append(out, p.lit)
			case p.ref.secret:
				out = append(out, "{secret:"+p.ref.name+"}")
			default:
				out = append(out, "{"+p.ref.name+"}")
			}
		}
		if got := strings.Join(out, "|"); !tc.bad && got != tc.want {
			t.Errorf("%q: got %q, want %q", tc.in, got, tc.want)
		}
	}
}

const exampleJSON = `[
  {"navigate": "https://demo.example/login"},
  {"type": "#user", "text": "demo"},
  {"type": "#password", "text": "${secret:DEMO_PASSWORD}"},
  {"click": "button[type=submit]", "timeout": "15s"},
  {"press": "Enter"},
  {"waitURL": "/search"},
  {"waitURL": "^https://demo\\.example/search", "regexp": true},
  {"waitVisible": "#q"},
  {"eval": "document.title"},
  {"sleep": "500ms"},
  {"reload": true},
  {"setCookie": {"name": "lang", "value": "en", "domain": "demo.example", "path": "/"}}
]`

func TestJSONRoundTrip(t *testing.T) {
	var q Sequence
	if err := json.Unmarshal([]byte(exampleJSON), &q); err != nil {
		t.Fatal(err)
	}
	if err := q.Validate("pool.init", Rules{NoVars: true}); err != nil {
		t.Fatal(err)
	}
	want := Sequence{
		Navigate("https://demo.example/login"),
		Type("#user", "demo"),
		Type("#password", "${secret:DEMO_PASSWORD}"),
		Click("button[type=submit]").WithTimeout(15 * time.Second),
		Press("Enter"),
		WaitURL("/search"),
		WaitURLMatch(`^https://demo\.example/search`),
		WaitVisible("#q"),
		Eval("document.title"),
		Sleep(500 * time.Millisecond),
		Reload(),
		SetCookie(Cookie{Name: "lang", Value: "en", Domain: "demo.example", Path: "/"}),
	}
	if !reflect.DeepEqual(q, want) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", q, want)
	}
	raw, err := json.Marshal(q)
	if err != nil {
		t.Fatal(err)
	}
	var again Sequence
	if err := json.Unmarshal(raw, &again); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again, want) {
		t.Fatalf("round trip through %s gave %+v", raw, again)
	}
}

func TestValidateNamesEveryProblem(t *testing.T) {
	in := `[
	  {"navigate": "file:///etc/passwd"},
	  {"clik": "#go"},
	  {"click": ""},
	  {"type": "#q"},
	  {"waitURL": "(", "regexp": true},
	  {"sleep": "soon"},
	  {"click": "#a", "timeout": "-1s"},
	  {"click": "#a", "text": "x"},
	  {"navigate": "https://x/", "click": "#a"},
	  {"reload": false},
	  {"setCookie": {"value": "v", "sameSite": "Sometimes"}},
	  {"type": "#u", "text": "${user}"},
	  {"eval": "${secret:bad-name}"},
	  {"press": "Hyper+a"},
	  "navigate",
	  {"click": "#a", "wait": "1s"},
	  {"sleep": 5},
	  {"navigate": "${secret:BASE}/login"}
	]`
	var q Sequence
	if err := json.Unmarshal([]byte(in), &q); err != nil {
		t.Fatal(err)
	}
	err := q.Validate("pool.init", Rules{NoVars: true, What: "the initialization sequence"})
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("err %v", err)
	}
	want := map[string]string{
		"pool.init[0].navigate":            "scheme \"file\" not allowed",
		"pool.init[1]":                     "no step kind",
		"pool.init[2].click":               "required",
		"pool.init[3].text":                "required",
		"pool.init[4].waitURL":             "bad regexp",
		"pool.init[5].sleep":               "want a duration string",
		"pool.init[6].timeout":             "must be positive",
		"pool.init[7].text":                "not allowed in a click step",
		"pool.init[8]":                     "more than one step kind",
		"pool.init[9].reload":              "must be true",
		"pool.init[10].setCookie.name":     "required",
		"pool.init[10].setCookie.sameSite": "must be Strict",
		"pool.init[11].text":               "the initialization sequence cannot contain variables",
		"pool.init[12].eval":               "bad reference",
		"pool.init[13].press":              "unknown modifier",
		"pool.init[14]":                    "must be an object",
		"pool.init[15].wait":               "unknown key",
		"pool.init[16].sleep":              "want a duration string",
	}
	got := map[string]string{}
	for _, e := range es {
		if _, dup := got[e.Field]; dup {
			t.Errorf("two problems for %s: %q and %q", e.Field, got[e.Field], e.Msg)
		}
		got[e.Field] = e.Msg
	}
	for f, w := range want {
		if !strings.Contains(got[f], w) {
			t.Errorf("%s: got %q, want it to contain %q", f, got[f], w)
		}
	}
	for f, m := range got {
		if _, ok := want[f]; !ok {
			t.Errorf("unexpected problem %s: %s", f, m)
		}
	}
	// Secrets stay allowed where variables are not; without NoVars a
	// variable is fine.
	ok := Sequence{Type("#p", "${secret:PW}"), Type("#u", "${user}")}
	if err := ok[:1].Validate("x", Rules{NoVars: true}); err != nil {
		t.Errorf("secret rejected: %v", err)
	}
	if err := ok.Validate("x", Rules{}); err != nil {
		t.Errorf("variable rejected without NoVars: %v", err)
	}
}

func TestStringHidesSecrets(t *testing.T) {
	s := Type("#p", "${secret:PW}").String()
	if s != `type "#p" "${secret:PW}"` {
		t.Errorf("String() = %s", s)
	}
}
