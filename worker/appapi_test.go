package worker

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/chromiumtest"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium"
)

const apiPage = `<!doctype html><title>start</title><script>
var cb = window.cloudbrowser;
window.report = {api: typeof cb, raw: typeof window.__cbCall, changes: []};
if (cb) {
  cb.instance.subscribe("k", function (v) { window.report.changes.push(v); });
}
</script>`

func TestAppAPIWithChromium(t *testing.T) {
	chromiumtest.Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	rt, err := chromium.New(ctx, chromium.Config{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(Config{ID: "w-api", Secret: testSecret, Master: "127.0.0.1:1", Runtime: rt, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.startBundleServer(ctx); err != nil {
		t.Fatal(err)
	}
	app := wire.App{Name: "API", MountPoint: "api1", Entry: "index.html", Strategy: wire.SingleAppInstance,
		Files: map[string][]byte{"index.html": []byte(apiPage)}}
	_ = w.apps.AddApplication(ctx, app)
	iid := "w-api.apiapiapiapi"
	if err := w.apps.CreateInstance(ctx, wire.CreateInstance{App: app, InstanceID: iid}); err != nil {
		t.Fatal(err)
	}
	in, _ := w.apps.instance(iid)
	a, err := w.apps.browserFor(ctx, in, "alice")
	if err != nil {
		t.Fatal(err)
	}
	b, err := w.apps.browserFor(ctx, in, "bob")
	if err != nil {
		t.Fatal(err)
	}
	eval := func(vb *vbrowser, expr string, out any) {
		t.Helper()
		if err := vb.b.Evaluate(ctx, expr, out); err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
	}
	waitFor := func(vb *vbrowser, expr string) {
		t.Helper()
		for i := 0; i < 300; i++ {
			var ok bool
			if vb.b.Evaluate(ctx, expr, &ok) == nil && ok {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		var rep any
		_ = vb.b.Evaluate(ctx, "[window.report, typeof window.__cbDeliver, location.origin, typeof window.cloudbrowser]", &rep)
		t.Fatalf("never true: %s (report %v, page %+v)", expr, rep, vb.b.Page())
	}
	waitFor(a, `window.report && window.report.api === "object"`)
	waitFor(b, `window.report && window.report.api === "object"`)
	// A page script calling the raw binding without the token is ignored.
	eval(a, `window.__cbCall(JSON.stringify({id: 1, op: "set", key: "k", value: 666, token: "guess"}))`, nil)
	var who []string
	eval(a, `[cloudbrowser.currentUser, cloudbrowser.instance.id, cloudbrowser.browser.id, cloudbrowser.app.mountPoint]`, &who)
	if who[0] != "alice" || who[1] != iid || who[2] != a.id || who[3] != "api1" {
		t.Fatalf("identity: %v", who)
	}
	// Bob sets, alice (and bob) are told; get returns it.
	var ok bool
	eval(b, `cloudbrowser.instance.set("k", {n: 1, s: "x"}).then(function (r) { return r === true; })`, &ok)
	waitFor(a, `window.report.changes.length === 1 && window.report.changes[0].n === 1`)
	waitFor(b, `window.report.changes.length === 1`)
	var got map[string]any
	eval(a, `cloudbrowser.instance.get("k")`, &got)
	if got["s"] != "x" {
		t.Fatalf("get: %v", got)
	}
	var list []map[string]any
	eval(a, `cloudbrowser.instance.browsers()`, &list)
	if len(list) != 2 {
		t.Fatalf("browsers: %v", list)
	}
	var errMsg string
	eval(a, `cloudbrowser.instance.set("", 1).then(function () { return "no error"; }, function (e) { return e.message; })`, &errMsg)
	if errMsg == "no error" {
		t.Fatal("empty key accepted")
	}
	var created map[string]any
	eval(a, `cloudbrowser.instance.createBrowser()`, &created)
	if created["url"] == nil {
		t.Fatalf("createBrowser: %v", created)
	}
	if n := len(in.browsers); n != 3 {
		t.Fatalf("%d browsers after createBrowser", n)
	}
	// A page of another origin gets no API.
	if err := a.b.Navigate(ctx, "data:text/html,<title>other</title>"); err != nil {
		t.Fatal(err)
	}
	var typ string
	eval(a, `typeof window.cloudbrowser`, &typ)
	if typ != "undefined" {
		t.Fatalf("foreign origin sees the API: %s", typ)
	}
	_ = http.StatusOK
}
