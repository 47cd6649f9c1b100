package worker

import (
	"context"
	"maps"
	"sync"

	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/engine"
	"github.com/cloudbrowser-go/cloudbrowser/worker/httpserve"
)

// The worker's side of its HTTP side (package httpserve): the apps,
// instances and browsers hosted here, and the master, as httpserve.Host.

// newFront makes the worker's HTTP side.
func (w *Worker) newFront() *httpserve.Server {
	return httpserve.New(httpserve.Config{ID: w.id, Host: frontHost{w}, Secret: w.cfg.Secret, SocketURL: w.cfg.SocketURL,
		Runtime: w.runtime, Metrics: w.reg, Log: w.log})
}

// frontHost is the worker as httpserve.Host.
type frontHost struct{ w *Worker }

func (h frontHost) App(name string) (wire.App, bool) { return h.w.catalog.app(name) }

func (h frontHost) Instance(id string) (httpserve.Instance, bool) {
	in, ok := h.w.instances.get(id)
	if !ok {
		return nil, false
	}
	return hostedInstance{h.w, in}, true
}

// Master is nil until Start connects to the master.
func (h frontHost) Master() contract.Caller {
	if h.w.client == nil {
		return nil
	}
	return h.w.client
}

func (h frontHost) Registered() bool { return h.w.registered.Load() }

func (h frontHost) Ready() bool { return h.w.Ready() }

func (h frontHost) EndSession(ctx context.Context, rev wire.SessionRevocation) error {
	return h.w.apps.EndSession(ctx, rev)
}

// hostedInstance is an instance as httpserve.Instance.
type hostedInstance struct {
	w  *Worker
	in *instance
}

func (h hostedInstance) ID() string                      { return h.in.info.ID }
func (h hostedInstance) App() wire.App                   { return h.in.app }
func (h hostedInstance) Role(user string) httpserve.Role { return h.in.instanceRole(user) }
func (h hostedInstance) HasBrowserFor(user string) bool  { return h.in.hasBrowserFor(user) }

func (h hostedInstance) AwaitRestore(ctx context.Context, id string) { h.in.restoring.Await(ctx, id) }

func (h hostedInstance) Browser(id string) (httpserve.Browser, bool) {
	b, ok := h.in.browser(id)
	if !ok {
		return nil, false
	}
	return hostedBrowser{h.w, b}, true
}

func (h hostedInstance) WasReleased(id string) bool { return h.in.wasReleased(id) }

func (h hostedInstance) Released() (reason, reload string) {
	return releasedReason(h.in.idle), reloadURL(h.in.app, h.in.info.ID)
}

func (h hostedInstance) Browsers() []httpserve.Browser {
	bs := h.in.browserList()
	out := make([]httpserve.Browser, len(bs))
	for i, b := range bs {
		out[i] = hostedBrowser{h.w, b}
	}
	return out
}

// Page reads the instance at once; the released-browser note is the
// user's once.
func (h hostedInstance) Page(user string) httpserve.InstancePage {
	in := h.in
	in.mu.Lock()
	defer in.mu.Unlock()
	p := httpserve.InstancePage{Name: in.info.Name, Owner: in.instanceRoleLocked(user) == httpserve.RoleOwner,
		Grants: maps.Clone(in.perms), Idle: in.idle}
	if in.noteFor[user] {
		delete(in.noteFor, user)
		p.Released = true
	}
	return p
}

func (h hostedInstance) NewBrowser(ctx context.Context, user, ip string) (httpserve.Browser, error) {
	return h.browser(h.w.browsers.newBrowserFrom(ctx, h.in, user, ip, false))
}

func (h hostedInstance) BrowserFor(ctx context.Context, user, ip string) (httpserve.Browser, error) {
	return h.browser(h.w.browsers.browserForFrom(ctx, h.in, user, ip))
}

func (h hostedInstance) browser(b *vbrowser, err error) (httpserve.Browser, error) {
	if err != nil {
		return nil, err
	}
	return hostedBrowser{h.w, b}, nil
}

func (h hostedInstance) Close(ctx context.Context, reason string) {
	h.w.instances.close(ctx, h.in.info.ID, reason)
}

func (h hostedInstance) Rename(name string) error { return h.in.saveName(name) }

func (h hostedInstance) Grant(ctx context.Context, by, principal string, role httpserve.Role) error {
	if err := h.in.grantInstance(by, principal, role); err != nil {
		return err
	}
	h.in.granted(nil)
	return nil
}

// hostedBrowser is a virtual browser as httpserve.Browser.
type hostedBrowser struct {
	w  *Worker
	vb *vbrowser
}

func (h hostedBrowser) Owner() string    { return h.vb.owner }
func (h hostedBrowser) URL() string      { return h.vb.url() }
func (h hostedBrowser) Hub() *engine.Hub { return h.vb.hub }
func (h hostedBrowser) Made() string     { return h.vb.made }

func (h hostedBrowser) OnPeople(fn func(httpserve.PersonAct)) (stop func()) {
	return h.vb.people.Subscribe(fn)
}

func (h hostedBrowser) ClientConnected() (left func()) {
	h.vb.cdpClients.Add(1)
	return sync.OnceFunc(func() { h.vb.cdpClients.Add(-1) })
}

func (h hostedBrowser) HoldIdle() (release func()) {
	h.vb.holds.Add(1)
	return sync.OnceFunc(func() { h.vb.holds.Add(-1) })
}

func (h hostedBrowser) Resize(ctx context.Context, width, height int) error {
	return h.vb.b.Input(ctx, browser.InputEvent{Type: browser.InputResize, Width: width, Height: height})
}

func (h hostedBrowser) DevTools() (browser.DevToolsEndpoint, <-chan struct{}, bool) {
	d, ok := h.vb.b.(browser.DevTools)
	if !ok {
		return browser.DevToolsEndpoint{}, nil, false
	}
	e, ok := d.DevTools()
	return e, h.vb.b.Done(), ok
}

func (h hostedBrowser) Info() httpserve.BrowserInfo {
	vb := h.vb
	vb.subMu.Lock()
	defer vb.subMu.Unlock()
	return httpserve.BrowserInfo{ID: vb.id, Owner: vb.owner, Name: vb.name, Created: vb.created, Grants: maps.Clone(vb.perms)}
}

func (h hostedBrowser) Role(user string) httpserve.Role { return h.vb.inst.browserRole(h.vb, user) }

func (h hostedBrowser) TakeNotice() string {
	h.vb.subMu.Lock()
	defer h.vb.subMu.Unlock()
	n := h.vb.notice
	h.vb.notice = ""
	return n
}

func (h hostedBrowser) Rename(name string) {
	h.vb.subMu.Lock()
	h.vb.name = name
	h.vb.subMu.Unlock()
}

func (h hostedBrowser) Close(reason string) { h.w.browsers.closeBrowser(h.vb.inst, h.vb, reason) }

func (h hostedBrowser) Grant(ctx context.Context, by, principal string, role httpserve.Role) error {
	in := h.vb.inst
	if err := in.grantBrowser(h.vb, by, principal, role); err != nil {
		return err
	}
	in.granted(h.vb)
	return nil
}
