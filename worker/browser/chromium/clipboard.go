package chromium

import (
	"sync"
	"unicode/utf8"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// Clipboard out. Headless Chromium's clipboard is its own, in memory, and
// CDP cannot read it; so a script in every document (pagescript.Copy)
// reports what the page copies: the selection of a copy or cut (or the
// text the page's handler puts on the event's clipboardData instead), and
// what the page hands navigator.clipboard. Who receives it is the client
// engine's business (only the viewer whose input caused it).

// copyWatch hands the page's copies to who watches them.
type copyWatch struct {
	mu   sync.Mutex
	subs map[int]func(string)
	next int
}

// OnCopy implements browser.Browser.
func (w *copyWatch) OnCopy(fn func(string)) (stop func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.subs == nil {
		w.subs = map[int]func(string){}
	}
	id := w.next
	w.next++
	w.subs[id] = fn
	return func() {
		w.mu.Lock()
		delete(w.subs, id)
		w.mu.Unlock()
	}
}

// copied delivers one copy; called on the event reader goroutine, so the
// subscribers' fn must not block.
func (w *copyWatch) copied(text string) {
	if len(text) > browser.MaxCopyText {
		// The page counts UTF-16 units, we bytes: cut at a character.
		n := browser.MaxCopyText
		for n > 0 && !utf8.RuneStart(text[n]) {
			n--
		}
		text = text[:n]
	}
	w.mu.Lock()
	fns := make([]func(string), 0, len(w.subs))
	for _, fn := range w.subs {
		fns = append(fns, fn)
	}
	w.mu.Unlock()
	for _, fn := range fns {
		fn(text)
	}
}
