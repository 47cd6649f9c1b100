package worker

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium"
	"github.com/cloudbrowser-go/cloudbrowser/worker/httpserve"
)

const apiPage = `<!doctype html><title>start</title><script>
var cb = window.cloudbrowser;
window.report = {api: typeof cb, raw: typeof window.__cbCall, changes: []};
if (cb) {
  cb.instance.subscribe("k", function (v) { window.report.changes.push(v); });
}
</script>`

// apiFixture is a worker with real Chromium and one instance of an app
// whose page is apiPage, with browsers of alice and bob.
type apiFixture struct {
	t    *testing.T
	ctx  context.Context
	w    *Worker
	in   *instance
	iid  string
	a, b *vbrowser
}

func newAPIFixture(t *testing.T) *apiFixture {
	testutil.NeedChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	rt, err := chromium.New(ctx, chromium.Config{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(Config{ID: "w-api", Secret: testSecret, Master: "127.0.0.1:1", Runtime: rt, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	w.replica.Store = newLocalReplica()
	app := wire.App{Name: "API", MountPoint: "api1", Entry: "index.html", Strategy: wire.SingleAppInstance,
		Files: map[string][]byte{"index.html": []byte(apiPage)}, BrowsersPerUser: 2} // createBrowser is tested
	_ = w.apps.AddApplication(ctx, app)
	f := &apiFixture{t: t, ctx: ctx, w: w, iid: "w-api.apiapiapiapi"}
	if err := w.apps.CreateInstance(ctx, wire.CreateInstance{App: app, InstanceID: f.iid}); err != nil {
		t.Fatal(err)
	}
	f.in, _ = w.instances.get(f.iid)
	if f.a, err = w.browsers.browserFor(ctx, f.in, "alice"); err != nil {
		t.Fatal(err)
	}
	if f.b, err = w.browsers.browserFor(ctx, f.in, "bob"); err != nil {
		t.Fatal(err)
	}
	f.waitFor(f.a, `window.report && window.report.api === "object"`)
	f.waitFor(f.b, `window.report && window.report.api === "object"`)
	return f
}

func (f *apiFixture) eval(vb *vbrowser, expr string, out any) {
	f.t.Helper()
	if err := vb.b.Evaluate(f.ctx, expr, out); err != nil {
		f.t.Fatalf("%s: %v", expr, err)
	}
}

func (f *apiFixture) waitFor(vb *vbrowser, expr string) {
	f.t.Helper()
	testutil.Eventually(f.t, 6*time.Second, func() error {
		var ok bool
		if vb.b.Evaluate(f.ctx, expr, &ok) == nil && ok {
			return nil
		}
		var rep any
		_ = vb.b.Evaluate(f.ctx, "[window.report, typeof window.__cbDeliver, location.origin, typeof window.cloudbrowser]", &rep)
		return fmt.Errorf("not true: %s (report %v, page %+v)", expr, rep, vb.b.Page())
	})
}

func TestAppAPIWithChromium(t *testing.T) {
	f := newAPIFixture(t)
	ctx, in, iid, a, b, eval, waitFor := f.ctx, f.in, f.iid, f.a, f.b, f.eval, f.waitFor
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
	var missing any = "not null"
	eval(a, `cloudbrowser.instance.get("nothing here")`, &missing)
	if missing != nil {
		t.Fatalf("get of a missing key: %v", missing)
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

func (f *apiFixture) state(key string) []byte {
	f.in.mu.Lock()
	defer f.in.mu.Unlock()
	return f.in.state[key]
}

// errOf evaluates a promise expression and returns its rejection message,
// or "resolved".
func errOf(f *apiFixture, vb *vbrowser, expr string) string {
	f.t.Helper()
	var msg string
	f.eval(vb, expr+`.then(function () { return "resolved"; }, function (e) { return e.message; })`, &msg)
	return msg
}

func TestAppAPIAppendWithChromium(t *testing.T) {
	f := newAPIFixture(t)
	a, b := f.a, f.b
	for _, vb := range []*vbrowser{a, b} {
		f.eval(vb, `cloudbrowser.instance.subscribe("log", function (v) { window.report.log = v; })`, nil)
	}

	// 50 appends from each browser at once, none awaited before the next:
	// nothing is lost, and every append saw a distinct length.
	const each = 50
	lengths := make([][]int, 2)
	errs := make(chan error, 2)
	for i, vb := range []*vbrowser{a, b} {
		go func() {
			expr := fmt.Sprintf(`Promise.all(Array.from({length: %d}, function (_, i) {
				return cloudbrowser.instance.append("log", {from: cloudbrowser.currentUser, i: i}, {max: 1000});
			}))`, each)
			errs <- vb.b.Evaluate(f.ctx, expr, &lengths[i])
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	seen := map[int]bool{}
	for _, l := range lengths {
		for _, n := range l {
			if seen[n] || n < 1 || n > 2*each {
				t.Fatalf("append lengths not distinct in 1..%d: %v", 2*each, lengths)
			}
			seen[n] = true
		}
	}
	var log []struct {
		From string
		I    int
	}
	f.eval(a, `cloudbrowser.instance.get("log")`, &log)
	got := map[string]int{}
	for _, e := range log {
		got[fmt.Sprint(e.From, e.I)]++
	}
	if len(log) != 2*each || len(got) != 2*each {
		t.Fatalf("after %d concurrent appends the log has %d entries (%d distinct)", 2*each, len(log), len(got))
	}
	// Subscribers end on the full array although deliveries race.
	for _, vb := range []*vbrowser{a, b} {
		f.waitFor(vb, fmt.Sprintf(`window.report.log && window.report.log.length === %d`, 2*each))
	}

	// Trimming: max keeps the last entries; without max, the default.
	var n int
	for i := 1; i <= 5; i++ {
		f.eval(a, fmt.Sprintf(`cloudbrowser.instance.append("t", %d, {max: 3})`, i), &n)
	}
	var tail []int
	f.eval(b, `cloudbrowser.instance.get("t")`, &tail)
	if n != 3 || fmt.Sprint(tail) != "[3 4 5]" {
		t.Fatalf("max 3 after 5 appends: length %d, %v", n, tail)
	}
	f.eval(a, fmt.Sprintf(`(async function () { var n; for (var i = 0; i < %d; i++) { n = await cloudbrowser.instance.append("d", i); } return n; })()`,
		defaultAppendMax+5), &n)
	f.eval(a, `cloudbrowser.instance.get("d")`, &tail)
	if n != defaultAppendMax || len(tail) != defaultAppendMax || tail[0] != 5 {
		t.Fatalf("default max: length %d, first %v", n, tail[:1])
	}
	// Big entries: the oldest go so the array stays within the value limit.
	for range 4 {
		f.eval(a, `cloudbrowser.instance.append("big", "x".repeat(100 * 1024), {max: 10})`, &n)
	}
	if raw := f.state("big"); n != 2 || len(raw) > maxStateValue {
		t.Fatalf("100 KiB entries: length %d, %d bytes", n, len(raw))
	}

	// Errors, each with a message, none leaving the promise pending.
	f.eval(a, `cloudbrowser.instance.set("obj", {a: 1})`, nil)
	for expr, want := range map[string]string{
		`cloudbrowser.instance.append("obj", 1)`:                            `state key "obj" holds a value that is not an array`,
		`cloudbrowser.instance.append("", 1)`:                               "state key must be 1-256 characters",
		`cloudbrowser.instance.append("t", 1, {max: 0})`:                    "append max must be an integer from 1 to 10000",
		`cloudbrowser.instance.append("t", 1, {max: 1.5})`:                  "append max must be an integer from 1 to 10000",
		`cloudbrowser.instance.append("t", 1, {max: 10001})`:                "append max must be an integer from 1 to 10000",
		`cloudbrowser.instance.append("t", 1, {max: "3"})`:                  "append: max must be a number",
		`cloudbrowser.instance.append("t", "x".repeat(256 * 1024))`:         "appended value is 262146 bytes: one entry must fit the 262142 byte value limit",
		`cloudbrowser.instance.append("t", "x".repeat(300 * 1024))`:         "append request of ",
		`cloudbrowser.instance.set("t", "x".repeat(300 * 1024))`:            "set request of ",
		`cloudbrowser.instance.append("t", "x".repeat(256 * 1024 - 2 - 2))`: "resolved", // exactly fits alone
	} {
		if got := errOf(f, b, expr); !strings.HasPrefix(got, want) {
			t.Errorf("%s: %q, want %q", expr, got, want)
		}
	}
	if raw := f.state("t"); len(raw) != maxStateValue {
		t.Fatalf("t after the entry that fits alone: %d bytes", len(raw))
	}
}

// TestAppAPIReinstalledForNextUser: a pooled browser given to the next user
// without a navigation (a back sequence that keeps the page) gets the new
// user's API in the open document; the previous user's is gone.
func TestAppAPIReinstalledForNextUser(t *testing.T) {
	f := newAPIFixture(t)
	a := f.a
	// What browserMaker.newBrowser does at lease time, for carol, on alice's
	// Chromium page.
	next := &vbrowser{id: "bnext", inst: f.in, owner: "carol", b: a.b, hub: a.hub, subs: map[string]bool{},
		perms: map[string]httpserve.Role{}, apiToken: "next-token-next-token-next"}
	if err := a.b.Install(f.ctx, f.w.apiScript(next), map[string]func(string){apiBinding: func(p string) { f.w.api.onAPICall(next, p) }}); err != nil {
		t.Fatal(err)
	}
	var who []string
	f.eval(a, `[cloudbrowser.currentUser, cloudbrowser.browser.id]`, &who)
	if who[0] != "carol" || who[1] != "bnext" {
		t.Fatalf("the open document still has the previous user's API: %v", who)
	}
	// The new API works: its calls carry carol's token and are answered.
	if msg := errOf(f, a, `cloudbrowser.instance.set("k2", 1)`); msg != "resolved" {
		t.Fatalf("set through the new API: %s", msg)
	}
	if string(f.state("k2")) != "1" {
		t.Fatalf("state after set: %q", f.state("k2"))
	}
}
