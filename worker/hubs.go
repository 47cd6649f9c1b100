package worker

import (
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/engine"
	"github.com/cloudbrowser-go/cloudbrowser/worker/failover"
	"github.com/cloudbrowser-go/cloudbrowser/worker/httpserve"
)

// The worker's side of its browsers' hubs (package engine): what a hub
// needs of the browser and does not own.

// newHub makes vb's hub; vb's browser is leased.
func (bm *browserMaker) newHub(in *instance, vb *vbrowser) *engine.Hub {
	w := bm.w
	return engine.NewHub(engine.Config{
		Browser: vb.b, ID: vb.id, Instance: in.info.ID, App: in.app.MountPoint, Worker: w.id,
		Released: vb.released, Host: browserHost{&vb.snap, vb}, Grade: w.grade, Admit: w.quota.admitSocket,
		OnPage:   func(p browser.Page) { w.snaps.PageChanged(vb, p) },
		Counters: &w.counters, Log: w.log, NoFrames: w.runtime.Name() == "none",
		Tiles: w.cfg.FrameTiles,
		Files: bm.filesOf(in, vb),
		OnGesture: func(user string) {
			act := httpserve.PersonAct{User: user}
			vb.people.Post(act, func(last httpserve.PersonAct) bool { return last == act })
		},
		OnHandBack: func(user string) { vb.people.Post(httpserve.PersonAct{User: user, HandBack: true}, nil) },
	})
}

// browserHost is a virtual browser as its hub sees it (engine.Host): the
// migration's input gate and the snapshot marks are its
// failover.BrowserState (Input, InputHeld, Touched, Resized), where
// clients may navigate its app's.
type browserHost struct {
	*failover.BrowserState
	vb *vbrowser
}

// MayNavigate: only the app's pages decide where its browsers go, unless
// the app lets users type addresses.
func (h browserHost) MayNavigate(url string) bool {
	return clientNavigate(h.vb.inst.app) && webURL(url)
}
