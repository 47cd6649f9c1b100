package chromium

import (
	"context"
	"errors"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/target"

	"fmt"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil/storagesite"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium/sitedata"
)

// TestReset: what a job's pages kept in a browser (cookies, storage of
// the top document and of a third-party frame, service workers, the HTTP
// cache) is visible to the next page without a reset, and gone after one.
func TestReset(t *testing.T) {
	rt := shared(t)
	ctx := testCtx(t)
	frameSite := httptest.NewServer(&storagesite.Site{})
	defer frameSite.Close()
	top := &storagesite.Site{Frame: func() string {
		// localhost vs 127.0.0.1: another site, so the frame is third-party.
		return strings.Replace(frameSite.URL, "127.0.0.1", "localhost", 1)
	}}
	siteA := httptest.NewServer(top)
	defer siteA.Close()
	b := newBrowser(t, rt, browser.Options{})
	load := func(mode string) storagesite.Page {
		t.Helper()
		if _, err := b.Load(ctx, siteA.URL+"/page?mode="+mode, browser.LoadOptions{}); err != nil {
			t.Fatal(err)
		}
		return eval[storagesite.Page](t, b, "window.done")
	}
	written := load("write")
	for _, s := range []storagesite.Stored{written.Self, written.Frame} {
		if len(s.Errs) > 0 {
			t.Logf("write errors: %v", s.Errs)
		}
	}
	want := storagesite.Written()
	if got := written.Self; !reflect.DeepEqual(got, want) {
		t.Fatalf("written by the top document: %+v, want %+v", got, want)
	}
	if f := written.Frame; f.Local != "v" || f.Session != "v" || len(f.DBs) != 1 || len(f.Caches) != 1 {
		t.Fatalf("written by the third-party frame: %+v", f)
	}
	// Without a reset the next page sees it all (so the test can fail),
	// and its script comes from the HTTP cache.
	if got := load("read"); !reflect.DeepEqual(got, written) {
		t.Fatalf("read without a reset: %+v, want %+v", got, written)
	}
	if n := top.Res(); n != 1 {
		t.Fatalf("the cacheable script was fetched %d times, want 1 (cached)", n)
	}
	if err := b.(interface{ Reset(context.Context) error }).Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if p := b.Page(); p.URL != "about:blank" {
		t.Fatalf("after a reset the page is %q", p.URL)
	}
	blank := storagesite.Stored{DBs: []string{}, Caches: []string{}}
	got := load("read")
	for name, s := range map[string]storagesite.Stored{"top document": got.Self, "third-party frame": got.Frame} {
		if s.Errs = nil; !reflect.DeepEqual(s, blank) {
			t.Errorf("%s after a reset: %+v", name, s)
		}
	}
	if n := top.Res(); n != 2 {
		t.Errorf("the cacheable script was fetched %d times in all, want 2 (the cache was cleared)", n)
	}
}

// TestResetSession: what a tab keeps across documents is reset too:
// window.name, the history, popups, the viewport and the navigation
// policy. A browser whose page used URL credentials (which Chromium keeps
// in an auth cache no command clears) is refused.
func TestResetSession(t *testing.T) {
	rt := shared(t)
	ctx := testCtx(t)
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		if r.URL.Path == "/auth" {
			if u, p, ok := r.BasicAuth(); !ok || u != "u" || p != "p" {
				w.Header().Set("WWW-Authenticate", `Basic realm="r"`)
				http.Error(w, "who?", http.StatusUnauthorized)
				return
			}
		}
		fmt.Fprint(w, "<title>ok</title>ok")
	}))
	defer site.Close()
	b := newBrowser(t, rt, browser.Options{})
	cb := b.(*cbrowser)
	if err := b.SetPolicy(ctx, func(string) bool { return true }); err != nil {
		t.Fatal(err)
	}
	if err := b.Input(ctx, browser.InputEvent{Type: browser.InputResize, Width: 400, Height: 300}); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{site.URL + "/a", site.URL + "/b"} {
		if res, err := b.Load(ctx, u, browser.LoadOptions{}); err != nil || res.Status != 200 {
			t.Fatalf("load %s: %d %v", u, res.Status, err)
		}
	}
	eval[any](t, b, `window.name = "secret"; window.open("/popup", "_blank"); 1`)
	pages := func() int {
		res, err := cdp.Call(ctx, cb.bc, target.GetTargets, target.GetTargetsParams{})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, ti := range res.TargetInfos {
			if ti.BrowserContextID == cb.contextID && ti.Type == "page" {
				n++
			}
		}
		return n
	}
	testutil.Eventually(t, 10*time.Second, testutil.Cond("the popup opened", func() bool { return pages() == 2 }))
	if err := cb.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	if n := pages(); n != 1 {
		t.Errorf("%d pages after the reset, want 1", n)
	}
	if err := b.SetPolicy(ctx, func(string) bool { return true }); err != nil {
		t.Errorf("a policy after the reset: %v", err)
	}
	if _, err := b.Load(ctx, site.URL+"/c", browser.LoadOptions{}); err != nil {
		t.Fatal(err)
	}
	type state struct {
		Name    string `json:"name"`
		History int    `json:"history"`
		Width   int    `json:"width"`
	}
	got := eval[state](t, b, `({name: window.name, history: history.length, width: innerWidth})`)
	if want := (state{"", 2, browser.DefaultWidth}); got != want {
		t.Errorf("after the reset: %+v, want %+v", got, want)
	}

	// URL credentials: the auth cache keeps them (so the refusal is
	// needed), and the reset refuses.
	host := strings.TrimPrefix(site.URL, "http://")
	if res, err := b.Load(ctx, "http://u:p@"+host+"/auth", browser.LoadOptions{}); err != nil || res.Status != 200 {
		t.Fatalf("auth with credentials: %d %v", res.Status, err)
	}
	if res, err := b.Load(ctx, site.URL+"/auth", browser.LoadOptions{}); err != nil || res.Status != 200 {
		t.Fatalf("auth without credentials after a load with them: %d %v, want 200 (cached)", res.Status, err)
	}
	if err := cb.Reset(ctx); !errors.Is(err, sitedata.ErrNotResettable) {
		t.Errorf("reset after URL credentials: %v, want ErrNotResettable", err)
	}
}
