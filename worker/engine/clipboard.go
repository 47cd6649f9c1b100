package engine

import (
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// Clipboard out: what the page copies goes to the viewer whose gesture
// caused it (gestures.actor), and to nobody else; a copy with no such
// viewer (the page copying on a timer, or long after) reaches no one.

// hubClipboard is a hub's side of the page's copies.
type hubClipboard struct {
	b   browser.Browser
	g   *gestures
	log zerolog.Logger
}

// watch sends each copy of the page to its viewer; stop ends it.
func (h *hubClipboard) watch() (stop func()) {
	return h.b.OnCopy(h.copied)
}

func (h *hubClipboard) copied(text string) {
	c := h.g.actor()
	if c == nil {
		h.log.Debug().Int("bytes", len(text)).Msg("page copied with no viewer's gesture: not sent")
		return
	}
	c.enqueue(encode(clipboardMsg{Text: text}))
}

// hubEditable tells the viewers who may type whether the page's focused
// element takes text, so a phone's keyboard opens only for a text field.
type hubEditable struct {
	b       browser.Browser
	on      atomic.Bool
	writers func([]byte)
}

// watch follows the page's focus; stop ends it.
func (h *hubEditable) watch() (stop func()) {
	return h.b.OnEditable(func(on bool) {
		h.on.Store(on)
		h.writers(encode(editableMsg{On: on}))
	})
}

// sendState tells a joining viewer who may type where the focus is.
func (h *hubEditable) sendState(c *client) {
	if h.on.Load() {
		c.enqueue(encode(editableMsg{On: true}))
	}
}
