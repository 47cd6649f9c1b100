package worker

import (
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/engine"
)

// The worker's side of its browsers' hubs (package engine): what a hub
// needs of the browser and does not own.

// newHub makes vb's hub; vb's browser is leased.
func (bm *browserMaker) newHub(in *instance, vb *vbrowser) *engine.Hub {
	w := bm.w
	return engine.NewHub(engine.Config{
		Browser: vb.b, ID: vb.id, Instance: in.info.ID, App: in.app.MountPoint, Worker: w.id,
		Released: vb.released, Host: browserHost{vb}, Grade: w.grade, Admit: w.quota.admitSocket,
		OnPage:   func(p browser.Page) { w.snaps.pageChanged(vb, p) },
		Counters: &w.counters, Log: w.log, NoFrames: w.runtime.Name() == "none",
	})
}

// browserHost is a virtual browser as its hub sees it (engine.Host): the
// migration's input gate and the snapshot bookkeeping are its snapState
// (snapshots.go), where clients may navigate its app's.
type browserHost struct{ vb *vbrowser }

// Input runs take under the read lock of the input gate: holdInput takes
// the write lock, so once it returns no input reaches the page.
func (h browserHost) Input(take func(held bool)) {
	s := &h.vb.snap
	s.inMu.RLock()
	defer s.inMu.RUnlock()
	take(s.held)
}

func (h browserHost) InputHeld() bool { return h.vb.snap.inputHeld() }

// Touched marks the page for the next periodic snapshot.
func (h browserHost) Touched() { h.vb.snap.dirty.Store(true) }

// Resized keeps the viewport a snapshot restores.
func (h browserHost) Resized(width, height int) {
	h.vb.snap.width.Store(int32(width))
	h.vb.snap.height.Store(int32(height))
}

// MayNavigate: only the app's pages decide where its browsers go, unless
// the app lets users type addresses.
func (h browserHost) MayNavigate(url string) bool {
	return clientNavigate(h.vb.inst.app) && webURL(url)
}
