package worker

import (
	"context"
	"encoding/json"
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
		w.replica, w.snapshots = newLocalReplica(), snaps
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
	in2.awaitRestore(ctx, vb.id)
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

// A page's form state survives the snapshot a migration takes (with its
// input held) and comes back in the restored browser on another worker
// once the page has loaded: the textarea's, input's, select's, checkbox's
// and editable element's contents, the focus with its caret, and the
// scroll of the page and of a scrolled list. The password never leaves.
func TestFormStateMigratesWithChromium(t *testing.T) {
	testutil.NeedChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	rt, err := chromium.New(ctx, chromium.Config{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	snaps := newMemSnapshots()
	app := wire.App{Name: "Form", MountPoint: "form", Entry: "index.html", Strategy: wire.SingleBrowserPerUser,
		Files: map[string][]byte{"index.html": []byte(`<!doctype html><title>form</title>
<body style="height:3000px">
<textarea id="pad" rows="2"></textarea><input id="name"><input type="password" id="pw">
<select id="pick"><option>one</option><option>two</option></select><input type="checkbox" id="ok">
<div contenteditable="true" id="ed">draft</div>
<div id="list" style="height:50px;overflow:auto"><div style="height:1000px">items</div></div>`)}}
	newWorker := func(id string) *Worker {
		w, err := New(Config{ID: id, Secret: testSecret, Master: "127.0.0.1:1", Runtime: rt, Logger: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		w.replica, w.snapshots = newLocalReplica(), snaps
		t.Cleanup(func() { w.cancel(); w.egress.Close() })
		if err := w.apps.AddApplication(ctx, app); err != nil {
			t.Fatal(err)
		}
		return w
	}
	one, two := newWorker("w-one"), newWorker("w-two")
	iid := "w-one.formformform"
	if err := one.apps.CreateInstance(ctx, wire.CreateInstance{App: app, InstanceID: iid, Owner: "alice", Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	in1, _ := one.instances.get(iid)
	vb, err := one.browsers.browserFor(ctx, in1, "alice")
	if err != nil {
		t.Fatal(err)
	}
	const read = `(() => { const $ = (id) => document.getElementById(id), a = document.activeElement;
		return [$("pad").value, $("name").value, $("pw").value, $("pick").value, String($("ok").checked), $("ed").innerHTML,
			a.id + ":" + a.selectionStart + "-" + a.selectionEnd, String(Math.round(scrollY)), String($("list").scrollTop)].join("|"); })()`
	testutil.Eventually(t, 10*time.Second, func() error {
		var state string
		return vb.b.Evaluate(ctx, `document.readyState === "complete" ? "" : Promise.reject(new Error("loading"))`, &state)
	})
	if err := vb.b.Evaluate(ctx, `(() => { const $ = (id) => document.getElementById(id);
		$("pad").value = "first line\nsecond line\nthird"; $("name").value = "Ada"; $("pw").value = "s3cret-pass";
		$("pick").value = "two"; $("ok").checked = true; $("ed").innerHTML = "final <b>text</b>";
		$("list").scrollTop = 120; scrollTo(0, 900);
		$("pad").focus({preventScroll: true}); $("pad").setSelectionRange(6, 10); return true; })()`, nil); err != nil {
		t.Fatal(err)
	}
	var want string
	if err := vb.b.Evaluate(ctx, read, &want); err != nil {
		t.Fatal(err)
	}
	if want != "first line\nsecond line\nthird|Ada|s3cret-pass|two|true|final <b>text</b>|pad:6-10|900|120" {
		t.Fatalf("the page before the move: %q", want)
	}

	// The migration's snapshot: from live state, with the input held.
	if err := one.apps.SnapshotInstance(ctx, iid); err != nil {
		t.Fatal(err)
	}
	if !vb.snap.inputHeld() {
		t.Fatal("input not held for the migration")
	}
	s, _ := snaps.get(iid, vb.id)
	if s.Form == nil || s.Form.Focus != "#pad" || s.Form.ScrollY != 900 {
		t.Fatalf("snapshot form state: %+v", s.Form)
	}
	if raw, _ := json.Marshal(s); strings.Contains(string(raw), "s3cret-pass") {
		t.Fatalf("the password is in the snapshot: %s", raw)
	}

	if err := two.apps.CreateInstance(ctx, wire.CreateInstance{App: app, InstanceID: iid, Owner: "alice", Epoch: 2, Restore: true}); err != nil {
		t.Fatal(err)
	}
	in2, _ := two.instances.get(iid)
	in2.awaitRestore(ctx, vb.id)
	rb, ok := in2.browser(vb.id)
	if !ok {
		t.Fatal("browser not restored")
	}
	// Restored before the browser is handed out: no waiting here.
	var got string
	if err := rb.b.Evaluate(ctx, read, &got); err != nil {
		t.Fatal(err)
	}
	if want = strings.Replace(want, "s3cret-pass", "", 1); got != want {
		t.Fatalf("restored page:\n got %q\nwant %q", got, want)
	}
}
