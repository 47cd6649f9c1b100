package engine

import (
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// The page's dialogs (alert, confirm, prompt, beforeunload, a site's
// sign-in, a permission request) in the client engines: every viewer is shown the open one (also one who joins while it
// is open); a viewer who may use the browser answers, the first answer
// wins, and every viewer is told it closed. Read-only viewers see it but
// their answers are refused.

// hubDialogs is a hub's side of its page's dialogs: it shows them to the
// viewers and takes their answers. The open dialog itself is the
// browser's (browser.Browser.OpenPrompt).
type hubDialogs struct {
	b         browser.Browser
	log       zerolog.Logger
	broadcast func([]byte) // to every viewer
}

// answerTimeout bounds the worker's answer to Chromium.
const answerTimeout = 10 * time.Second

// dialogOf is p as the engines see it.
func dialogOf(p browser.Prompt) dialogMsg {
	return dialogMsg{ID: p.ID, Kind: string(p.Kind), Message: p.Message, Default: p.Default, URL: p.URL}
}

// watch tells every viewer of each dialog the page opens or closes; stop
// ends it.
func (d *hubDialogs) watch() (stop func()) {
	return d.b.OnPrompt(func(p browser.Prompt) {
		if p.Closed {
			d.broadcast(encode(dialogClosedMsg{ID: p.ID, Accepted: p.Accepted}))
			return
		}
		d.log.Debug().Uint64("dialog", p.ID).Str("kind", string(p.Kind)).Msg("page opened a dialog")
		d.broadcast(encode(dialogOf(p)))
	})
}

// sendOpen shows a joining viewer the dialog open now, if any.
func (d *hubDialogs) sendOpen(c *client) {
	if p, ok := d.b.OpenPrompt(); ok && !p.Closed {
		c.enqueue(encode(dialogOf(p)))
	}
}

// validPosition says whether p is a place on Earth with an accuracy.
func validPosition(p positionFields) bool {
	return p.Latitude >= -90 && p.Latitude <= 90 && p.Longitude >= -180 && p.Longitude <= 180 && p.Accuracy >= 0 && p.Accuracy < 1e7
}

// answer takes a viewer's answer to a dialog.
func (d *hubDialogs) answer(c *client, a answerMsg) {
	if c.readOnly.Load() {
		c.enqueue(encode(errorMsg{Message: "read-only: only someone who may use this browser answers its dialogs"}))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), answerTimeout)
	defer cancel()
	ans := browser.PromptAnswer{Accept: a.Accept, Text: a.Value, Password: a.Password}
	if p := a.Position; p != nil && validPosition(*p) {
		ans.Position = &browser.Position{Latitude: p.Latitude, Longitude: p.Longitude, Accuracy: p.Accuracy}
	}
	err := d.b.AnswerPrompt(ctx, a.Dialog, ans)
	switch {
	case err == nil:
		d.log.Debug().Uint64("dialog", a.Dialog).Bool("accept", a.Accept).Msg("dialog answered")
	case errors.Is(err, browser.ErrNoPrompt):
		// Another viewer answered first (or it timed out): its close
		// reached everyone already.
	default:
		d.log.Warn().Err(err).Uint64("dialog", a.Dialog).Msg("cannot answer the page's dialog")
		c.enqueue(encode(errorMsg{Message: "the page's dialog could not be answered"}))
	}
}
