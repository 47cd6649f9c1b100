package failover

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock/clocktest"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium"
)

// chromiumSite is a Chromium runtime and a site serving files; its
// browsers are subjects of instance w-one.site.
type chromiumSite struct {
	t   *testing.T
	ctx context.Context
	rt  *chromium.Runtime
	url string
}

func newChromiumSite(t *testing.T, files map[string]string) *chromiumSite {
	t.Helper()
	testutil.NeedChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	t.Cleanup(cancel)
	rt, err := chromium.New(ctx, chromium.Config{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := files[strings.TrimPrefix(r.URL.Path, "/")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, body)
	}))
	t.Cleanup(site.Close)
	return &chromiumSite{t: t, ctx: ctx, rt: rt, url: site.URL}
}

// browser is a new Chromium browser (each its own browser context) as
// browser id of the instance.
func (c *chromiumSite) browser(id string) *subject {
	c.t.Helper()
	b, err := c.rt.NewBrowser(c.ctx, browser.Options{})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { b.Close(context.Background()) })
	return &subject{b: b, clients: &fakeClients{}, info: Info{Instance: "w-one.site", Epoch: 1, ID: id, Owner: "alice"}}
}

// A page's URL, cookies, localStorage and sessionStorage are snapshotted
// when it navigates and come back in a new browser, whose page's scripts
// see the storage when they run: reloaded by navigating to its URL, or,
// for a URL with a fragment, by a reload.
func TestRestoreWithChromium(t *testing.T) {
	c := newChromiumSite(t, map[string]string{
		"index.html": `<!doctype html><title>start</title>`,
		"page2.html": `<!doctype html><title>two</title><script>window.seen = localStorage.getItem("note") + "/" + sessionStorage.getItem("tab");</script>`,
	})
	ctx := c.ctx
	store := newMemStore()
	sn := newSnapshots(t, store, nil)
	one := c.browser("b1")
	if err := one.b.Navigate(ctx, c.url+"/index.html"); err != nil {
		t.Fatal(err)
	}
	stop := one.b.OnPageChange(func(p browser.Page) { sn.PageChanged(one, p) })
	t.Cleanup(stop)
	sn.Started(one)
	if err := one.b.Evaluate(ctx, `document.cookie = "sid=abc123; path=/; max-age=3600"; localStorage.setItem("note", "hello"); sessionStorage.setItem("tab", "2"); location.href = "page2.html"; true`, nil); err != nil {
		t.Fatal(err)
	}
	// The navigation is snapshotted at once, with what the page stored.
	testutil.Eventually(t, 10*time.Second, testutil.Cond("a snapshot of page2 with its storage", func() bool {
		s, _ := store.get("w-one.site", "b1")
		return strings.HasSuffix(s.URL, "/page2.html") && s.Local["note"] == "hello" && s.Session["tab"] == "2" && len(s.Cookies) == 1
	}))
	snap, _ := store.get("w-one.site", "b1")
	if snap.Cookies[0].Name != "sid" || snap.Cookies[0].Value != "abc123" || snap.Cookies[0].Expires.IsZero() {
		t.Fatalf("snapshot cookies: %+v", snap.Cookies)
	}

	for _, tc := range []struct{ name, fragment string }{{"navigated", ""}, {"with a fragment", "#top"}} {
		t.Run(tc.name, func(t *testing.T) {
			s := snap
			s.URL += tc.fragment
			two := c.browser("b1")
			if err := sn.RestorePage(ctx, two, s); err != nil {
				t.Fatal(err)
			}
			want := []string{"/page2.html", tc.fragment, "sid=abc123", "hello", "2", "hello/2"}
			testutil.Eventually(t, 10*time.Second, func() error { // the reload may still be loading
				var got []string
				err := two.b.Evaluate(ctx, `[location.pathname, location.hash, document.cookie, localStorage.getItem("note"), sessionStorage.getItem("tab"), String(window.seen)]`, &got)
				if err == nil && strings.Join(got, "|") != strings.Join(want, "|") {
					err = fmt.Errorf("restored page %q, want %q", got, want)
				}
				return err
			})
		})
	}
}

// A page's form state survives the snapshot a migration takes (with its
// input held) and comes back in a new browser once the page has loaded:
// the textarea's, input's, select's, checkbox's and editable element's
// contents, the focus with its caret, and the scroll of the page and of a
// scrolled list. The password never leaves.
func TestFormStateWithChromium(t *testing.T) {
	c := newChromiumSite(t, map[string]string{"index.html": `<!doctype html><title>form</title>
<body style="height:3000px">
<textarea id="pad" rows="2"></textarea><input id="name"><input type="password" id="pw">
<select id="pick"><option>one</option><option>two</option></select><input type="checkbox" id="ok">
<div contenteditable="true" id="ed">draft</div>
<div id="list" style="height:50px;overflow:auto"><div style="height:1000px">items</div></div>`})
	ctx := c.ctx
	store := newMemStore()
	sn := newSnapshots(t, store, clocktest.New(time.Unix(1000, 0)))
	one := c.browser("b1")
	if err := one.b.Navigate(ctx, c.url+"/index.html"); err != nil {
		t.Fatal(err)
	}
	const read = `(() => { const $ = (id) => document.getElementById(id), a = document.activeElement;
		return [$("pad").value, $("name").value, $("pw").value, $("pick").value, String($("ok").checked), $("ed").innerHTML,
			a.id + ":" + a.selectionStart + "-" + a.selectionEnd, String(Math.round(scrollY)), String($("list").scrollTop)].join("|"); })()`
	testutil.Eventually(t, 10*time.Second, func() error {
		var state string
		return one.b.Evaluate(ctx, `document.readyState === "complete" ? "" : Promise.reject(new Error("loading"))`, &state)
	})
	if err := one.b.Evaluate(ctx, `(() => { const $ = (id) => document.getElementById(id);
		$("pad").value = "first line\nsecond line\nthird"; $("name").value = "Ada"; $("pw").value = "s3cret-pass";
		$("pick").value = "two"; $("ok").checked = true; $("ed").innerHTML = "final <b>text</b>";
		$("list").scrollTop = 120; scrollTo(0, 900);
		$("pad").focus({preventScroll: true}); $("pad").setSelectionRange(6, 10); return true; })()`, nil); err != nil {
		t.Fatal(err)
	}
	var want string
	if err := one.b.Evaluate(ctx, read, &want); err != nil {
		t.Fatal(err)
	}
	if want != "first line\nsecond line\nthird|Ada|s3cret-pass|two|true|final <b>text</b>|pad:6-10|900|120" {
		t.Fatalf("the page before the move: %q", want)
	}

	// The migration's snapshot: from live state, with the input held.
	if err := sn.HoldAndSave(ctx, seq(one)); err != nil {
		t.Fatal(err)
	}
	if !one.st.InputHeld() {
		t.Fatal("input not held for the migration")
	}
	s, _ := store.get("w-one.site", "b1")
	if s.Form == nil || s.Form.Focus != "#pad" || s.Form.ScrollY != 900 {
		t.Fatalf("snapshot form state: %+v", s.Form)
	}
	if raw, _ := json.Marshal(s); strings.Contains(string(raw), "s3cret-pass") {
		t.Fatalf("the password is in the snapshot: %s", raw)
	}

	two := c.browser("b1")
	if err := sn.RestorePage(ctx, two, s); err != nil {
		t.Fatal(err)
	}
	// Restored before RestorePage returns: no waiting here.
	var got string
	if err := two.b.Evaluate(ctx, read, &got); err != nil {
		t.Fatal(err)
	}
	if want = strings.Replace(want, "s3cret-pass", "", 1); got != want {
		t.Fatalf("restored page:\n got %q\nwant %q", got, want)
	}
}
