package engine

import (
	"context"
	"errors"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// The page's dialogs (alert, confirm, prompt, beforeunload) in the client
// engines: every viewer is shown the open one (also one who joins while it
// is open); a viewer who may use the browser answers, the first answer
// wins, and every viewer is told it closed. Read-only viewers see it but
// their answers are refused.

// answerTimeout bounds the worker's answer to Chromium.
const answerTimeout = 10 * time.Second

// dialogOf is p as the engines see it.
func dialogOf(p browser.Prompt) dialogMsg {
	return dialogMsg{ID: p.ID, Kind: string(p.Kind), Message: p.Message, Default: p.Default, URL: p.URL}
}

// watchDialogs tells every viewer of each dialog the page opens or closes;
// stop ends it.
func (h *Hub) watchDialogs() (stop func()) {
	return h.b.OnPrompt(func(p browser.Prompt) {
		if p.Closed {
			h.broadcast(encode(dialogClosedMsg{ID: p.ID, Accepted: p.Accepted}))
			return
		}
		h.log.Debug().Uint64("dialog", p.ID).Str("kind", string(p.Kind)).Msg("page opened a dialog")
		h.broadcast(encode(dialogOf(p)))
	})
}

// sendOpenDialog shows a joining viewer the dialog open now, if any.
func (h *Hub) sendOpenDialog(c *client) {
	if p, ok := h.b.OpenPrompt(); ok && !p.Closed {
		c.enqueue(encode(dialogOf(p)))
	}
}

// answer takes a viewer's answer to a dialog.
func (h *Hub) answer(c *client, a answerMsg) {
	if c.readOnly.Load() {
		c.enqueue(encode(errorMsg{Message: "read-only: only someone who may use this browser answers its dialogs"}))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), answerTimeout)
	defer cancel()
	err := h.b.AnswerPrompt(ctx, a.Dialog, browser.PromptAnswer{Accept: a.Accept, Text: a.Value})
	switch {
	case err == nil:
		h.log.Debug().Uint64("dialog", a.Dialog).Bool("accept", a.Accept).Msg("dialog answered")
	case errors.Is(err, browser.ErrNoPrompt):
		// Another viewer answered first (or it timed out): its close
		// reached everyone already.
	default:
		h.log.Warn().Err(err).Uint64("dialog", a.Dialog).Msg("cannot answer the page's dialog")
		c.enqueue(encode(errorMsg{Message: "the page's dialog could not be answered"}))
	}
}
