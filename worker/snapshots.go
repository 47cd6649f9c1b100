package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/ids"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/failover"
	"github.com/cloudbrowser-go/cloudbrowser/worker/httpserve"
)

// The worker's side of its browsers' snapshots (package failover): a
// virtual browser is a failover.Subject, and a re-placed instance's
// browsers are recreated here from theirs.

// Snap is vb's snapshot bookkeeping and input gate.
func (vb *vbrowser) Snap() *failover.BrowserState { return &vb.snap }

// Browser is the browser vb's page runs in.
func (vb *vbrowser) Browser() browser.Browser { return vb.b }

// Clients is vb's hub, nil before it has one.
func (vb *vbrowser) Clients() failover.Clients {
	if vb.hub == nil {
		return nil
	}
	return vb.hub
}

// Describe is what the worker knows of vb, for its snapshot.
func (vb *vbrowser) Describe() failover.Info {
	in := vb.inst
	d := failover.Info{Instance: in.info.ID, Epoch: in.epoch(), ID: vb.id, Owner: vb.owner, Created: vb.created}
	in.mu.Lock()
	d.Theirs = in.byUser[vb.owner] == vb.id
	in.mu.Unlock()
	vb.subMu.Lock()
	d.Name = vb.name
	for p, r := range vb.perms {
		if d.Perms == nil {
			d.Perms = map[string]string{}
		}
		d.Perms[p] = r.String()
	}
	vb.subMu.Unlock()
	select {
	case <-vb.released:
		d.Released = true
	default:
	}
	return d
}

// subjects are the instance's browsers, for their snapshots.
func (in *instance) subjects(yield func(failover.Subject) bool) {
	for _, vb := range in.browserList() {
		if !yield(vb) {
			return
		}
	}
}

// subjects are the browsers of every instance here.
func (t *instanceTable) subjects(yield func(failover.Subject) bool) {
	for _, in := range t.all() {
		for _, vb := range in.browserList() {
			if !yield(vb) {
				return
			}
		}
	}
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

// SnapshotInstance saves fresh snapshots of every browser of an instance
// at the master, from live state, with their input held
// (failover.Snapshots.HoldAndSave): the master asks before migrating it,
// on a drain with migration and when this worker leaves on SIGTERM.
func (a *AppManager) SnapshotInstance(ctx context.Context, iid string) error {
	in, ok := a.w.instances.get(iid)
	if !ok {
		return wire.Err(wire.CodeUnknownInstance, "no instance "+iid+" on worker "+a.w.id)
	}
	return a.w.snaps.HoldAndSave(ctx, in.subjects)
}

// ResumeInstance ends the input holds of an instance's browsers at once:
// the master could not move it (the restore failed), so its users type
// here again instead of waiting out failover.InputHoldMax.
func (a *AppManager) ResumeInstance(ctx context.Context, iid string) error {
	in, ok := a.w.instances.get(iid)
	if !ok {
		return wire.Err(wire.CodeUnknownInstance, "no instance "+iid+" on worker "+a.w.id)
	}
	a.w.snaps.Resume(in.subjects)
	return nil
}
