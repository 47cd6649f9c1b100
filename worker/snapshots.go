package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/ids"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/httpserve"
)

// Browser snapshots (issue 12, failover): every virtual browser's page is
// saved at the master, so that when this worker dies the instance placed
// again elsewhere recreates it with the same id, owner, grants, URL,
// viewport, cookies, the storage of the page's origin and what its form
// fields show (values, focus, caret, scroll: browser.CaptureForm). A browser is
// snapshotted right after it is made, after each top-level navigation, and
// at most every Config.SnapshotInterval while something happens in it
// (input, repaints). Snapshots run off the input path, one at a time per
// browser; one that equals the last one sent is not sent again.

// DefaultSnapshotInterval is the default Config.SnapshotInterval.
const DefaultSnapshotInterval = 5 * time.Second

// Bounds on what one snapshot takes.
const (
	// maxSnapshotStorage bounds the localStorage and sessionStorage
	// entries (keys and values, in characters) of one browser; entries
	// beyond it are left out, with a log line.
	maxSnapshotStorage = 1 << 20
	// maxSnapshotCookies bounds the cookies (names and values) kept.
	maxSnapshotCookies = 512 << 10
	// maxSnapshotForm bounds the form fields' keys and values (in
	// characters) kept of one page (browser.CaptureForm).
	maxSnapshotForm = 256 << 10
	// inputHoldMax bounds how long a migration holds a browser's input
	// (holdInput): a move that has not happened by then (the master gave
	// up: no other worker, or the restore failed there) gives the input
	// back to this copy.
	inputHoldMax = 20 * time.Second
	// snapshotTimeout bounds taking and sending one snapshot.
	snapshotTimeout = 10 * time.Second
	// restoreTimeout bounds recreating one browser.
	restoreTimeout = 45 * time.Second
	// restoreParallel browsers of an instance are recreated at a time.
	restoreParallel = 4
)

// snapshotStore is where snapshots are kept: the master.
type snapshotStore interface {
	SaveBrowser(ctx context.Context, req wire.SaveBrowser) error
	Browsers(ctx context.Context, iid, after string) (wire.BrowserSnapshots, error)
}

// snapState is a browser's snapshot bookkeeping.
type snapState struct {
	// dirty: something happened since the last snapshot.
	dirty atomic.Bool
	// width and height are the viewport as last set (CSS pixels).
	width, height atomic.Int32

	// sendMu serializes taking and sending snapshots, so a periodic one
	// taken before a migration's cannot be stored after it.
	sendMu sync.Mutex

	// inMu orders the clients' input with a migration's hold: input is
	// dispatched under its read lock and a hold takes the write lock, so
	// once holdInput returns nothing more reaches the page. held and
	// holdGen are guarded by it.
	inMu    sync.RWMutex
	held    bool
	holdGen uint64

	mu      sync.Mutex
	running bool // a snapshot goroutine runs for this browser
	again   bool // asked again while running
	gone    bool // the browser closed: its snapshot is to be removed
	url     string
	last    []byte // the last snapshot sent (without its time)
}

// snapshotter is the worker's failover side: it snapshots its browsers
// into the snapshot store, restores a re-placed instance's browsers from
// theirs, and holds their input during a migration.
type snapshotter struct{ w *Worker }

// pageChanged: a top-level navigation is snapshotted at once.
func (sn snapshotter) pageChanged(vb *vbrowser, p browser.Page) {
	vb.snap.mu.Lock()
	moved := p.URL != vb.snap.url
	vb.snap.url = p.URL
	vb.snap.mu.Unlock()
	vb.snap.dirty.Store(true)
	if moved {
		sn.kickSnapshot(vb)
	}
}

// forgetSnapshot removes a closed browser's snapshot (after any snapshot
// of it still in flight).
func (sn snapshotter) forgetSnapshot(vb *vbrowser) {
	vb.snap.mu.Lock()
	vb.snap.gone = true
	vb.snap.mu.Unlock()
	sn.kickSnapshot(vb)
}

// kickSnapshot snapshots vb now, or right after the snapshot running.
func (sn snapshotter) kickSnapshot(vb *vbrowser) {
	if sn.w.snapshots == nil {
		return
	}
	s := &vb.snap
	s.mu.Lock()
	if s.running {
		s.again = true
		s.mu.Unlock()
		return
	}
	s.running = true
	s.mu.Unlock()
	go func() {
		for {
			s.dirty.Store(false)
			sn.snapshotOnce(vb)
			s.mu.Lock()
			if !s.again || sn.w.ctx.Err() != nil {
				s.running = false
				s.mu.Unlock()
				return
			}
			s.again = false
			s.mu.Unlock()
		}
	}()
}

// snapshotLoop snapshots the browsers something happened in, every
// interval, until the worker stops.
func (sn snapshotter) snapshotLoop(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-sn.w.ctx.Done():
			return
		case <-t.C:
		}
		for _, in := range sn.w.instances.all() {
			for _, vb := range in.browserList() {
				if vb.snap.dirty.Load() {
					sn.kickSnapshot(vb)
				}
			}
		}
	}
}

// snapshotOnce takes and sends one snapshot of vb (or removes it).
func (sn snapshotter) snapshotOnce(vb *vbrowser) {
	ctx, cancel := context.WithTimeout(sn.w.ctx, snapshotTimeout)
	defer cancel()
	vb.snap.sendMu.Lock()
	defer vb.snap.sendMu.Unlock()
	in := vb.inst
	req := wire.SaveBrowser{Instance: in.info.ID, Epoch: in.epoch()}
	vb.snap.mu.Lock()
	gone, sent := vb.snap.gone, vb.snap.last != nil
	vb.snap.mu.Unlock()
	if gone {
		if !sent {
			return
		}
		req.Remove = vb.id
		if err := sn.w.snapshots.SaveBrowser(ctx, req); err != nil {
			sn.w.log.Debug().Str("instance", in.info.ID).Str("browser", vb.id).Err(err).Msg("browser snapshot not removed")
		}
		return
	}
	select {
	case <-vb.released:
		// Given back without being closed on its own (its instance closed
		// or moved): nothing to save, and its browser may serve someone
		// else by now.
		return
	default:
	}
	snap := sn.takeSnapshot(ctx, vb)
	enc, _ := json.Marshal(snap)
	vb.snap.mu.Lock()
	same := bytes.Equal(enc, vb.snap.last)
	vb.snap.mu.Unlock()
	if same {
		return
	}
	snap.Taken = time.Now()
	req.Snapshot = &snap
	if err := sn.w.snapshots.SaveBrowser(ctx, req); err != nil {
		sn.w.log.Debug().Str("instance", in.info.ID).Str("browser", vb.id).Err(err).Msg("browser snapshot not saved")
		return
	}
	vb.snap.mu.Lock()
	vb.snap.last = enc
	vb.snap.mu.Unlock()
}

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

// takeSnapshot reads vb's state. What cannot be read (Evaluate with the
// Null runtime, a page that is loading) is left out.
func (sn snapshotter) takeSnapshot(ctx context.Context, vb *vbrowser) wire.BrowserSnapshot {
	in := vb.inst
	s := wire.BrowserSnapshot{ID: vb.id, Owner: vb.owner, Created: vb.created, URL: vb.b.Page().URL,
		Width: int(vb.snap.width.Load()), Height: int(vb.snap.height.Load())}
	in.mu.Lock()
	s.Theirs = in.byUser[vb.owner] == vb.id
	in.mu.Unlock()
	vb.subMu.Lock()
	s.Name = vb.name
	for p, r := range vb.perms {
		if s.Perms == nil {
			s.Perms = map[string]string{}
		}
		s.Perms[p] = r.String()
	}
	vb.subMu.Unlock()
	log := sn.w.log.With().Str("instance", in.info.ID).Str("browser", vb.id).Logger()
	var st pageStorage
	if err := vb.b.Evaluate(ctx, fmt.Sprintf(storageScript, maxSnapshotStorage), &st); err != nil {
		log.Debug().Err(err).Msg("snapshot: page storage not read")
	} else if webOrigin(st.Origin) {
		// The page runs this script's globals: check the bound again.
		n := 0
		for _, m := range []map[string]string{st.Local, st.Session} {
			for k, v := range m {
				if n += len(k) + len(v); n > 2*maxSnapshotStorage {
					delete(m, k)
					st.Skipped++
				}
			}
		}
		if st.Skipped > 0 {
			log.Warn().Int("skipped", st.Skipped).Int("limit", maxSnapshotStorage).Msg("snapshot: storage entries over the limit left out")
		}
		s.Origin, s.Local, s.Session = st.Origin, nonEmpty(st.Local), nonEmpty(st.Session)
	}
	// What the page's fields show (issue 33): typed text, the caret and
	// the scroll come back with the page.
	if form, err := browser.CaptureForm(ctx, vb.b, maxSnapshotForm); err != nil {
		log.Debug().Err(err).Msg("snapshot: form state not read")
	} else {
		if form != nil && form.Skipped > 0 {
			log.Warn().Int("skipped", form.Skipped).Int("limit", maxSnapshotForm).Msg("snapshot: form fields over the limit left out")
		}
		s.Form = form
	}
	cookies, err := vb.b.Cookies(ctx)
	if err != nil {
		log.Debug().Err(err).Msg("snapshot: cookies not read")
	}
	n, skipped := 0, 0
	for _, c := range cookies {
		if n += len(c.Name) + len(c.Value) + len(c.Domain) + len(c.Path); n > maxSnapshotCookies {
			skipped++
			continue
		}
		s.Cookies = append(s.Cookies, wire.SnapshotCookie{Name: c.Name, Value: c.Value, Domain: c.Domain, Path: c.Path,
			Expires: c.Expires, HTTPOnly: c.HTTPOnly, Secure: c.Secure, SameSite: c.SameSite})
	}
	if skipped > 0 {
		log.Warn().Int("skipped", skipped).Int("limit", maxSnapshotCookies).Msg("snapshot: cookies over the limit left out")
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

// restorePage brings a new browser to a snapshot's page: cookies first
// (so the first request is already signed in), the viewport, the URL,
// then the origin's storage and a reload so the page's scripts see it.
// Storage that cannot be put back is logged, not fatal.
func (sn snapshotter) restorePage(ctx context.Context, vb *vbrowser, s wire.BrowserSnapshot) error {
	b := vb.b
	if len(s.Cookies) > 0 {
		cs := make([]browser.Cookie, 0, len(s.Cookies))
		for _, c := range s.Cookies {
			cs = append(cs, browser.Cookie{Name: c.Name, Value: c.Value, Domain: c.Domain, Path: c.Path,
				Expires: c.Expires, HTTPOnly: c.HTTPOnly, Secure: c.Secure, SameSite: c.SameSite})
		}
		if err := b.SetCookies(ctx, cs); err != nil {
			return fmt.Errorf("restore cookies: %w", err)
		}
	}
	if s.Width > 0 && s.Height > 0 {
		if err := b.Input(ctx, browser.InputEvent{Type: browser.InputResize, Width: s.Width, Height: s.Height}); err != nil {
			return fmt.Errorf("restore the viewport: %w", err)
		}
		vb.snap.width.Store(int32(s.Width))
		vb.snap.height.Store(int32(s.Height))
	}
	if s.URL == "" || s.URL == "about:blank" {
		return nil
	}
	if err := b.Navigate(ctx, s.URL); err != nil {
		return fmt.Errorf("restore the page %s: %w", s.URL, err)
	}
	if err := sn.restoreStorage(ctx, vb, s); err != nil {
		return err
	}
	sn.restoreForm(ctx, vb, s.Form)
	return nil
}

// restoreForm puts a snapshot's form state back once the page has loaded
// (browser.RestoreForm). A page that does not take it is logged, not
// fatal: the page itself is back.
func (sn snapshotter) restoreForm(ctx context.Context, vb *vbrowser, form *wire.FormState) {
	if form == nil {
		return
	}
	log := sn.w.log.With().Str("instance", vb.inst.info.ID).Str("browser", vb.id).Logger()
	r, err := browser.RestoreForm(ctx, vb.b, form)
	if err != nil {
		log.Warn().Err(err).Msg("restore: form state not restored")
		return
	}
	log.Debug().Int("fields", len(form.Fields)).Int("applied", r.Applied).Int("pending", r.Pending).Msg("restore: form state restored")
}

// restoreStorage replaces the storage of the restored page's origin with
// the snapshot's and reloads the page, so its scripts start from it.
func (sn snapshotter) restoreStorage(ctx context.Context, vb *vbrowser, s wire.BrowserSnapshot) error {
	b := vb.b
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
	if err := b.Evaluate(ctx, fmt.Sprintf(restoreStorageScript, enc(s.Origin), enc(local), enc(session)), &done); err != nil || !done {
		sn.w.log.Warn().Str("browser", vb.id).Str("origin", s.Origin).Bool("at_origin", done).Err(err).Msg("restore: page storage not restored")
		return nil
	}
	// Reload so the page's scripts start from the restored storage. A URL
	// with a fragment would not reload by navigating to it again.
	if u, err := url.Parse(s.URL); err == nil && u.Fragment == "" && !strings.HasSuffix(s.URL, "#") {
		err = b.Navigate(ctx, s.URL)
		if err != nil {
			return fmt.Errorf("reload %s: %w", s.URL, err)
		}
		return nil
	}
	// The form state is put back in the reloaded document, not in this
	// one: mark this one and wait until it is gone.
	marked := b.Evaluate(ctx, reloadMarkScript, nil) == nil
	if err := b.Input(ctx, browser.InputEvent{Type: browser.InputReload}); err != nil {
		return fmt.Errorf("reload %s: %w", s.URL, err)
	}
	for marked {
		var old bool
		if err := b.Evaluate(ctx, reloadMarkedScript, &old); err == nil && !old {
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

// loadSnapshots reads an instance's browser snapshots from the master.
func (sn snapshotter) loadSnapshots(ctx context.Context, iid string) ([]wire.BrowserSnapshot, error) {
	if sn.w.snapshots == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, stateWriteTimeout)
	defer cancel()
	var out []wire.BrowserSnapshot
	after := ""
	for {
		page, err := sn.w.snapshots.Browsers(ctx, iid, after)
		if err != nil {
			return nil, fmt.Errorf("load the browser snapshots of %s: %w", iid, err)
		}
		out = append(out, page.Browsers...)
		if !page.More || len(page.Browsers) == 0 {
			return out, nil
		}
		after = page.Browsers[len(page.Browsers)-1].ID
	}
}

// restoreBrowsers recreates a re-placed instance's browsers from their
// snapshots, a few at a time. Requests for one of them wait until it is
// back (instance.awaitRestore). One that fails is logged and left out:
// its users get a new browser through the strategy.
func (bm *browserMaker) restoreBrowsers(in *instance, snaps []wire.BrowserSnapshot) {
	sem := make(chan struct{}, restoreParallel)
	var wg sync.WaitGroup
	for _, s := range snaps {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			defer in.restored(s.ID)
			ctx, cancel := context.WithTimeout(bm.w.ctx, restoreTimeout)
			defer cancel()
			t0 := time.Now()
			vb, err := bm.restoreBrowser(ctx, in, s)
			if err != nil {
				bm.log.Warn().Str("instance", in.info.ID).Str("browser", s.ID).Str("user", s.Owner).Err(err).Msg("browser not restored")
				return
			}
			bm.log.Info().Str("instance", in.info.ID).Str("browser", vb.id).Str("user", vb.owner).Str("url", s.URL).
				Dur("took", time.Since(t0)).Msg("browser restored from its snapshot")
		}()
	}
	wg.Wait()
}

// restoreBrowser recreates one browser from its snapshot.
func (bm *browserMaker) restoreBrowser(ctx context.Context, in *instance, s wire.BrowserSnapshot) (*vbrowser, error) {
	if !ids.ValidBrowser(s.ID) {
		return nil, fmt.Errorf("snapshot with an invalid browser id %q", s.ID)
	}
	created := s.Created
	if created.IsZero() {
		created = time.Now()
	}
	vb := newVBrowser(in, s.ID, s.Owner)
	vb.created, vb.name = created, s.Name
	for p, r := range s.Perms {
		if role, err := httpserve.ParseRole(r); err == nil && role != httpserve.RoleNone && role < httpserve.RoleOwner && httpserve.ValidPrincipal(p) {
			vb.perms[p] = role
		}
	}
	got, err := bm.startBrowser(ctx, in, vb, "", s.Theirs, &s)
	if err == nil && got != vb {
		return nil, errors.New("a browser with this id already exists")
	}
	return got, err
}

// restored marks a pending browser as done (restored or not).
func (in *instance) restored(bid string) {
	in.mu.Lock()
	ch, ok := in.pending[bid]
	delete(in.pending, bid)
	in.mu.Unlock()
	if ok {
		close(ch)
	}
}

// awaitRestore waits until bid, if it is being restored, is done.
func (in *instance) awaitRestore(ctx context.Context, bid string) {
	in.mu.Lock()
	ch, ok := in.pending[bid]
	in.mu.Unlock()
	if !ok {
		return
	}
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

// awaitUserRestore waits for the browsers of user being restored, so the
// strategy finds their restored browser instead of making another.
func (in *instance) awaitUserRestore(ctx context.Context, user string) {
	in.mu.Lock()
	var chs []chan struct{}
	for bid, ch := range in.pending {
		if in.pendingOwner[bid] == user {
			chs = append(chs, ch)
		}
	}
	in.mu.Unlock()
	for _, ch := range chs {
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

// SnapshotInstance saves fresh snapshots of every browser of an instance
// at the master, from live state (the master asks before migrating it, on
// a drain with migration and when this worker leaves on SIGTERM). Each
// browser's input is held first (holdInput), so the snapshot has
// everything its page took, and what the users type from then on reaches
// the copy the instance moves to instead of this one.
func (a *AppManager) SnapshotInstance(ctx context.Context, iid string) error {
	in, ok := a.w.instances.get(iid)
	if !ok {
		return wire.Err(wire.CodeUnknownInstance, "no instance "+iid+" on worker "+a.w.id)
	}
	if a.w.snapshots == nil {
		return nil
	}
	for _, vb := range in.browserList() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		a.w.snaps.holdInput(vb, inputHoldMax)
		a.w.snaps.snapshotOnce(vb)
	}
	return nil
}

// ResumeInstance ends the input holds of an instance's browsers at once:
// the master could not move it (the restore failed), so its users type
// here again instead of waiting out inputHoldMax.
func (a *AppManager) ResumeInstance(ctx context.Context, iid string) error {
	in, ok := a.w.instances.get(iid)
	if !ok {
		return wire.Err(wire.CodeUnknownInstance, "no instance "+iid+" on worker "+a.w.id)
	}
	for _, vb := range in.browserList() {
		s := &vb.snap
		s.inMu.RLock()
		gen := s.holdGen
		s.inMu.RUnlock()
		a.w.snaps.resumeInput(vb, gen)
	}
	return nil
}

// Holding input for a migration (engine/hold.go says what the clients
// are told and do): the hold is this browser's input gate, snapState.inMu,
// which the hub's input passes (browserHost.Input).

// holdInput holds vb's input for at most d. When it returns, no input is
// being dispatched to the page and none will be until the hold ends.
func (sn snapshotter) holdInput(vb *vbrowser, d time.Duration) {
	s := &vb.snap
	s.inMu.Lock()
	s.held = true
	s.holdGen++
	gen := s.holdGen
	s.inMu.Unlock()
	if vb.hub != nil {
		vb.hub.AnnounceHold()
	}
	sn.w.clock.AfterFunc(d, func() { sn.resumeInput(vb, gen) })
}

// resumeInput ends hold gen of vb, if it is still on.
func (sn snapshotter) resumeInput(vb *vbrowser, gen uint64) {
	s := &vb.snap
	s.inMu.Lock()
	if !s.held || s.holdGen != gen {
		s.inMu.Unlock()
		return
	}
	s.held = false
	s.inMu.Unlock()
	if h := vb.hub; h != nil {
		if !h.Closed() { // not moved after all
			sn.w.log.Warn().Str("instance", vb.inst.info.ID).Str("browser", vb.id).Msg("input held for a migration that did not happen: taken here again")
			h.AnnounceResume()
		}
	}
}

// inputHeld reports whether vb's input is held.
func (s *snapState) inputHeld() bool {
	s.inMu.RLock()
	defer s.inMu.RUnlock()
	return s.held
}
