package seqrun

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/sequence"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

func TestMain(m *testing.M) { testutil.Main(m) }

func runner() *Runner {
	return &Runner{Secrets: sequence.MapSecrets(map[string]string{"PW": `p"a'ss`}), Poll: time.Millisecond}
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
	q := sequence.Sequence{
		sequence.Navigate("http://site.test/login"),
		sequence.Type("#user", "demo"),
		sequence.Type("#pass", "${secret:PW}"),
		sequence.Click("#go"),
		sequence.WaitURL("/search"),
		sequence.WaitURLMatch(`^http://site\.test/search\?x=\d$`),
		sequence.WaitVisible("#q"),
		sequence.Press("Enter"),
		sequence.Press("Control+a"),
		sequence.Eval("check(${secret:PW})"),
		sequence.Sleep(time.Millisecond),
		sequence.Reload(),
		sequence.SetCookie(sequence.Cookie{Name: "lang", Value: "en"}),
		sequence.Type("#pass", ""),
	}
	if err := q.Validate("seq", sequence.Rules{NoVars: true}); err != nil {
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
	if err := runner().Run(context.Background(), b, sequence.Sequence{sequence.Type("#p", "${secret:PW}!")}); err != nil {
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
		step    sequence.Step
		want    []string // substrings of the error
		is      error
		vars    map[string]string
		secrets sequence.Secrets
	}{
		{name: "missing element times out", step: sequence.WaitVisible("#nope").WithTimeout(short),
			want: []string{"step 1 (waitVisible \"#nope\")", "no element matches #nope"}, is: context.DeadlineExceeded},
		{name: "hidden element", els: map[string]*fakeEl{"#h": {hidden: true}}, step: sequence.Click("#h").WithTimeout(short),
			want: []string{"#h is hidden"}, is: context.DeadlineExceeded},
		{name: "covered element", els: map[string]*fakeEl{"#c": {covered: "div#overlay"}}, step: sequence.Click("#c").WithTimeout(short),
			want: []string{"covered by div#overlay"}, is: context.DeadlineExceeded},
		{name: "disabled input", els: map[string]*fakeEl{"#d": {disabled: true}}, step: sequence.Type("#d", "x").WithTimeout(short),
			want: []string{"#d is disabled"}},
		{name: "invalid selector fails at once", step: sequence.Click("!!bad"), want: []string{"invalid selector"}},
		{name: "url never matches", step: sequence.WaitURL("/never").WithTimeout(short), want: []string{"url is http://x.test/"}, is: context.DeadlineExceeded},
		{name: "eval throws", step: sequence.Eval("throw new Error('no session')"), want: []string{"step 1 (eval", "thrown"}},
		{name: "missing secret", step: sequence.Type("#p", "${secret:NOPE}"), els: map[string]*fakeEl{"#p": {}},
			want: []string{"secret NOPE is not set"}},
		{name: "no resolver", step: sequence.Type("#p", "${secret:PW}"), els: map[string]*fakeEl{"#p": {}}, secrets: func(string) (string, bool) { return "", false },
			want: []string{"secret PW is not set"}},
		{name: "undefined variable", step: sequence.Navigate("http://x.test/${path}"), want: []string{"variable ${path} is not defined"}},
		{name: "navigation error redacts the secret", step: sequence.Navigate("http://x.test/?k=${secret:PW}"),
			navErr: errors.New(`net::ERR_FAILED at http://x.test/?k=p"a'ss`), want: []string{"k=***"}},
		{name: "bad key", step: sequence.Press("Hyper+x"), want: []string{"unknown modifier"}},
		{name: "cookie without host", step: sequence.SetCookie(sequence.Cookie{Name: "a", Value: "b"}), want: []string{"has no host"}},
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
			err := r.RunVars(ctx, b, sequence.Sequence{sequence.Sleep(time.Microsecond), tc.step}, tc.vars)
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
	err := runner().RunVars(context.Background(), b, sequence.Sequence{sequence.Navigate("http://x.test/search?q=${q}")}, map[string]string{"q": "go"})
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
	err := runner().Run(ctx, newFake("about:blank", nil), sequence.Sequence{sequence.Sleep(time.Hour)})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
}

func TestBrowserEndsWhileWaiting(t *testing.T) {
	b := newFake("about:blank", nil)
	b.Close(context.Background())
	err := runner().Run(context.Background(), b, sequence.Sequence{sequence.WaitVisible("#x")})
	if err == nil || !strings.Contains(err.Error(), "browser ended") {
		t.Fatalf("err %v", err)
	}
}
