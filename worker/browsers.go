package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/ids"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/feed"
	"github.com/cloudbrowser-go/cloudbrowser/worker/engine"
	"github.com/cloudbrowser-go/cloudbrowser/worker/failover"
	"github.com/cloudbrowser-go/cloudbrowser/worker/httpserve"
	"github.com/cloudbrowser-go/cloudbrowser/worker/pool"
)

// vbrowser is a virtual browser of an instance.
type vbrowser struct {
	id      string
	inst    *instance
	owner   string
	created time.Time
	b       browser.Browser
	hub     *engine.Hub

	subMu sync.Mutex
	subs  map[string]bool           // state keys its pages subscribed to
	perms map[string]httpserve.Role // grants on this browser (under subMu)
	// apiToken authenticates app API calls from this browser's own pages.
	apiToken string
	name     string // given by its owner (under subMu)
	// notice is shown once on the owner's engine page (under subMu): the
	// previous browser was released.
	notice string
	// lease is the pool lease the browser came from; closing returns it.
	lease *pool.Lease
	// holds counts the automation sessions driving the browser: it is not
	// idle while any does, viewer or not (HoldIdle).
	holds atomic.Int32
	// cdpClients counts the automation clients connected to it now.
	cdpClients atomic.Int32
	// people are the gestures (and Hand backs) of the viewers who drive
	// it, by user: an automation session hears a person take over.
	people feed.Feed[httpserve.PersonAct]
	// unquota gives back the browser's places in the quotas (idempotent).
	unquota  func()
	released chan struct{}
	once     sync.Once
	// snap is its snapshot bookkeeping and input gate (snapshots.go).
	snap failover.BrowserState
	// made is how the browser was made (lease, app API, policies, entry
	// page), a Server-Timing value sent with its Browser URL.
	made string
}

func newVBrowser(in *instance, id, owner string) *vbrowser {
	return &vbrowser{id: id, inst: in, owner: owner, created: time.Now(), subs: map[string]bool{}, perms: map[string]httpserve.Role{},
		apiToken: ids.Random(24)}
}

// browserMaker owns making and ending the virtual browsers of the
// instances here: one user's browser made once however many of their
// requests ask at once, the browser limits and quotas, leases from the
// app's pool or a general one prepared for the app (app API, egress,
// navigation policy, entry page), restores from snapshots (snapshots.go),
// hubs (hubs.go), and giving a browser back when it closes, crashes or
// sits idle.
type browserMaker struct {
	w   *Worker
	log zerolog.Logger
}

// perUserLimit is how many browsers one user may own in an instance: the
// manifest's browserLimit.perUser, else what the strategy says (one for
// singleBrowserPerUser and the single-instance strategies, no cap for
// multiInstance).
func perUserLimit(app wire.App) int {
	if app.BrowsersPerUser > 0 || app.Strategy == wire.MultiInstance {
		return app.BrowsersPerUser
	}
	return 1
}

// checkLimitsLocked enforces the manifest's browserLimit: perInstance caps
// the browsers of an instance, perUser (or the strategy's one browser per
// user) the browsers one user owns in it.
func (in *instance) checkLimitsLocked(user string) error {
	if n := in.app.BrowsersPerInstance; n > 0 && len(in.browsers) >= n {
		return fmt.Errorf("%w: this instance already has %d browsers", httpserve.ErrBrowserLimit, n)
	}
	if n := perUserLimit(in.app); n > 0 {
		mine := 0
		for _, b := range in.browsers {
			if b.owner == user {
				mine++
			}
		}
		switch {
		case mine < n:
		case n == 1 && in.app.BrowsersPerUser == 0:
			return fmt.Errorf("%w: the %s strategy gives each user one browser in an instance, and you have it "+
				"(the app's browserLimit.perUser allows more)", httpserve.ErrBrowserLimit, in.app.Strategy)
		default:
			return fmt.Errorf("%w: you already have %d browsers in this instance", httpserve.ErrBrowserLimit, n)
		}
	}
	return nil
}

// browserFor returns the user's browser in the instance, creating it if
// needed.
func (bm *browserMaker) browserFor(ctx context.Context, in *instance, user string) (*vbrowser, error) {
	return bm.browserForFrom(ctx, in, user, "")
}

// browserForFrom is browserFor for a client at address ip ("" = unknown),
// for the per-address browser quota.
func (bm *browserMaker) browserForFrom(ctx context.Context, in *instance, user, ip string) (*vbrowser, error) {
	in.restoring.AwaitOwner(ctx, user)
	for {
		in.mu.Lock()
		if bid, ok := in.byUser[user]; ok {
			if b, ok := in.browsers[bid]; ok {
				in.mu.Unlock()
				return b, nil
			}
		}
		m, busy := in.making[user]
		if !busy {
			m = &making{done: make(chan struct{})}
			if in.making == nil {
				in.making = map[string]*making{}
			}
			in.making[user] = m
			in.mu.Unlock()
			b, err := bm.newBrowserFrom(ctx, in, user, ip, true)
			in.mu.Lock()
			delete(in.making, user)
			in.mu.Unlock()
			m.b, m.err = b, err
			close(m.done)
			return b, err
		}
		m.waiters++
		in.mu.Unlock()
		select {
		case <-m.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		// The maker's request gave up (its client went away): not a
		// reason to fail this one, which tries again.
		if m.err == nil || !(errors.Is(m.err, context.Canceled) || errors.Is(m.err, context.DeadlineExceeded)) {
			return m.b, m.err
		}
	}
}

// making is one user's browser being made in an instance; b and err are
// set before done is closed.
type making struct {
	done    chan struct{}
	b       *vbrowser
	err     error
	waiters int // requests that waited for it (under instance.mu)
}

// newBrowser creates a browser of user in the instance. With asTheirs it
// becomes the user's browser there (unless a concurrent request of the same
// user won, whose browser is returned instead).
func (bm *browserMaker) newBrowser(ctx context.Context, in *instance, user string, asTheirs bool) (*vbrowser, error) {
	return bm.newBrowserFrom(ctx, in, user, "", asTheirs)
}

// newBrowserFrom is newBrowser for a client at address ip ("" = unknown).
// The browser holds a place in the user's and the address's browser quotas
// until it is released.
func (bm *browserMaker) newBrowserFrom(ctx context.Context, in *instance, user, ip string, asTheirs bool) (*vbrowser, error) {
	return bm.startBrowser(ctx, in, newVBrowser(in, ids.NewBrowser(), user), ip, asTheirs, nil)
}

// startBrowser leases and prepares vb's browser and adds it to the
// instance. With a snapshot it is brought back to the snapshot's page
// instead of the entry page (and the browser limits, which it met when
// it was first made, are not checked again).
func (bm *browserMaker) startBrowser(ctx context.Context, in *instance, vb *vbrowser, ip string, asTheirs bool, snap *wire.BrowserSnapshot) (_ *vbrowser, err error) {
	user := vb.owner
	if snap == nil {
		in.mu.Lock()
		err = in.checkLimitsLocked(user)
		in.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	if vb.unquota, err = bm.w.quota.reserveBrowser(user, ip); err != nil {
		bm.log.Info().Str("instance", in.info.ID).Str("user", user).Str("client_ip", ip).Err(err).Msg("browser refused: quota")
		return nil, err
	}
	// Every failure below gives the places back; a browser made releases
	// them when it is (vb.release).
	unquota := vb.unquota
	defer func() {
		if err != nil {
			unquota()
		}
	}()
	// A browser caught going round its egress guard is destroyed, and the
	// user gets another one.
	lease, st, err := bm.leaseBrowser(ctx, in, vb, snap)
	if errors.Is(err, errEgressBypassed) {
		bm.log.Error().Str("instance", in.info.ID).Err(err).Msg("browser bypassed its egress guard: destroyed, leasing another")
		lease, st, err = bm.leaseBrowser(ctx, in, vb, snap)
	}
	if err != nil {
		return nil, err
	}
	vb.made = st.String()
	if snap != nil {
		// A pool's browser too: its cookies keep the user signed in.
		if err := bm.w.snaps.RestorePage(ctx, vb, *snap); err != nil {
			lease.Return()
			return nil, err
		}
	}
	vb.hub = bm.newHub(in, vb)
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		vb.release()
		return nil, httpserve.ErrInstanceClosed
	}
	if asTheirs {
		if bid, ok := in.byUser[user]; ok { // lost a race with the same user
			if other, ok := in.browsers[bid]; ok {
				in.mu.Unlock()
				vb.release()
				return other, nil
			}
		}
	}
	if snap == nil {
		if err := in.checkLimitsLocked(user); err != nil { // a concurrent creation took the last place
			in.mu.Unlock()
			vb.release()
			return nil, err
		}
	} else if other, ok := in.browsers[vb.id]; ok {
		in.mu.Unlock()
		vb.release()
		return other, nil
	}
	if asTheirs {
		in.byUser[user] = vb.id
	}
	if in.noteFor[user] {
		delete(in.noteFor, user)
		vb.notice = releasedNotice(in.idle)
	}
	in.browsers[vb.id] = vb
	in.mu.Unlock()
	vb.hub.Watch(func(err error) { bm.browserEnded(in, vb, err) })
	bm.w.snaps.Started(vb)
	vb.hub.StartIdle(in.idle, bm.w.clock, releasedReason(in.idle), reloadURL(in.app, in.info.ID), func() { bm.browserIdle(in, vb) }, vb.automated)
	vb.hub.StartRest(bm.w.cfg.RestAfter, bm.w.clock)
	vb.hub.SetPrecast(engine.PrecastWindow, bm.w.clock)
	bm.log.Info().Str("instance", in.info.ID).Str("browser", vb.id).Str("user", user).Msg("browser created")
	return vb, nil
}

// errEgressBypassed: a browser's traffic did not go through its egress
// guard: its entry page failed with a name resolved by Chromium itself.
// Browsers always get an endpoint (the guard starts before the pools); this
// is the second line, should Chromium ever ignore a context's proxy. Such a
// browser is never handed to a user.
var errEgressBypassed = errors.New("browser bypassed its egress guard")

// automated says an automation session drives vb (its hub's idle
// countdown starts over).
func (vb *vbrowser) automated() bool { return vb.holds.Load() > 0 }

// leaseBrowser leases vb's browser from the app's pool (or the general
// pool) and prepares it: app API, and for a blank general-pool browser the
// app's egress, navigation policy, viewport and entry page.
func (bm *browserMaker) leaseBrowser(ctx context.Context, in *instance, vb *vbrowser, snap *wire.BrowserSnapshot) (*pool.Lease, *serverTiming, error) {
	// Leasing can take a second with Chromium (a cold browser): not under
	// the lock.
	pc := bm.w.catalog.poolConfig(in.app.MountPoint)
	t0 := time.Now()
	st := &serverTiming{last: t0}
	lease, err := bm.w.pools.Lease(ctx, in.app.MountPoint, pc)
	st.step("lease")
	kind, outcome := "general", "ok"
	if pc != nil {
		kind = "specific"
	}
	if err != nil {
		outcome = "failed"
	}
	bm.w.leaseSeconds.WithLabelValues(kind, outcome).Observe(time.Since(t0).Seconds())
	if err != nil {
		return nil, nil, fmt.Errorf("lease a browser: %w", err)
	}
	b := lease.Browser()
	// Set before the app API is installed: its calls (another goroutine)
	// deliver their replies to vb.b.
	vb.lease, vb.released, vb.b = lease, make(chan struct{}), b
	// The app API is per browser and per user: installed at lease time.
	if err := b.Install(ctx, bm.w.apiScript(vb), map[string]func(string){apiBinding: func(p string) { bm.w.api.onAPICall(vb, p) }}); err != nil {
		lease.Return()
		return nil, nil, fmt.Errorf("install the app API: %w", err)
	}
	st.step("api")
	if !lease.Specific() {
		// A general-pool browser is blank: give it the app's egress and
		// navigation policies, then open the instance's entry page.
		bm.w.assignEgress(b, in.app.MountPoint)
		if err := b.SetPolicy(ctx, bm.w.navigationPolicy(in.app)); err != nil {
			lease.Return()
			return nil, nil, fmt.Errorf("navigation policy: %w", err)
		}
		if in.app.ViewportWidth > 0 && in.app.ViewportHeight > 0 && snap == nil {
			if err := b.Input(ctx, browser.InputEvent{Type: browser.InputResize, Width: in.app.ViewportWidth, Height: in.app.ViewportHeight}); err != nil {
				lease.Return()
				return nil, nil, fmt.Errorf("viewport: %w", err)
			}
			vb.snap.Resized(in.app.ViewportWidth, in.app.ViewportHeight)
		}
		st.step("policy")
		if snap == nil {
			if err := b.Navigate(ctx, bm.w.entryURL(in)); err != nil {
				lease.Return() // a general-pool browser is never reused
				if b.Egress() != nil && strings.Contains(err.Error(), "ERR_NAME_NOT_RESOLVED") {
					// Behind its guard a browser never resolves a name
					// itself (the guard does, and answers with a page).
					return nil, nil, fmt.Errorf("%w: open %s: %w", errEgressBypassed, in.app.Entry, err)
				}
				return nil, nil, fmt.Errorf("open %s: %w", in.app.Entry, err)
			}
			st.step("nav")
		}
	}
	return lease, st, nil
}

// closeBrowser closes one browser of an instance.
func (bm *browserMaker) closeBrowser(in *instance, vb *vbrowser, reason string) {
	in.forget(vb)
	bm.w.snaps.Forget(vb)
	vb.close(context.Background(), reason)
}

// browserEnded removes a browser that closed or crashed. After a crash its
// users are offered a new one: the instance URL creates it.
func (bm *browserMaker) browserEnded(in *instance, vb *vbrowser, err error) {
	in.forget(vb)
	in.mu.Lock()
	closing := in.closed // the instance's end says it all (or it moved)
	in.mu.Unlock()
	if !closing {
		bm.w.snaps.Forget(vb)
	}
	if errors.Is(err, browser.ErrCrashed) {
		bm.log.Warn().Str("instance", in.info.ID).Str("browser", vb.id).Err(err).Msg("virtual browser crashed")
		vb.hub.Shutdown("The virtual browser crashed.", reloadURL(in.app, in.info.ID))
		vb.release()
		return
	}
	vb.hub.Shutdown("This browser was closed.", "")
	vb.release()
}

// maxReleased bounds an instance's memory of released browsers.
const maxReleased = 4096

// browserIdle gives back a browser nobody watched for the app's
// idleTimeout (its hub already refuses new clients): its lease returns to
// the pool (back sequence, or destroyed), its quota places are freed, and
// its URL and its owner's next visit lead to a new browser with a note.
func (bm *browserMaker) browserIdle(in *instance, vb *vbrowser) {
	in.mu.Lock()
	if in.browsers[vb.id] == vb {
		delete(in.browsers, vb.id)
		if in.byUser[vb.owner] == vb.id {
			delete(in.byUser, vb.owner)
		}
		if len(in.released) >= maxReleased {
			clear(in.released) // old URLs then answer 404, as a closed browser's do
		}
		in.released[vb.id] = vb.owner
		if len(in.noteFor) < maxReleased {
			in.noteFor[vb.owner] = true
		}
	}
	in.mu.Unlock()
	vb.release()
	bm.w.snaps.Forget(vb)
	bm.w.idleReleased.Add(1)
	bm.log.Info().Str("instance", in.info.ID).Str("browser", vb.id).Str("user", vb.owner).
		Dur("idle", in.idle).Msg("browser released: no client connected for the idle timeout")
}

// releasedReason is what a client of a released browser is told.
func releasedReason(idle time.Duration) string {
	return "This browser was released after " + idle.String() + " without a connected client. Open the app again for a new one."
}

// releasedNotice is shown on the user's next browser.
func releasedNotice(idle time.Duration) string {
	return "Your previous browser was released after " + idle.String() + " without a connection; this is a new one."
}

// reloadURL gives the user a new browser after a crash: the Application URL
// for the single-instance strategies, the instance's URL otherwise.
func reloadURL(app wire.App, iid string) string {
	if app.Strategy == wire.SingleAppInstance || app.Strategy == wire.SingleInstancePerUser {
		return "/" + app.MountPoint
	}
	return "/" + app.MountPoint + "/a/" + iid
}

// close disposes the browser and tells its clients why.
func (b *vbrowser) close(ctx context.Context, reason string) {
	b.hub.Shutdown("This browser was closed: "+reason+".", "/"+b.inst.app.MountPoint)
	b.release()
}

// release gives the browser back to its pool (which runs the back sequence
// or destroys it), once.
func (b *vbrowser) release() {
	b.once.Do(func() {
		close(b.released)
		if b.hub != nil {
			// Back to its pool awake: a pool's next user or job expects
			// a page that paints.
			ctx, cancel := context.WithTimeout(context.Background(), engine.RestTimeout)
			b.hub.Wake(ctx)
			cancel()
		}
		b.lease.Return()
		if b.unquota != nil {
			b.unquota() // closing a browser frees its quota
		}
	})
}
