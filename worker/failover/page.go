package failover

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// What a page's snapshot holds of it, and how a new browser is brought
// back to it.

// storageScript reads the current page's origin and its localStorage and
// sessionStorage, at most limit characters of keys and values (entries
// beyond are left out and counted).
const storageScript = `(() => {
  const lim = %d, out = {origin: location.origin, local: {}, session: {}, skipped: 0};
  let n = 0;
  const take = (name, dst) => {
    let st;
    try { st = window[name]; if (!st) return; } catch (e) { return; }
    for (let i = 0; i < st.length; i++) {
      const k = st.key(i), v = st.getItem(k);
      if (k === null || v === null) continue;
      const s = k.length + v.length;
      if (n + s > lim) { out.skipped++; continue; }
      n += s; dst[k] = v;
    }
  };
  take("localStorage", out.local);
  take("sessionStorage", out.session);
  return out;
})()`

type pageStorage struct {
	Origin  string            `json:"origin"`
	Local   map[string]string `json:"local"`
	Session map[string]string `json:"session"`
	Skipped int               `json:"skipped"`
}

// webOrigin reports origins whose storage is kept (http and https pages).
func webOrigin(o string) bool {
	return strings.HasPrefix(o, "http://") || strings.HasPrefix(o, "https://")
}

// take reads b's state; info is what the worker knows of it. What cannot
// be read (Evaluate with the Null runtime, a page that is loading) is left
// out.
func (sn *Snapshots) take(ctx context.Context, b Subject, info Info) wire.BrowserSnapshot {
	br, st := b.Browser(), b.Snap()
	s := wire.BrowserSnapshot{ID: info.ID, Owner: info.Owner, Created: info.Created, URL: br.Page().URL,
		Width: int(st.width.Load()), Height: int(st.height.Load()), Theirs: info.Theirs, Name: info.Name, Perms: info.Perms}
	log := sn.log.With().Str("instance", info.Instance).Str("browser", info.ID).Logger()
	var ps pageStorage
	if err := br.Evaluate(ctx, fmt.Sprintf(storageScript, maxStorage), &ps); err != nil {
		log.Debug().Err(err).Msg("snapshot: page storage not read")
	} else if webOrigin(ps.Origin) {
		// The page runs this script's globals: check the bound again.
		n := 0
		for _, m := range []map[string]string{ps.Local, ps.Session} {
			for key, v := range m {
				if n += len(key) + len(v); n > 2*maxStorage {
					delete(m, key)
					ps.Skipped++
				}
			}
		}
		if ps.Skipped > 0 {
			log.Warn().Int("skipped", ps.Skipped).Int("limit", maxStorage).Msg("snapshot: storage entries over the limit left out")
		}
		s.Origin, s.Local, s.Session = ps.Origin, nonEmpty(ps.Local), nonEmpty(ps.Session)
	}
	// What the page's fields show: a page restored elsewhere comes back
	// with the user's typed text, caret and scroll, not only its URL.
	if form, err := browser.CaptureForm(ctx, br, maxForm); err != nil {
		log.Debug().Err(err).Msg("snapshot: form state not read")
	} else {
		if form != nil && form.Skipped > 0 {
			log.Warn().Int("skipped", form.Skipped).Int("limit", maxForm).Msg("snapshot: form fields over the limit left out")
		}
		s.Form = form
	}
	cookies, err := br.Cookies(ctx)
	if err != nil {
		log.Debug().Err(err).Msg("snapshot: cookies not read")
	}
	n, skipped := 0, 0
	for _, c := range cookies {
		if n += len(c.Name) + len(c.Value) + len(c.Domain) + len(c.Path); n > maxCookies {
			skipped++
			continue
		}
		s.Cookies = append(s.Cookies, wire.SnapshotCookie{Name: c.Name, Value: c.Value, Domain: c.Domain, Path: c.Path,
			Expires: c.Expires, HTTPOnly: c.HTTPOnly, Secure: c.Secure, SameSite: c.SameSite})
	}
	if skipped > 0 {
		log.Warn().Int("skipped", skipped).Int("limit", maxCookies).Msg("snapshot: cookies over the limit left out")
	}
	return s
}

func nonEmpty(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}

// restoreStorageScript replaces the storage of the page's origin with a
// snapshot's, if the page is at that origin; it answers whether it did.
const restoreStorageScript = `((origin, local, session) => {
  if (location.origin !== origin) return false;
  const put = (st, m) => { st.clear(); for (const k of Object.keys(m)) st.setItem(k, m[k]); };
  put(localStorage, local);
  put(sessionStorage, session);
  return true;
})(%s, %s, %s)`

// RestorePage brings b, a new browser, to snapshot s's page: cookies first
// (so the first request is already signed in), the viewport, the URL, then
// the origin's storage and a reload so the page's scripts see it, and last
// what its form fields showed. Storage and form state that cannot be put
// back are logged, not fatal.
func (sn *Snapshots) RestorePage(ctx context.Context, b Subject, s wire.BrowserSnapshot) error {
	br := b.Browser()
	if len(s.Cookies) > 0 {
		cs := make([]browser.Cookie, 0, len(s.Cookies))
		for _, c := range s.Cookies {
			cs = append(cs, browser.Cookie{Name: c.Name, Value: c.Value, Domain: c.Domain, Path: c.Path,
				Expires: c.Expires, HTTPOnly: c.HTTPOnly, Secure: c.Secure, SameSite: c.SameSite})
		}
		if err := br.SetCookies(ctx, cs); err != nil {
			return fmt.Errorf("restore cookies: %w", err)
		}
	}
	if s.Width > 0 && s.Height > 0 {
		if err := br.Input(ctx, browser.InputEvent{Type: browser.InputResize, Width: s.Width, Height: s.Height}); err != nil {
			return fmt.Errorf("restore the viewport: %w", err)
		}
		b.Snap().Resized(s.Width, s.Height)
	}
	if s.URL == "" || s.URL == "about:blank" {
		return nil
	}
	if err := br.Navigate(ctx, s.URL); err != nil {
		return fmt.Errorf("restore the page %s: %w", s.URL, err)
	}
	if err := sn.restoreStorage(ctx, b, s); err != nil {
		return err
	}
	sn.restoreForm(ctx, b, s.Form)
	return nil
}

// restoreForm puts a snapshot's form state back once the page has loaded
// (browser.RestoreForm). A page that does not take it is logged, not
// fatal: the page itself is back.
func (sn *Snapshots) restoreForm(ctx context.Context, b Subject, form *wire.FormState) {
	if form == nil {
		return
	}
	info := b.Describe()
	log := sn.log.With().Str("instance", info.Instance).Str("browser", info.ID).Logger()
	r, err := browser.RestoreForm(ctx, b.Browser(), form)
	if err != nil {
		log.Warn().Err(err).Msg("restore: form state not restored")
		return
	}
	log.Debug().Int("fields", len(form.Fields)).Int("applied", r.Applied).Int("pending", r.Pending).Msg("restore: form state restored")
}

// restoreStorage replaces the storage of the restored page's origin with
// the snapshot's and reloads the page, so its scripts start from it.
func (sn *Snapshots) restoreStorage(ctx context.Context, b Subject, s wire.BrowserSnapshot) error {
	br := b.Browser()
	if len(s.Local)+len(s.Session) == 0 || !webOrigin(s.Origin) {
		return nil
	}
	enc := func(v any) string { j, _ := json.Marshal(v); return string(j) }
	local, session := s.Local, s.Session
	if local == nil {
		local = map[string]string{}
	}
	if session == nil {
		session = map[string]string{}
	}
	var done bool
	if err := br.Evaluate(ctx, fmt.Sprintf(restoreStorageScript, enc(s.Origin), enc(local), enc(session)), &done); err != nil || !done {
		sn.log.Warn().Str("browser", b.Describe().ID).Str("origin", s.Origin).Bool("at_origin", done).Err(err).Msg("restore: page storage not restored")
		return nil
	}
	// Reload so the page's scripts start from the restored storage. A URL
	// with a fragment would not reload by navigating to it again.
	if u, err := url.Parse(s.URL); err == nil && u.Fragment == "" && !strings.HasSuffix(s.URL, "#") {
		err = br.Navigate(ctx, s.URL)
		if err != nil {
			return fmt.Errorf("reload %s: %w", s.URL, err)
		}
		return nil
	}
	// The form state is put back in the reloaded document, not in this
	// one: mark this one and wait until it is gone.
	marked := br.Evaluate(ctx, reloadMarkScript, nil) == nil
	if err := br.Input(ctx, browser.InputEvent{Type: browser.InputReload}); err != nil {
		return fmt.Errorf("reload %s: %w", s.URL, err)
	}
	for marked {
		var old bool
		if err := br.Evaluate(ctx, reloadMarkedScript, &old); err == nil && !old {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("reload %s: %w", s.URL, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// reloadMarkScript marks a document about to be reloaded;
// reloadMarkedScript tells whether the page is still that document.
const (
	reloadMarkScript   = `window[Symbol.for("cloudbrowser.reloading")] = true`
	reloadMarkedScript = `window[Symbol.for("cloudbrowser.reloading")] === true`
)
