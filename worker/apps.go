package worker

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/session"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
	"github.com/cloudbrowser-go/cloudbrowser/worker/httpserve"
	"github.com/cloudbrowser-go/cloudbrowser/worker/pool"
)

// AppManager is the worker's Application Manager: the master's orders to
// this worker, over RMI (through workerApps, export.go). It checks each
// order and answers with the master's error codes; the work is the app
// catalogue's (catalog.go), the instance table's (instances.go) and the
// browser maker's (browsers.go).
type AppManager struct {
	w   *Worker
	log zerolog.Logger
}

// AddApplication installs or replaces an app; running instances keep the
// version they started with.
func (a *AppManager) AddApplication(ctx context.Context, app wire.App) error {
	if app.MountPoint == "" {
		return wire.Err(wire.CodeInvalid, "AddApplication: app without mount point")
	}
	return a.w.catalog.install(ctx, rmi.ConnFrom(ctx), app)
}

// RemoveApplication uninstalls an app and closes its instances.
func (a *AppManager) RemoveApplication(ctx context.Context, name string) error {
	if !a.w.catalog.remove(name) {
		return wire.Err(wire.CodeUnknownApp, "no application "+name)
	}
	doomed := a.w.instances.ofApp(name)
	for _, in := range doomed {
		a.w.instances.close(ctx, in.info.ID, "application removed")
	}
	a.w.pools.Remove(name)
	a.log.Info().Str("app", name).Int("instances_closed", len(doomed)).Msg("application removed")
	return nil
}

// CreateInstance creates an instance the master placed here.
func (a *AppManager) CreateInstance(ctx context.Context, req wire.CreateInstance) error {
	restored, err := a.w.instances.create(ctx, req)
	if err != nil || !req.WaitBrowsers || restored == nil {
		return err
	}
	// A live migration: the old copy serves until the browsers are back
	// here, so the users move to ready browsers.
	select {
	case <-restored:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("restoring the browsers of %s: %w", req.InstanceID, ctx.Err())
	}
}

// OpenBrowser returns the user's browser in a local instance, creating it
// if needed. It is not in contract.WorkerApps: without the client's address
// it would skip the per-address browser quota, so the master, which opens
// browsers when placing users, gets OpenBrowserFor only.
func (a *AppManager) OpenBrowser(ctx context.Context, iid, user string) (string, error) {
	return a.openBrowser(ctx, iid, user, "")
}

// OpenBrowserFor is OpenBrowser with the client's address, for the
// per-address browser quota.
func (a *AppManager) OpenBrowserFor(ctx context.Context, req wire.OpenBrowser) (string, error) {
	return a.openBrowser(ctx, req.InstanceID, req.User, req.ClientIP)
}

func (a *AppManager) openBrowser(ctx context.Context, iid, user, ip string) (string, error) {
	in, ok := a.w.instances.get(iid)
	if !ok {
		return "", wire.Err(wire.CodeUnknownInstance, "no instance "+iid+" on worker "+a.w.id)
	}
	b, err := a.w.browsers.browserForFrom(ctx, in, user, ip)
	if err != nil {
		err = quotaCode(err)
	}
	var le *pool.LimitError
	if errors.As(err, &le) {
		return "", wire.Err(wire.CodePoolLimit, "The "+le.Error())
	}
	if errors.Is(err, httpserve.ErrBrowserLimit) {
		return "", wire.Errorf(wire.CodePoolLimit, "%w", err)
	}
	if err != nil {
		return "", err
	}
	return b.id, nil
}

// Grant sets a role on an instance (bid "") or one of its browsers, on an
// administrator's behalf (the master checked the admin token).
func (a *AppManager) Grant(ctx context.Context, iid, bid, principal, role string) error {
	in, ok := a.w.instances.get(iid)
	if !ok {
		return wire.Err(wire.CodeUnknownInstance, "no instance "+iid+" on worker "+a.w.id)
	}
	r, err := httpserve.ParseRole(role)
	if err == nil && !httpserve.ValidPrincipal(principal) {
		err = fmt.Errorf("%q is not a user name or *", principal)
	}
	if err != nil {
		return wire.Err(wire.CodeInvalid, "grant: "+err.Error())
	}
	var b *vbrowser
	if bid == "" {
		if err := in.saveGrant(principal, r); err != nil {
			return fmt.Errorf("grant: %w", err)
		}
	} else {
		if b, ok = in.browser(bid); !ok {
			return wire.Err(wire.CodeUnknownInstance, "no browser "+bid+" in "+iid)
		}
		b.setGrant(principal, r)
	}
	in.granted(b)
	return nil
}

// RevokeSessions ends a user's login sessions (the master changed their
// password or removed them): their session cookies are refused from now
// on, and their open client-engine sockets are closed.
func (a *AppManager) RevokeSessions(ctx context.Context, rev wire.Revocation) error {
	if rev.User == "" {
		return wire.Err(wire.CodeInvalid, "RevokeSessions: no user")
	}
	a.w.front.Users().Revoke(rev.User, rev.Before)
	n := 0
	for _, in := range a.w.instances.all() {
		if !in.app.Authentication { // elsewhere the name is an anonymous id, not an account
			continue
		}
		for _, b := range in.browserList() {
			n += b.hub.Disconnect(rev.User, "You were signed out: your account changed.", "/"+in.app.MountPoint+"/login")
		}
	}
	a.log.Info().Str("user", rev.User).Int("sockets_closed", n).Msg("sessions revoked")
	return nil
}

// EndSession ends one session (a logout, seen by this worker or told by
// the master): its cookie values are refused from now on and the sockets
// opened with it are closed.
func (a *AppManager) EndSession(ctx context.Context, rev wire.SessionRevocation) error {
	if !session.ValidID(rev.ID) {
		return wire.Err(wire.CodeInvalid, "EndSession: invalid session id")
	}
	a.w.front.Users().End(rev)
	n := 0
	for _, in := range a.w.instances.all() {
		reload := "/" + in.app.MountPoint + "/login"
		if rev.User == "" { // a dashboard session
			reload = "/admin"
		}
		for _, b := range in.browserList() {
			n += b.hub.DisconnectSession(rev.ID, "You were signed out.", reload)
		}
	}
	a.log.Info().Str("user", rev.User).Int("sockets_closed", n).Msg("session ended")
	return nil
}

// Browsers lists an instance's browsers (admin dashboard).
func (a *AppManager) Browsers(ctx context.Context, iid string) ([]wire.BrowserInfo, error) {
	in, ok := a.w.instances.get(iid)
	if !ok {
		return nil, wire.Err(wire.CodeUnknownInstance, "no instance "+iid+" on worker "+a.w.id)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	out := []wire.BrowserInfo{}
	for _, b := range in.browsers {
		out = append(out, wire.BrowserInfo{ID: b.id, URL: b.url(), Owner: b.owner, Created: b.created, Clients: b.hub.Count()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, nil
}

// CloseInstance closes an instance and its browsers for good, if this
// worker holds it under c.Epoch (0: whatever the epoch, an admin's order).
func (a *AppManager) CloseInstance(ctx context.Context, c wire.ClosedInstance) error {
	in, ok := a.w.instances.get(c.ID)
	if !ok {
		return wire.Err(wire.CodeUnknownInstance, "no instance "+c.ID+" on worker "+a.w.id)
	}
	if e := in.epoch(); c.Epoch != 0 && e != c.Epoch {
		return wire.Errorf(wire.CodeInstanceLost, "instance %s is held here under epoch %d, not %d: kept", c.ID, e, c.Epoch)
	}
	if !a.w.instances.close(ctx, c.ID, "instance closed") {
		return wire.Err(wire.CodeUnknownInstance, "no instance "+c.ID+" on worker "+a.w.id)
	}
	return nil
}

// ReleaseInstance drops an instance the master migrated to another worker:
// its clients are sent on to the same URLs.
func (a *AppManager) ReleaseInstance(ctx context.Context, f wire.FencedInstance) error {
	a.w.instances.fence(ctx, []wire.FencedInstance{f})
	return nil
}
