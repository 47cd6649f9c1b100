package browser

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock/clocktest"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
)

// fakePage answers like a page: Handle closes the dialog.
type fakePage struct {
	mu      sync.Mutex
	answers []PromptAnswer
	p       *Prompts
	seen    []Prompt
}

func newFakePage(c *clocktest.Clock) *fakePage {
	f := &fakePage{}
	f.p = &Prompts{Clock: c, Timeout: time.Minute, Handle: func(_ context.Context, a PromptAnswer) error {
		f.mu.Lock()
		f.answers = append(f.answers, a)
		f.mu.Unlock()
		f.p.Closed(a.Accept)
		return nil
	}}
	return f
}

func (f *fakePage) got() ([]PromptAnswer, []Prompt) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]PromptAnswer(nil), f.answers...), append([]Prompt(nil), f.seen...)
}

func TestPrompts(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// run drives the dialog; it returns the answers the page should
		// have got.
		run func(t *testing.T, f *fakePage, c *clocktest.Clock) []PromptAnswer
	}{
		{"nobody listens: dismissed at once", func(t *testing.T, f *fakePage, c *clocktest.Clock) []PromptAnswer {
			f.p.Opened(PromptConfirm, "sure?", "", "http://a/")
			return []PromptAnswer{{}}
		}},
		{"first answer wins", func(t *testing.T, f *fakePage, c *clocktest.Clock) []PromptAnswer {
			defer f.p.Subscribe(f.watch)()
			f.p.Opened(PromptPrompt, "name?", "bob", "http://a/")
			p, ok := f.p.Open()
			if !ok || p.Message != "name?" || p.Default != "bob" {
				t.Fatalf("open: %+v %v", p, ok)
			}
			if err := f.p.Answer(ctx, p.ID, PromptAnswer{Accept: true, Text: "alice"}); err != nil {
				t.Fatal(err)
			}
			if err := f.p.Answer(ctx, p.ID, PromptAnswer{Text: "late"}); !errors.Is(err, ErrNoPrompt) {
				t.Fatalf("second answer: %v", err)
			}
			return []PromptAnswer{{Accept: true, Text: "alice"}}
		}},
		{"an old dialog's answer is refused", func(t *testing.T, f *fakePage, c *clocktest.Clock) []PromptAnswer {
			defer f.p.Subscribe(f.watch)()
			f.p.Opened(PromptAlert, "one", "", "http://a/")
			first, _ := f.p.Open()
			f.p.Closed(true) // gone with its document
			f.p.Opened(PromptConfirm, "two", "", "http://a/")
			if err := f.p.Answer(ctx, first.ID, PromptAnswer{Accept: true}); !errors.Is(err, ErrNoPrompt) {
				t.Fatalf("answer to the closed dialog: %v", err)
			}
			second, _ := f.p.Open()
			if err := f.p.Answer(ctx, second.ID, PromptAnswer{}); err != nil {
				t.Fatal(err)
			}
			return []PromptAnswer{{}}
		}},
		{"nobody answers: dismissed after the timeout", func(t *testing.T, f *fakePage, c *clocktest.Clock) []PromptAnswer {
			defer f.p.Subscribe(f.watch)()
			f.p.Opened(PromptConfirm, "sure?", "", "http://a/")
			c.Advance(59 * time.Second)
			if _, ok := f.p.Open(); !ok {
				t.Fatal("dismissed before the timeout")
			}
			c.Advance(time.Second)
			return []PromptAnswer{{}}
		}},
		{"a long text is clipped", func(t *testing.T, f *fakePage, c *clocktest.Clock) []PromptAnswer {
			defer f.p.Subscribe(f.watch)()
			long := string(make([]byte, MaxPromptText+10))
			f.p.Opened(PromptPrompt, long, long, "http://a/")
			p, _ := f.p.Open()
			if len(p.Message) != MaxPromptText || len(p.Default) != MaxPromptText {
				t.Fatalf("message %d, default %d bytes", len(p.Message), len(p.Default))
			}
			_ = f.p.Answer(ctx, p.ID, PromptAnswer{Accept: true, Text: long})
			return []PromptAnswer{{Accept: true, Text: long[:MaxPromptText]}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := clocktest.New(time.Unix(0, 0))
			f := newFakePage(c)
			want := tc.run(t, f, c)
			testutil.Eventually(t, 10*time.Second, func() error {
				got, _ := f.got()
				if len(got) != len(want) {
					return errors.New("answers not all in")
				}
				for i := range got {
					if got[i] != want[i] {
						t.Fatalf("answer %d: %+v, want %+v", i, got[i], want[i])
					}
				}
				if _, open := f.p.Open(); open {
					return errors.New("still open")
				}
				return nil
			})
			f.p.End()
			if c.Active() != 0 {
				t.Fatalf("%d timers left", c.Active())
			}
		})
	}
}

func (f *fakePage) watch(p Prompt) { f.mu.Lock(); f.seen = append(f.seen, p); f.mu.Unlock() }
