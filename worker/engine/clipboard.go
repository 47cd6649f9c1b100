package engine

import (
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
