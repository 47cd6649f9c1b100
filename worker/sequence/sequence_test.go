package sequence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

func TestMain(m *testing.M) { testutil.Main(m) }

func runner() *Runner {
	return &Runner{Secrets: MapSecrets(map[string]string{"PW": `p"a'ss`}), Poll: time.Millisecond}
}

func TestRunEveryKind(t *testing.T) {
	b := newFake("about:blank", map[string]*fakeEl{
		"#user": {x: 10, y: 20},
		"#pass": {x: 10, y: 40, value: "old"},
		"#go": {x: 50, y: 60, onClick: func(b *fakeBrowser) {
			b.mu.Lock()
			b.page.URL = "http://site.test/search?x=1"
			b.mu.Unlock()
		}},
		"#q": {x: 5, y: 5, hiddenPolls: 3},
	})
	q := Sequence{
		Navigate("http://site.test/login"),
		Type("#user", "demo"),
		Type("#pass", "${secret:PW}"),
		Click("#go"),
		WaitURL("/search"),
		WaitURLMatch(`^http://site\.test/search\?x=\d$`),
		WaitVisible("#q"),
		Press("Enter"),
		Press("Control+a"),
		Eval("check(${secret:PW})"),
		Sleep(time.Millisecond),
		Reload(),
		SetCookie(Cookie{Name: "lang", Value: "en"}),
		Type("#pass", ""),
	}
	if err := q.Validate("seq", Rules{NoVars: true}); err != nil {
		t.Fatal(err)
	}
	if err := runner().Run(context.Background(), b, q); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if got := b.navigates; !reflect.DeepEqual(got, []string{"http://site.test/login"}) {
		t.Errorf("navigates %v", got)
	}
	if v := b.els["#user"].value; v != "demo" {
		t.Errorf("#user = %q", v)
	}
	// The click is real mouse input at the element's center.
	var clicks []browser.InputEvent
	var keys []string
	for _, ev := range b.events {
		switch ev.Type {
		case browser.InputMouseMove, browser.InputMouseDown, browser.InputMouseUp:
			clicks = append(clicks, ev)
		case browser.InputKeyDown, browser.InputKeyUp:
			keys = append(keys, fmt.Sprintf("%s:%s:%d", ev.Type, ev.Key, ev.Modifiers))
		}
	}
	if len(clicks) != 3 || clicks[1].Type != browser.InputMouseDown || clicks[1].X != 50 || clicks[1].Y != 60 ||
		clicks[1].Button != browser.ButtonLeft || clicks[2].Type != browser.InputMouseUp {
		t.Errorf("click events %+v", clicks)
	}
	wantKeys := []string{"keydown:Enter:0", "keyup:Enter:0", "keydown:a:2", "keyup:a:2", "keydown:Delete:0", "keyup:Delete:0"}
	if !reflect.DeepEqual(keys, wantKeys) {
		t.Errorf("keys %v, want %v", keys, wantKeys)
	}
	if v := b.els["#pass"].value; v != "" {
		t.Errorf("#pass = %q after typing \"\"", v)
	}
	// In eval a secret becomes a JS string literal: its quotes cannot
	// break out of the script.
	if !contains(b.evals, `check("p\"a'ss")`) {
		t.Errorf("eval with secret not found in %q", b.evals)
	}
	if b.reloads != 1 {
		t.Errorf("reloads %d", b.reloads)
	}
	want := browser.Cookie{Name: "lang", Value: "en", Domain: "site.test", Path: "/"}
	if len(b.cookies) != 1 || b.cookies[0] != want {
		t.Errorf("cookies %+v, want %+v", b.cookies, want)
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func TestTypedSecret(t *testing.T) {
	b := newFake("http://x.test/", map[string]*fakeEl{"#p": {}})
	if err := runner().Run(context.Background(), b, Sequence{Type("#p", "${secret:PW}!")}); err != nil {
		t.Fatal(err)
	}
	if v := b.els["#p"].value; v != `p"a'ss!` {
		t.Errorf("typed %q", v)
	}
}

func TestStepErrors(t *testing.T) {
	ctx := context.Background()
	short := 30 * time.Millisecond
	for _, tc := range []struct {
		name    string
		els     map[string]*fakeEl
		navErr  error
		step    Step
		want    []string // substrings of the error
		is      error
		vars    map[string]string
		secrets Secrets
	}{
		{name: "missing element times out", step: WaitVisible("#nope").WithTimeout(short),
			want: []string{"step 1 (waitVisible \"#nope\")", "no element matches #nope"}, is: context.DeadlineExceeded},
		{name: "hidden element", els: map[string]*fakeEl{"#h": {hidden: true}}, step: Click("#h").WithTimeout(short),
			want: []string{"#h is hidden"}, is: context.DeadlineExceeded},
		{name: "covered element", els: map[string]*fakeEl{"#c": {covered: "div#overlay"}}, step: Click("#c").WithTimeout(short),
			want: []string{"covered by div#overlay"}, is: context.DeadlineExceeded},
		{name: "disabled input", els: map[string]*fakeEl{"#d": {disabled: true}}, step: Type("#d", "x").WithTimeout(short),
			want: []string{"#d is disabled"}},
		{name: "invalid selector fails at once", step: Click("!!bad"), want: []string{"invalid selector"}},
		{name: "url never matches", step: WaitURL("/never").WithTimeout(short), want: []string{"url is http://x.test/"}, is: context.DeadlineExceeded},
		{name: "eval throws", step: Eval("throw new Error('no session')"), want: []string{"step 1 (eval", "thrown"}},
		{name: "missing secret", step: Type("#p", "${secret:NOPE}"), els: map[string]*fakeEl{"#p": {}},
			want: []string{"secret NOPE is not set"}},
		{name: "no resolver", step: Type("#p", "${secret:PW}"), els: map[string]*fakeEl{"#p": {}}, secrets: func(string) (string, bool) { return "", false },
			want: []string{"secret PW is not set"}},
		{name: "undefined variable", step: Navigate("http://x.test/${path}"), want: []string{"variable ${path} is not defined"}},
		{name: "navigation error redacts the secret", step: Navigate("http://x.test/?k=${secret:PW}"),
			navErr: errors.New(`net::ERR_FAILED at http://x.test/?k=p"a'ss`), want: []string{"k=***"}},
		{name: "bad key", step: Press("Hyper+x"), want: []string{"unknown modifier"}},
		{name: "cookie without host", step: SetCookie(Cookie{Name: "a", Value: "b"}), want: []string{"has no host"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newFake("http://x.test/", tc.els)
			if tc.name == "cookie without host" {
				b.page.URL = "about:blank"
			}
			b.navErr = tc.navErr
			r := runner()
			if tc.secrets != nil {
				r.Secrets = tc.secrets
			}
			err := r.RunVars(ctx, b, Sequence{Sleep(time.Microsecond), tc.step}, tc.vars)
			var se *StepError
			if !errors.As(err, &se) {
				t.Fatalf("error %v is not a *StepError", err)
			}
			if se.Index != 1 || se.Kind != tc.step.Kind {
				t.Errorf("step %d %s, want 1 %s", se.Index, se.Kind, tc.step.Kind)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), `p"a'ss`) {
				t.Errorf("error %q leaks the secret", err)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v is not %v", err, tc.is)
			}
		})
	}
}

func TestRunVars(t *testing.T) {
	b := newFake("about:blank", nil)
	err := runner().RunVars(context.Background(), b, Sequence{Navigate("http://x.test/search?q=${q}")}, map[string]string{"q": "go"})
	if err != nil {
		t.Fatal(err)
	}
	if b.Page().URL != "http://x.test/search?q=go" {
		t.Errorf("url %s", b.Page().URL)
	}
}

func TestCanceledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := runner().Run(ctx, newFake("about:blank", nil), Sequence{Sleep(time.Hour)})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
}

func TestBrowserEndsWhileWaiting(t *testing.T) {
	b := newFake("about:blank", nil)
	b.Close(context.Background())
	err := runner().Run(context.Background(), b, Sequence{WaitVisible("#x")})
	if err == nil || !strings.Contains(err.Error(), "browser ended") {
		t.Fatalf("err %v", err)
	}
}

func TestParseKey(t *testing.T) {
	for _, tc := range []struct {
		in   string
		key  string
		mods browser.Modifiers
		bad  bool
	}{
		{in: "Enter", key: "Enter"},
		{in: "a", key: "a"},
		{in: "+", key: "+"},
		{in: "Control++", key: "+", mods: browser.ModCtrl},
		{in: "Control+Shift+Tab", key: "Tab", mods: browser.ModCtrl | browser.ModShift},
		{in: "ctrl+alt+meta+x", key: "x", mods: browser.ModCtrl | browser.ModAlt | browser.ModMeta},
		{in: "Control+", bad: true},
		{in: "Hyper+a", bad: true},
	} {
		key, mods, err := parseKey(tc.in)
		if (err != nil) != tc.bad || key != tc.key && !tc.bad || mods != tc.mods && !tc.bad {
			t.Errorf("parseKey(%q) = %q, %d, %v", tc.in, key, mods, err)
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
