package chromium

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// promptLog collects what OnPrompt reports.
type promptLog struct {
	mu  sync.Mutex
	got []browser.Prompt
}

func (l *promptLog) add(p browser.Prompt) { l.mu.Lock(); l.got = append(l.got, p); l.mu.Unlock() }

func (l *promptLog) all() []browser.Prompt {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]browser.Prompt(nil), l.got...)
}

// openDialog makes the page call script (a dialog) from a timer, and
// title the page with what it returned.
func openDialog(t *testing.T, b browser.Browser, script string) {
	t.Helper()
	if err := b.Evaluate(testCtx(t), `setTimeout(() => { document.title = "after " + String(`+script+`); }, 0); 1`, nil); err != nil {
		t.Fatal(err)
	}
}

func waitTitle(t *testing.T, b browser.Browser, want string) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, func() error {
		if got := b.Page().Title; got != want {
			return errors.New("title " + got + ", want " + want)
		}
		return nil
	})
}

// TestDialogsAnswered: a page's alert, confirm and prompt reach OnPrompt
// with their text, wait for the answer, and get it; a second answer to
// the same dialog is refused; the close is reported.
func TestDialogsAnswered(t *testing.T) {
	rt := shared(t)
	for _, tc := range []struct {
		name, script string
		kind         browser.PromptKind
		message, def string
		answer       browser.PromptAnswer
		title        string
	}{
		{"alert", `alert("hello")`, browser.PromptAlert, "hello", "", browser.PromptAnswer{Accept: true}, "after undefined"},
		{"confirm yes", `confirm("sure?")`, browser.PromptConfirm, "sure?", "", browser.PromptAnswer{Accept: true}, "after true"},
		{"confirm no", `confirm("sure?")`, browser.PromptConfirm, "sure?", "", browser.PromptAnswer{}, "after false"},
		{"prompt", `prompt("name?", "bob")`, browser.PromptPrompt, "name?", "bob", browser.PromptAnswer{Accept: true, Text: "日本語"}, "after 日本語"},
		{"prompt cancelled", `prompt("name?")`, browser.PromptPrompt, "name?", "", browser.PromptAnswer{}, "after null"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBrowser(t, rt, browser.Options{URL: "data:text/html,<title>before</title><p>x"})
			waitLoaded(t, b)
			var log promptLog
			defer b.OnPrompt(log.add)()
			openDialog(t, b, tc.script)
			var p browser.Prompt
			testutil.Eventually(t, 30*time.Second, func() error {
				var ok bool
				if p, ok = b.OpenPrompt(); !ok {
					return errors.New("no dialog open")
				}
				return nil
			})
			if p.Kind != tc.kind || p.Message != tc.message || p.Default != tc.def {
				t.Fatalf("dialog %+v, want %s %q %q", p, tc.kind, tc.message, tc.def)
			}
			if err := b.AnswerPrompt(testCtx(t), p.ID, tc.answer); err != nil {
				t.Fatal(err)
			}
			if err := b.AnswerPrompt(testCtx(t), p.ID, tc.answer); !errors.Is(err, browser.ErrNoPrompt) {
				t.Fatalf("second answer: %v, want ErrNoPrompt", err)
			}
			waitTitle(t, b, tc.title)
			testutil.Eventually(t, 10*time.Second, func() error {
				got := log.all()
				if len(got) != 2 || got[0].Closed || !got[1].Closed || got[1].ID != p.ID || got[1].Accepted != tc.answer.Accept {
					return errors.New("prompt events not open then closed")
				}
				return nil
			})
		})
	}
}

// TestDialogsNeverHang: a page's dialog never stops it for good: with
// nobody listening it is dismissed at once; with a listener who never
// answers, after the timeout.
func TestDialogsNeverHang(t *testing.T) {
	rt := shared(t)
	for _, tc := range []struct {
		name   string
		listen bool
	}{
		{"nobody listens", false},
		{"nobody answers", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBrowser(t, rt, browser.Options{URL: "data:text/html,<title>before</title><p>x", PromptTimeout: 300 * time.Millisecond})
			waitLoaded(t, b)
			if tc.listen {
				defer b.OnPrompt(func(browser.Prompt) {})()
			}
			openDialog(t, b, `confirm("sure?")`)
			waitTitle(t, b, "after false")
			ctx, cancel := context.WithTimeout(testCtx(t), 10*time.Second)
			defer cancel()
			var title string
			if err := b.Evaluate(ctx, "document.title", &title); err != nil || title != "after false" {
				t.Fatalf("page after the dialog: %q %v", title, err)
			}
		})
	}
}
