package chromium

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/target"
	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/procfs"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// The tests share one Runtime (Chromium start is the slow part); tests that
// kill or close Chromium make their own.
var (
	sharedOnce sync.Once
	sharedRT   *Runtime
	sharedErr  error
	testSrv    *httptest.Server
)

func TestMain(m *testing.M) { testutil.Main(withFixtures{m}) }

// withFixtures starts the test pages and ends the shared runtime around the
// tests, so the leak check runs after both are gone.
type withFixtures struct{ m *testing.M }

func (w withFixtures) Run() int {
	testSrv = httptest.NewServer(testPages())
	defer testSrv.Close()
	defer func() {
		if sharedRT != nil {
			sharedRT.Close()
		}
	}()
	return w.m.Run()
}

func shared(t testing.TB) *Runtime {
	t.Helper()
	testutil.NeedChromium(t)
	sharedOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// Nop: the runtime outlives the test that starts it, so no test's
		// log can take its lines.
		sharedRT, sharedErr = New(ctx, Config{Logger: zerolog.Nop()})
	})
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return sharedRT
}

// testCtx bounds a test so a hang fails instead of stalling the package;
// it is a safety net, not a performance assertion.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newBrowser(t *testing.T, rt *Runtime, opts browser.Options) browser.Browser {
	t.Helper()
	b, err := rt.NewBrowser(testCtx(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(context.Background()) })
	return b
}

func eval[T any](t *testing.T, b browser.Browser, expr string) T {
	t.Helper()
	var v T
	if err := b.Evaluate(testCtx(t), expr, &v); err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// waitLoaded waits for the page's load event: NewBrowser and Navigate
// return once the document committed, and parsing goes on after that.
func waitLoaded(t *testing.T, b browser.Browser) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, testutil.Cond("page loaded", func() bool { return eval[string](t, b, "document.readyState") == "complete" }))
}

func testPages() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/title", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "<!doctype html><title>%s</title><p>page", r.URL.RawQuery)
	})
	mux.HandleFunc("/form", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<!doctype html><title>form</title>
<form id=f onsubmit="window.submitted = document.getElementById('a').value; return false">
<input id=a autofocus style="position:absolute;left:10px;top:10px;width:300px;height:30px">
<input id=b style="position:absolute;left:10px;top:60px;width:300px;height:30px">
<input type=submit style="position:absolute;left:400px;top:10px">
</form>
<button id=btn style="position:absolute;left:100px;top:200px;width:120px;height:40px"
 onclick="window.clicks = (window.clicks || 0) + 1">click</button>`)
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `<!doctype html><title>big</title><body style="margin:0">
<div style="width:5000px;height:5000px;background:linear-gradient(red,blue)"></div>`)
	})
	mux.HandleFunc("/cookie", func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "sess", Value: "s1", Path: "/"})
		http.SetCookie(w, &http.Cookie{Name: "keep", Value: "k1", Path: "/", Expires: time.Now().Add(time.Hour), HttpOnly: true})
		fmt.Fprint(w, "<!doctype html><title>cookie</title>")
	})
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		var names []string
		for _, c := range r.Cookies() {
			names = append(names, c.Name+"="+c.Value)
		}
		fmt.Fprintf(w, "<!doctype html><title>%s</title>", strings.Join(names, ";"))
	})
	return mux
}

func TestPageTracking(t *testing.T) {
	rt := shared(t)
	ctx := testCtx(t)
	url := testSrv.URL + "/title?Hello"
	b := newBrowser(t, rt, browser.Options{URL: url, Width: 800, Height: 600})
	if got := b.Page().URL; got != url {
		t.Fatalf("url %q, want %q", got, url)
	}
	changes := make(chan browser.Page, 100)
	stop := b.OnPageChange(func(p browser.Page) { changes <- p })
	defer stop()
	testutil.Eventually(t, 30*time.Second, testutil.Cond("title Hello", func() bool { return b.Page().Title == "Hello" }))
	if w := eval[int](t, b, "window.innerWidth"); w != 800 {
		t.Fatalf("innerWidth %d", w)
	}

	// Title changes by script and within-document navigation are seen.
	eval[any](t, b, `document.title = "Changed"`)
	testutil.Eventually(t, 30*time.Second, testutil.Cond("title Changed", func() bool { return b.Page().Title == "Changed" }))
	eval[any](t, b, `history.pushState(null, "", "/title?pushed")`)
	testutil.Eventually(t, 30*time.Second, testutil.Cond("pushState url", func() bool { return b.Page().URL == testSrv.URL+"/title?pushed" }))

	// A notification carries the latest page.
	for p := range changes {
		if p.URL == testSrv.URL+"/title?pushed" {
			break
		}
	}

	data := "data:text/html,<title>Data</title>x"
	if err := b.Navigate(ctx, data); err != nil {
		t.Fatal(err)
	}
	if got := b.Page().URL; got != data {
		t.Fatalf("after navigate url %q", got)
	}
	testutil.Eventually(t, 30*time.Second, testutil.Cond("title Data", func() bool { return b.Page().Title == "Data" }))

	// Back goes to the pushed entry; forward returns.
	if err := b.Input(ctx, browser.InputEvent{Type: browser.InputBack}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, testutil.Cond("back", func() bool { return b.Page().URL == testSrv.URL+"/title?pushed" }))
	if err := b.Input(ctx, browser.InputEvent{Type: browser.InputForward}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, testutil.Cond("forward", func() bool { return b.Page().URL == data }))
	if err := b.Input(ctx, browser.InputEvent{Type: browser.InputNavigate, URL: testSrv.URL + "/title?Via_input"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, testutil.Cond("input navigate", func() bool { return b.Page().Title == "Via_input" }))
	if err := b.Input(ctx, browser.InputEvent{Type: browser.InputReload}); err != nil {
		t.Fatal(err)
	}

	// Invalid navigation fails cleanly and keeps the browser usable.
	if err := b.Input(ctx, browser.InputEvent{Type: browser.InputNavigate, URL: "file:///etc/passwd"}); !errors.Is(err, browser.ErrInvalidInput) {
		t.Fatalf("file url: %v", err)
	}
	if err := b.Navigate(ctx, "http://127.0.0.1:1/"); err == nil {
		t.Fatal("navigating to a closed port succeeded")
	}
	if b.Err() != nil {
		t.Fatal(b.Err())
	}
}

func TestEvaluate(t *testing.T) {
	b := newBrowser(t, shared(t), browser.Options{})
	ctx := testCtx(t)
	var got struct {
		A int
		B []string
	}
	if err := b.Evaluate(ctx, `Promise.resolve({A: 7, B: ["x", "y"]})`, &got); err != nil {
		t.Fatal(err)
	}
	if got.A != 7 || len(got.B) != 2 {
		t.Fatalf("%+v", got)
	}
	if err := b.Evaluate(ctx, `throw new Error("boom")`, nil); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("exception: %v", err)
	}
	n := 5
	if err := b.Evaluate(ctx, `undefined`, &n); err != nil || n != 5 {
		t.Fatalf("undefined: %v %d", err, n)
	}
}

func TestScreencast(t *testing.T) {
	b := newBrowser(t, shared(t), browser.Options{URL: testSrv.URL + "/title?cast", Width: 640, Height: 480})
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	waitLoaded(t, b)
	frames := make(chan browser.Frame, 64)
	errc := make(chan error, 1)
	go func() {
		errc <- b.Screencast(ctx, browser.ScreencastOptions{Quality: 50}, func(f browser.Frame) {
			select {
			case frames <- f:
			default: // the test reads only a few
			}
		})
	}()
	// Repaint until a frame arrives: frames come only on paint, and the
	// screencast may start after the first repaint.
	var f browser.Frame
	for got := false; !got; {
		eval[any](t, b, `document.body.style.background = "#" + Math.floor(Math.random()*0xffffff).toString(16).padStart(6, "0")`)
		select {
		case f = <-frames:
			got = true
		case <-time.After(100 * time.Millisecond):
		case err := <-errc:
			t.Fatalf("screencast ended: %v", err)
		case <-ctx.Done():
			t.Fatal("no frame")
		}
	}
	if !bytes.HasPrefix(f.Data, []byte{0xff, 0xd8, 0xff}) {
		t.Fatalf("not a JPEG: % x", f.Data[:min(8, len(f.Data))])
	}
	if f.Width != 640 || f.Height != 480 || f.DeviceWidth != 640 || f.Seq == 0 || f.Timestamp.IsZero() {
		t.Fatalf("frame %dx%d device %vx%v seq %d ts %v", f.Width, f.Height, f.DeviceWidth, f.DeviceHeight, f.Seq, f.Timestamp)
	}
	if err := b.Screencast(ctx, browser.ScreencastOptions{}, func(browser.Frame) {}); !errors.Is(err, browser.ErrBusy) {
		t.Fatalf("second screencast: %v", err)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("screencast returned %v", err)
	}
	// A new screencast can start once the old one ended, and ends with the browser.
	go func() {
		errc <- b.Screencast(context.Background(), browser.ScreencastOptions{}, func(browser.Frame) {})
	}()
	time.Sleep(50 * time.Millisecond) // let it start; either order is correct
	b.Close(context.Background())
	if err := <-errc; !errors.Is(err, browser.ErrClosed) {
		t.Fatalf("screencast after close: %v", err)
	}
}

// typeText sends what a client sends for each character: keydown + keyup.
func typeText(t *testing.T, b browser.Browser, s string) {
	t.Helper()
	for _, r := range s {
		key := string(r)
		var mods browser.Modifiers
		if r >= 'A' && r <= 'Z' {
			mods = browser.ModShift
		}
		press(t, b, key, mods)
	}
}

func press(t *testing.T, b browser.Browser, key string, mods browser.Modifiers) {
	t.Helper()
	ctx := testCtx(t)
	for _, typ := range []browser.InputType{browser.InputKeyDown, browser.InputKeyUp} {
		if err := b.Input(ctx, browser.InputEvent{Type: typ, Key: key, Modifiers: mods}); err != nil {
			t.Fatalf("%s %q: %v", typ, key, err)
		}
	}
}

func click(t *testing.T, b browser.Browser, x, y float64) {
	t.Helper()
	ctx := testCtx(t)
	for _, ev := range []browser.InputEvent{
		{Type: browser.InputMouseMove, X: x, Y: y},
		{Type: browser.InputMouseDown, X: x, Y: y, Button: browser.ButtonLeft, ClickCount: 1},
		{Type: browser.InputMouseUp, X: x, Y: y, Button: browser.ButtonLeft, ClickCount: 1},
	} {
		if err := b.Input(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTypingAndClick(t *testing.T) {
	b := newBrowser(t, shared(t), browser.Options{URL: testSrv.URL + "/form"})
	ctx := testCtx(t)
	waitLoaded(t, b)
	click(t, b, 50, 25) // focus #a
	testutil.Eventually(t, 30*time.Second, testutil.Cond("focus", func() bool { return eval[string](t, b, "document.activeElement.id") == "a" }))

	typeText(t, b, "Hello, World! 123 äé")
	if got := eval[string](t, b, "document.getElementById('a').value"); got != "Hello, World! 123 äé" {
		t.Fatalf("typed %q", got)
	}
	// Editing keys: Backspace deletes, arrows move the caret.
	press(t, b, "Backspace", 0)
	press(t, b, "Backspace", 0)
	press(t, b, "ArrowLeft", 0)
	press(t, b, "ArrowLeft", 0)
	typeText(t, b, "X")
	if err := b.Input(ctx, browser.InputEvent{Type: browser.InputInsertText, Text: "<paste>"}); err != nil {
		t.Fatal(err)
	}
	want := "Hello, World! 12X<paste>3 "
	if got := eval[string](t, b, "document.getElementById('a').value"); got != want {
		t.Fatalf("edited %q, want %q", got, want)
	}
	press(t, b, "Enter", 0)
	if got := eval[string](t, b, "window.submitted || ''"); got != want {
		t.Fatalf("submitted %q", got)
	}
	press(t, b, "Tab", 0)
	if id := eval[string](t, b, "document.activeElement.id"); id != "b" {
		t.Fatalf("after Tab focus is on %q", id)
	}
	typeText(t, b, "second")
	if got := eval[string](t, b, "document.getElementById('b').value"); got != "second" {
		t.Fatalf("second input %q", got)
	}
	// Shortcuts: Ctrl+A selects all, typing replaces it, Ctrl+Z undoes.
	press(t, b, "a", browser.ModCtrl)
	typeText(t, b, "new")
	if got := eval[string](t, b, "document.getElementById('b').value"); got != "new" {
		t.Fatalf("after Ctrl+A and typing: %q", got)
	}
	press(t, b, "z", browser.ModCtrl)
	if got := eval[string](t, b, "document.getElementById('b').value"); got == "new" {
		t.Fatalf("Ctrl+Z did not undo: %q", got)
	}

	click(t, b, 160, 220) // the button
	if n := eval[int](t, b, "window.clicks || 0"); n != 1 {
		t.Fatalf("clicks %d", n)
	}
	if err := b.Input(ctx, browser.InputEvent{Type: "teleport"}); !errors.Is(err, browser.ErrInvalidInput) {
		t.Fatalf("unknown type: %v", err)
	}
}

func TestWheelAndResize(t *testing.T) {
	b := newBrowser(t, shared(t), browser.Options{URL: testSrv.URL + "/big"})
	ctx := testCtx(t)
	waitLoaded(t, b)
	wheel := func(dx, dy float64) {
		if err := b.Input(ctx, browser.InputEvent{Type: browser.InputWheel, X: 100, Y: 100, DeltaX: dx, DeltaY: dy}); err != nil {
			t.Fatalf("wheel %v,%v: %v", dx, dy, err)
		}
	}
	wheel(0, 300)
	testutil.Eventually(t, 30*time.Second, testutil.Cond("vertical scroll", func() bool { return eval[float64](t, b, "window.scrollY") > 0 }))
	if x := eval[float64](t, b, "window.scrollX"); x != 0 {
		t.Fatalf("scrollX %v after a vertical wheel", x)
	}
	wheel(250, 0)
	testutil.Eventually(t, 30*time.Second, testutil.Cond("horizontal scroll", func() bool { return eval[float64](t, b, "window.scrollX") > 0 }))

	if err := b.Input(ctx, browser.InputEvent{Type: browser.InputResize, Width: 500, Height: 400}); err != nil {
		t.Fatal(err)
	}
	if w := eval[int](t, b, "window.innerWidth"); w != 500 {
		t.Fatalf("innerWidth %d after resize", w)
	}
}

func TestCookiesTransfer(t *testing.T) {
	rt := shared(t)
	ctx := testCtx(t)
	a := newBrowser(t, rt, browser.Options{URL: testSrv.URL + "/cookie"})
	b := newBrowser(t, rt, browser.Options{})
	cs, err := a.Cookies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]browser.Cookie{}
	for _, c := range cs {
		byName[c.Name] = c
	}
	if byName["sess"].Value != "s1" || !byName["sess"].Expires.IsZero() {
		t.Fatalf("session cookie %+v", byName["sess"])
	}
	if k := byName["keep"]; k.Value != "k1" || !k.HTTPOnly || k.Expires.Before(time.Now()) {
		t.Fatalf("persistent cookie %+v", k)
	}
	// Contexts are isolated...
	if bc, err := b.Cookies(ctx); err != nil || len(bc) != 0 {
		t.Fatalf("fresh browser has cookies %v %v", bc, err)
	}
	// ...until cookies are moved over.
	if err := b.SetCookies(ctx, cs); err != nil {
		t.Fatal(err)
	}
	if err := b.Navigate(ctx, testSrv.URL+"/echo"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, testutil.Cond("echoed cookies", func() bool { return b.Page().Title != "" }))
	if got := b.Page().Title; !strings.Contains(got, "sess=s1") || !strings.Contains(got, "keep=k1") {
		t.Fatalf("server saw cookies %q", got)
	}
	bc, _ := b.Cookies(ctx)
	for _, c := range bc {
		if c.Name == "sess" && !c.Expires.IsZero() {
			t.Fatalf("session cookie became persistent: %+v", c)
		}
	}
}

// pageTargets counts Chromium's page targets and browser contexts.
func pageTargets(t *testing.T, rt *Runtime) (pages, contexts int) {
	t.Helper()
	rt.mu.Lock()
	p := rt.slots[0].proc
	rt.mu.Unlock()
	ctx := testCtx(t)
	res, err := cdp.Call(ctx, p.browser, target.GetTargets, target.GetTargetsParams{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range res.TargetInfos {
		if ti.Type == "page" {
			pages++
		}
	}
	bcs, err := cdp.Call(ctx, p.browser, target.GetBrowserContexts, cdp.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	return pages, len(bcs.BrowserContextIDs)
}

func TestNoLeakedTargets(t *testing.T) {
	rt := shared(t)
	ctx := testCtx(t)
	pages0, contexts0 := pageTargets(t, rt)
	for i := range 50 {
		b, err := rt.NewBrowser(ctx, browser.Options{URL: "data:text/html,<title>" + strconv.Itoa(i) + "</title>"})
		if err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
		if err := b.Close(ctx); err != nil {
			t.Fatalf("cycle %d close: %v", i, err)
		}
	}
	// A creation abandoned half way leaves nothing either.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := rt.NewBrowser(cctx, browser.Options{}); err == nil {
		t.Fatal("NewBrowser with a cancelled context succeeded")
	}
	// Close waits for Chromium to drop the target, but allow a busy machine
	// a moment to list it gone.
	testutil.Eventually(t, 10*time.Second, func() error {
		if pages, contexts := pageTargets(t, rt); pages != pages0 || contexts != contexts0 {
			return fmt.Errorf("after 50 cycles: %d pages, %d contexts; before: %d, %d", pages, contexts, pages0, contexts0)
		}
		return nil
	})
	if st, _ := rt.Stats(ctx); st.Browsers != 0 {
		t.Fatalf("stats count %d browsers", st.Browsers)
	}
}

func TestStats(t *testing.T) {
	rt := shared(t)
	newBrowser(t, rt, browser.Options{URL: testSrv.URL + "/title?stats"})
	st, err := rt.Stats(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.Browsers != 1 || st.Processes < 2 || st.PSS == 0 {
		t.Fatalf("stats %+v", st)
	}
	t.Logf("1 browser: %d processes, PSS %.1f MiB", st.Processes, float64(st.PSS)/(1<<20))
}

func TestRendererCrash(t *testing.T) {
	rt := shared(t)
	ctx := testCtx(t)
	victim := newBrowser(t, rt, browser.Options{URL: testSrv.URL + "/title?victim"})
	other := newBrowser(t, rt, browser.Options{URL: testSrv.URL + "/title?other"})
	waitLoaded(t, other)
	// Page.crash never answers; the crash event ends the browser.
	go cdp.Call(context.Background(), victim.(*cbrowser).t, page.Crash, cdp.Empty{})
	select {
	case <-victim.Done():
	case <-ctx.Done():
		t.Fatal("crashed browser not done")
	}
	if !errors.Is(victim.Err(), browser.ErrCrashed) {
		t.Fatalf("victim err %v", victim.Err())
	}
	if err := victim.Navigate(ctx, "about:blank"); !errors.Is(err, browser.ErrCrashed) {
		t.Fatalf("navigate on crashed browser: %v", err)
	}
	if got := eval[string](t, other, "document.title"); got != "other" || other.Err() != nil {
		t.Fatalf("other browser: %q %v", got, other.Err())
	}
}

// procState returns a process's state and parent, ok=false if it is gone.
func procState(pid int) (procfs.Stat, bool) {
	st, err := procfs.ReadStat(pid)
	return st, err == nil
}

func TestChromiumCrashRecovery(t *testing.T) {
	testutil.NeedChromium(t)
	ctx := testCtx(t)
	rt, err := New(ctx, Config{Processes: 2, Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	var bs []browser.Browser
	for range 4 {
		b, err := rt.NewBrowser(ctx, browser.Options{URL: testSrv.URL + "/title?x"})
		if err != nil {
			t.Fatal(err)
		}
		waitLoaded(t, b)
		bs = append(bs, b)
	}
	rt.mu.Lock()
	victim, survivor := rt.slots[0].proc, rt.slots[1].proc
	var onVictim, onSurvivor []browser.Browser
	for _, b := range bs {
		if b.(*cbrowser).p == victim {
			onVictim = append(onVictim, b)
		} else {
			onSurvivor = append(onSurvivor, b)
		}
	}
	rt.mu.Unlock()
	if len(onVictim) != 2 || len(onSurvivor) != 2 {
		t.Fatalf("browsers not spread: %d/%d", len(onVictim), len(onSurvivor))
	}
	procs, _ := procfs.ReadAll()
	oldTree := procfs.Tree(procs, victim.pid)

	if err := syscall.Kill(victim.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for _, b := range onVictim {
		select {
		case <-b.Done():
		case <-ctx.Done():
			t.Fatal("browser of the killed process not done")
		}
		if !errors.Is(b.Err(), browser.ErrCrashed) {
			t.Fatalf("err %v", b.Err())
		}
	}
	for _, b := range onSurvivor {
		if b.Err() != nil || eval[string](t, b, "document.title") != "x" {
			t.Fatalf("survivor broken: %v", b.Err())
		}
	}
	// The slot comes back; fill the survivor so the next browser must go
	// to the restarted process.
	testutil.Eventually(t, 30*time.Second, testutil.Cond("restart", func() bool {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		return rt.slots[0].proc != nil
	}))
	for range 3 {
		b, err := rt.NewBrowser(ctx, browser.Options{URL: testSrv.URL + "/title?after"})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close(context.Background())
	}
	rt.mu.Lock()
	restarted := rt.slots[0].proc
	rt.mu.Unlock()
	if restarted == nil || restarted.pid == victim.pid || len(restarted.browsers) == 0 {
		t.Fatalf("restarted process %+v", restarted)
	}
	if _, err := os.Stat(victim.dir); !os.IsNotExist(err) {
		t.Fatalf("old profile dir %s: %v", victim.dir, err)
	}
	// Nothing of the old Chromium lives on. Its orphans are re-parented to
	// init; a zombie there is dead (this sandbox's init may not reap), but
	// none may be our unreaped child.
	for _, pid := range oldTree {
		if st, ok := procState(pid); ok && st.Alive() {
			t.Errorf("old chromium process %d still alive (%c, ppid %d)", pid, st.State, st.PPid)
		}
	}
	assertNoZombieChildren(t)

	dirs := []string{restarted.dir, survivor.dir}
	rt.Close()
	for _, b := range onSurvivor {
		if !errors.Is(b.Err(), browser.ErrClosed) {
			t.Fatalf("after runtime close: %v", b.Err())
		}
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Fatalf("profile dir %s left: %v", d, err)
		}
	}
	if _, err := rt.NewBrowser(ctx, browser.Options{}); !errors.Is(err, browser.ErrClosed) {
		t.Fatalf("NewBrowser after Close: %v", err)
	}
	assertNoZombieChildren(t)
}

func assertNoZombieChildren(t *testing.T) {
	t.Helper()
	procs, err := procfs.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if p.PPid == os.Getpid() && p.State == 'Z' {
			t.Errorf("zombie child %d", p.Pid)
		}
	}
}

func TestConfig(t *testing.T) {
	if _, err := allocatorOptions("/bin/true", Config{ExtraFlags: []string{"no-dashes"}}); err == nil {
		t.Fatal("flag without -- accepted")
	}
	if _, err := allocatorOptions("/bin/true", Config{ExtraFlags: []string{"--user-data-dir=/x"}}); err == nil {
		t.Fatal("managed flag accepted")
	}
	if _, err := allocatorOptions("/bin/true", Config{ExtraFlags: []string{"--disable-gpu", "--js-flags=--lite-mode"}, RendererProcessLimit: 2}); err != nil {
		t.Fatal(err)
	}
	// The back-forward cache is off unless ExtraFlags turn it on.
	if d := defaultDisabled(nil); !slices.Contains(d, "BackForwardCache") {
		t.Fatalf("default disabled features %v", d)
	}
	if d := defaultDisabled([]string{"Foo", "BackForwardCache:TimeToLiveInBackForwardCacheInSeconds/60"}); slices.Contains(d, "BackForwardCache") || len(d) != len(disabledFeatures)-1 {
		t.Fatalf("disabled features with the cache enabled %v", d)
	}
	t.Setenv("CB_CHROMIUM", filepath.Join(t.TempDir(), "missing"))
	if _, err := findChromium("", false); err == nil {
		t.Fatal("missing CB_CHROMIUM binary accepted")
	}
}

// TestFindPrefersTheHeadlessShell: without a path, the headless shell is
// taken before full Chromium, except for headful debugging.
func TestFindPrefersTheHeadlessShell(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"chromium-headless-shell", "chromium"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	saved := Binaries
	Binaries = []string{"chromium-headless-shell", "chrome-headless-shell", "chromium", "google-chrome"}
	defer func() { Binaries = saved }()
	t.Setenv("CB_CHROMIUM", "")
	t.Setenv("PATH", dir)
	for _, tc := range []struct {
		headful bool
		want    string
	}{{false, "chromium-headless-shell"}, {true, "chromium"}} {
		got, err := findChromium("", tc.headful)
		if err != nil || filepath.Base(got) != tc.want {
			t.Errorf("headful=%v: %q %v, want %s", tc.headful, got, err, tc.want)
		}
	}
}

// TestHungChromium stops Chromium (SIGSTOP): the health check must kill and
// replace it.
func TestHungChromium(t *testing.T) {
	testutil.NeedChromium(t)
	ctx := testCtx(t)
	rt, err := New(ctx, Config{Logger: testutil.Logger(t), healthInterval: 200 * time.Millisecond, healthTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	b, err := rt.NewBrowser(ctx, browser.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pid := b.(*cbrowser).p.pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.Done():
	case <-ctx.Done():
		syscall.Kill(pid, syscall.SIGCONT)
		t.Fatal("hung chromium not replaced")
	}
	if !errors.Is(b.Err(), browser.ErrCrashed) {
		t.Fatalf("err %v", b.Err())
	}
	b2, err := rt.NewBrowser(ctx, browser.Options{URL: "data:text/html,<title>ok</title>"})
	if err != nil {
		t.Fatal(err)
	}
	if p := b2.(*cbrowser).p.pid; p == pid {
		t.Fatal("same process after restart")
	}
	assertNoZombieChildren(t)
}

func TestScriptAndBindings(t *testing.T) {
	rt := shared(t)
	ctx := testCtx(t)
	calls := make(chan string, 200)
	b := newBrowser(t, rt, browser.Options{
		URL:      testSrv.URL + "/title?script",
		Script:   `window.injected = 42; window.hook("loaded:" + location.pathname);`,
		Bindings: map[string]func(string){"hook": func(p string) { calls <- p }},
	})
	next := func() string {
		t.Helper()
		select {
		case p := <-calls:
			return p
		case <-ctx.Done():
			t.Fatal("no binding call")
			return ""
		}
	}
	// The script runs before the page's scripts in every new document
	// (also the initial blank one).
	for p := next(); p != "loaded:/title"; p = next() {
	}
	if n := eval[int](t, b, "window.injected"); n != 42 {
		t.Fatalf("injected %d", n)
	}
	eval[any](t, b, `for (let i = 0; i < 100; i++) hook(String(i))`)
	for i := range 100 {
		if p := next(); p != strconv.Itoa(i) {
			t.Fatalf("call %d: %q", i, p)
		}
	}
	if _, err := rt.NewBrowser(ctx, browser.Options{Bindings: map[string]func(string){"not a name": func(string) {}}}); err == nil {
		t.Fatal("bad binding name accepted")
	}
}

// TestOneProcessPerBrowser is the density smoke check: an idle virtual
// browser costs one renderer process. With full Chromium 156 it cost two
// (each context's window runs its omnibox popup WebUI in a renderer of its
// own), which more than doubled the memory per browser unnoticed
// (docs/chromium.md, "Which binary").
func TestOneProcessPerBrowser(t *testing.T) {
	testutil.NeedChromium(t)
	ctx := testCtx(t)
	rt, err := New(ctx, Config{Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	processes := func() int {
		st, err := rt.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.Processes
	}
	const n = 4
	first := newBrowser(t, rt, browser.Options{URL: testSrv.URL + "/title?0"})
	waitLoaded(t, first)
	base := processes() // Chromium, its helpers, the first browser's renderer
	for i := 1; i <= n; i++ {
		waitLoaded(t, newBrowser(t, rt, browser.Options{URL: fmt.Sprintf("%s/title?%d", testSrv.URL, i)}))
	}
	// The new browsers' renderers come up with their pages; wait for them,
	// then count. One process of slack: Chromium may start a utility
	// process late.
	testutil.Eventually(t, 10*time.Second, func() error {
		if got := processes() - base; got < n {
			return fmt.Errorf("%d more processes for %d more browsers so far", got, n)
		}
		return nil
	})
	if got := processes() - base; got > n+1 {
		t.Fatalf("%d more processes for %d more browsers (binary %s): more than one per browser", got, n, rt.path)
	}
}
