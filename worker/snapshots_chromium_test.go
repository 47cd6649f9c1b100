package worker

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium"
)

// A page's URL, cookies, localStorage and sessionStorage survive a
// snapshot on one worker and a restore into a new browser on another,
// and the restored page's scripts see the storage when they run.
func TestSnapshotRestoreWithChromium(t *testing.T) {
	testutil.NeedChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	// One Chromium for both workers (each browser is its own isolated
	// context): the "dead" worker is simply never used again.
	rt, err := chromium.New(ctx, chromium.Config{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	snaps := newMemSnapshots()
	app := wire.App{Name: "Snap", MountPoint: "snap", Entry: "index.html", Strategy: wire.SingleBrowserPerUser,
		Files: map[string][]byte{
			"index.html": []byte(`<!doctype html><title>start</title>`),
			"page2.html": []byte(`<!doctype html><title>two</title><script>window.seen = localStorage.getItem("note") + "/" + sessionStorage.getItem("tab");</script>`),
		}}
	newWorker := func(id string) *Worker {
		w, err := New(Config{ID: id, Secret: testSecret, Master: "127.0.0.1:1", Runtime: rt, Logger: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		w.replica.Store = newLocalReplica()
		keepSnapshots(w, snaps)
		t.Cleanup(func() { w.cancel(); w.egress.Close() })
		if err := w.apps.AddApplication(ctx, app); err != nil {
			t.Fatal(err)
		}
		return w
	}
	one, two := newWorker("w-one"), newWorker("w-two")
	iid := "w-one.snapsnapsnap"
	if err := one.apps.CreateInstance(ctx, wire.CreateInstance{App: app, InstanceID: iid, Owner: "alice", Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	in1, _ := one.instances.get(iid)
	vb, err := one.browsers.browserFor(ctx, in1, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if err := vb.b.Evaluate(ctx, `document.cookie = "sid=abc123; path=/; max-age=3600"; localStorage.setItem("note", "hello"); sessionStorage.setItem("tab", "2"); location.href = "page2.html"; true`, nil); err != nil {
		t.Fatal(err)
	}
	// The navigation is snapshotted at once, with what the page stored.
	testutil.Eventually(t, 10*time.Second, testutil.Cond("a snapshot of page2 with its storage", func() bool {
		s, _ := snaps.get(iid, vb.id)
		return strings.HasSuffix(s.URL, "/page2.html") && s.Local["note"] == "hello" && s.Session["tab"] == "2" && len(s.Cookies) == 1
	}))
	s, _ := snaps.get(iid, vb.id)
	if s.Cookies[0].Name != "sid" || s.Cookies[0].Value != "abc123" || s.Cookies[0].Expires.IsZero() {
		t.Fatalf("snapshot cookies: %+v", s.Cookies)
	}

	if err := two.apps.CreateInstance(ctx, wire.CreateInstance{App: app, InstanceID: iid, Owner: "alice", Epoch: 2, Restore: true}); err != nil {
		t.Fatal(err)
	}
	in2, _ := two.instances.get(iid)
	in2.restoring.Await(ctx, vb.id)
	rb, ok := in2.browser(vb.id)
	if !ok {
		t.Fatal("browser not restored")
	}
	if rb.owner != "alice" || rb.b == vb.b {
		t.Fatalf("restored browser: owner %q", rb.owner)
	}
	want := []string{"/.instance/" + iid + "/page2.html", "sid=abc123", "hello", "2", "hello/2"}
	testutil.Eventually(t, 10*time.Second, func() error { // the reload may still be loading
		var got []string
		err := rb.b.Evaluate(ctx, `[location.pathname, document.cookie, localStorage.getItem("note"), sessionStorage.getItem("tab"), String(window.seen)]`, &got)
		if err == nil && strings.Join(got, "|") != strings.Join(want, "|") {
			err = fmt.Errorf("restored page %v, want %v", got, want)
		}
		return err
	})
}
