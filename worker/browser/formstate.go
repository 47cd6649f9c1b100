package browser

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// Form state: a moved browser is its page loaded again from a
// snapshot, and what the user typed into it lived only in the page. So a
// snapshot also reads what the page's fields show, its focus, caret and
// scroll (one Runtime.evaluate, formstate.js), and the restored page gets
// them back once it has loaded.

//go:embed formstate.js
var formJS string

// FormRestoreWait bounds how long RestoreForm waits for the page's load
// event before it restores what is there; FormRestoreKeep is how long
// after that it keeps restoring elements the page only makes later.
const (
	FormRestoreWait = 10 * time.Second
	FormRestoreKeep = 10 * time.Second
)

// CaptureForm reads what b's page shows: the values of its inputs,
// textareas, selects, checkboxes, radios and editable elements (passwords,
// files and hidden inputs never), the focused element and its selection,
// and the scroll of the window and of scrolled elements. limit bounds the
// characters of keys and values; fields beyond it are left out and
// counted in Skipped. It returns nil when the page shows nothing to put
// back.
func CaptureForm(ctx context.Context, b Browser, limit int) (*wire.FormState, error) {
	var st wire.FormState
	if err := b.Evaluate(ctx, fmt.Sprintf("(() => {\n%s\nreturn capture(%d);\n})()", formJS, limit), &st); err != nil {
		return nil, fmt.Errorf("read the form state: %w", err)
	}
	// The script runs among the page's own scripts: check the bound again.
	n, kept := 0, st.Fields[:0]
	for _, f := range st.Fields {
		size := len(f.Key) + len(f.Value)
		for _, v := range f.Values {
			size += len(v)
		}
		// Bytes here, UTF-16 units there: up to 3 bytes per unit.
		if n += size; n > 3*limit {
			st.Skipped++
			continue
		}
		kept = append(kept, f)
	}
	st.Fields = kept
	if len(st.Fields) == 0 {
		st.Fields = nil
	}
	if len(st.Scrolls) == 0 {
		st.Scrolls = nil
	}
	if st.Focus == "" {
		st.Selection = nil
	}
	if st.Fields == nil && st.Focus == "" && st.Scrolls == nil && st.ScrollX == 0 && st.ScrollY == 0 && st.Skipped == 0 {
		return nil, nil
	}
	return &st, nil
}

// FormRestored says what RestoreForm did at once: Applied changes (values
// set, focus, caret, scroll), and Pending parts whose elements were not
// there yet (the page keeps getting them for FormRestoreKeep).
type FormRestored struct {
	Applied int `json:"applied"`
	Pending int `json:"pending"`
}

// RestoreForm puts st back into b's page after its load event (waiting at
// most FormRestoreWait): values are set with the native setters and
// announced with input and change events, so the page's code sees them;
// then the focus, the caret and the scroll. It is idempotent (what already
// matches is left alone, with no event) and never overwrites what the user
// changed since it began. Elements the page makes later get their state
// when they appear, for FormRestoreKeep.
func RestoreForm(ctx context.Context, b Browser, st *wire.FormState) (FormRestored, error) {
	var out FormRestored
	if st == nil {
		return out, nil
	}
	js, err := json.Marshal(st)
	if err != nil {
		return out, fmt.Errorf("encode the form state: %w", err)
	}
	expr := fmt.Sprintf("(() => {\n%s\nreturn restore(%s, %d, %d);\n})()", formJS, js,
		FormRestoreWait.Milliseconds(), FormRestoreKeep.Milliseconds())
	if err := b.Evaluate(ctx, expr, &out); err != nil {
		return out, fmt.Errorf("restore the form state: %w", err)
	}
	return out, nil
}
