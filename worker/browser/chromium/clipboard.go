package chromium

import (
	"unicode/utf8"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/feed"
)

// Clipboard out. Headless Chromium's clipboard is its own, in memory, and
// CDP cannot read it; so a script in every document (pagescript.Copy)
// reports what the page copies: the selection of a copy or cut (or the
// text the page's handler puts on the event's clipboardData instead), and
// what the page hands navigator.clipboard. Who receives it is the client
// engine's business (only the viewer whose input caused it).

// copyWatch hands the page's copies to who watches them.
type copyWatch struct {
	copies feed.Feed[string]
}

// OnCopy implements browser.Browser.
func (w *copyWatch) OnCopy(fn func(string)) (stop func()) { return w.copies.Subscribe(fn) }

// copied delivers one copy; called on the event reader goroutine, it only
// posts.
func (w *copyWatch) copied(text string) {
	if len(text) > browser.MaxCopyText {
		// The page counts UTF-16 units, we bytes: cut at a character.
		n := browser.MaxCopyText
		for n > 0 && !utf8.RuneStart(text[n]) {
			n--
		}
		text = text[:n]
	}
	w.copies.Post(text, nil)
}
