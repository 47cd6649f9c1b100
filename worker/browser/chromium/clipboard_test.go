package chromium

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium/pagescript"
)

// copyPage has a field of each kind and buttons at fixed places: one
// copies with navigator.clipboard.writeText, one with execCommand, one
// with a ClipboardItem.
const copyPage = `<!doctype html><title>copy</title><style>
body{margin:0} button{position:absolute;left:0;width:200px;height:40px}
#wt{top:300px} #exec{top:350px} #item{top:400px}
</style>
<input id=field value="hello world"><textarea id=area>cut me</textarea><input id=pw type=password value=secret>
<p id=para>a paragraph</p><p id=custom>shown text</p><p id=cancel>never copied</p>
<button id=wt onclick="navigator.clipboard.writeText('from writeText').then(() => document.title = 'written')">wt</button>
<button id=exec onclick="const t = document.createElement('textarea'); t.value = 'from execCommand'; document.body.append(t); t.select(); document.execCommand('copy'); t.remove()">exec</button>
<button id=item onclick="navigator.clipboard.write([new ClipboardItem({'text/plain': new Blob(['from ClipboardItem'], {type: 'text/plain'})})])">item</button>
<script>
custom.addEventListener('copy', e => { e.clipboardData.setData('text/plain', 'the page\'s own text'); e.preventDefault(); });
cancel.addEventListener('copy', e => e.preventDefault());
</script>`

// secureSite serves html on loopback, a secure context: the pages of
// data: URLs and of plain http on other hosts have no navigator.clipboard.
func secureSite(t *testing.T, html string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, html) }))
	t.Cleanup(srv.Close)
	return srv.URL
}

// copyLog records the copies a browser reports.
type copyLog struct {
	mu    sync.Mutex
	texts []string
}

func (l *copyLog) add(s string) { l.mu.Lock(); l.texts = append(l.texts, s); l.mu.Unlock() }
func (l *copyLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.texts)
}

// TestCopiesLeaveThePage: what the page copies reaches OnCopy, whichever
// way it copies; a password, a cancelled copy and an empty selection send
// nothing, and the page cannot call the report itself.
func TestCopiesLeaveThePage(t *testing.T) {
	rt := shared(t)
	b := newBrowser(t, rt, browser.Options{URL: secureSite(t, copyPage), Width: 800, Height: 600})
	waitLoaded(t, b)
	var log copyLog
	defer b.OnCopy(log.add)()
	ctx := testCtx(t)
	eval := func(js string) {
		t.Helper()
		if err := b.Evaluate(ctx, js, nil); err != nil {
			t.Fatalf("%s: %v", js, err)
		}
	}
	key := func(k string) {
		t.Helper()
		for _, typ := range []browser.InputType{browser.InputKeyDown, browser.InputKeyUp} {
			if err := b.Input(ctx, browser.InputEvent{Type: typ, Key: k, Modifiers: browser.ModCtrl}); err != nil {
				t.Fatal(err)
			}
		}
	}
	click := func(y float64) {
		t.Helper()
		for _, typ := range []browser.InputType{browser.InputMouseDown, browser.InputMouseUp} {
			if err := b.Input(ctx, browser.InputEvent{Type: typ, X: 100, Y: y, Button: browser.ButtonLeft}); err != nil {
				t.Fatal(err)
			}
		}
	}
	selectNode := func(id string) {
		eval(fmt.Sprintf(`getSelection().selectAllChildren(document.getElementById(%q))`, id))
	}

	var leaked string
	if err := b.Evaluate(ctx, `typeof window.`+pagescript.CopyBinding, &leaked); err != nil || leaked != "undefined" {
		t.Fatalf("the page sees the copy report: %q %v", leaked, err)
	}
	steps := []struct {
		name string
		do   func()
		want string // "" = nothing copied
	}{
		{"password field", func() { eval(`pw.focus(); pw.select()`); key("c") }, ""},
		{"field, Ctrl+C", func() { eval(`field.focus(); field.setSelectionRange(0, 5)`); key("c") }, "hello"},
		{"cancelled by the page", func() { eval(`document.activeElement.blur()`); selectNode("cancel"); key("c") }, ""},
		{"text area, Ctrl+X", func() { eval(`area.focus(); area.select()`); key("x") }, "cut me"},
		{"paragraph", func() { eval(`document.activeElement.blur()`); selectNode("para"); key("c") }, "a paragraph"},
		{"the page's clipboardData", func() { selectNode("custom"); key("c") }, "the page's own text"},
		{"nothing selected", func() { eval(`getSelection().removeAllRanges()`); key("c") }, ""},
		{"writeText", func() { click(320) }, "from writeText"},
		{"execCommand", func() { click(370) }, "from execCommand"},
		{"ClipboardItem", func() { click(420) }, "from ClipboardItem"},
	}
	var want []string
	for _, s := range steps {
		s.do()
		if s.want != "" {
			want = append(want, s.want)
			// Each copy arrives before the next step, so the order
			// says which step sent what (and the empty ones nothing).
			testutil.Eventually(t, 10*time.Second, testutil.Cond(s.name+" copied", func() bool { return len(log.all()) == len(want) }))
		}
	}
	if got := log.all(); !slices.Equal(got, want) {
		t.Fatalf("copies\n%q\nwant\n%q", got, want)
	}
	var area, title string
	if err := b.Evaluate(ctx, `area.value`, &area); err != nil || area != "" {
		t.Fatalf("cut left %q (%v)", area, err)
	}
	if err := b.Evaluate(ctx, `document.title`, &title); err != nil || title != "written" {
		t.Fatalf("writeText's promise: title %q (%v), want it resolved", title, err)
	}
}

// TestCopyOverPlainHTTP: a page that is no secure context (data:, plain
// http) gets a navigator.clipboard that writes, and its copies leave.
func TestCopyOverPlainHTTP(t *testing.T) {
	rt := shared(t)
	b := newBrowser(t, rt, browser.Options{URL: "data:text/html,<title>plain</title><p>x", Width: 400, Height: 300})
	waitLoaded(t, b)
	var log copyLog
	defer b.OnCopy(log.add)()
	var got string
	if err := b.Evaluate(testCtx(t), `navigator.clipboard.writeText("plain copy").then(() => navigator.clipboard.readText()).catch(e => e.name)`, &got); err != nil || got != "NotAllowedError" {
		t.Fatalf("write then read: %q %v, want the write to pass and the read refused", got, err)
	}
	testutil.Eventually(t, 10*time.Second, testutil.Cond("the copy", func() bool { return slices.Equal(log.all(), []string{"plain copy"}) }))
}

// TestCopyIsBounded: a copy longer than MaxCopyText arrives cut to it.
func TestCopyIsBounded(t *testing.T) {
	rt := shared(t)
	b := newBrowser(t, rt, browser.Options{URL: secureSite(t, "<title>big</title><p>x"), Width: 400, Height: 300})
	waitLoaded(t, b)
	var log copyLog
	defer b.OnCopy(log.add)()
	js := fmt.Sprintf(`navigator.clipboard.writeText("ü".repeat(%d)); true`, browser.MaxCopyText)
	if err := b.Evaluate(testCtx(t), js, nil); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, testutil.Cond("the long copy", func() bool { return len(log.all()) == 1 }))
	got := log.all()[0]
	if len(got) > browser.MaxCopyText || !strings.HasPrefix(got, "üü") || strings.Trim(got, "ü") != "" {
		t.Fatalf("copy of %d bytes (want at most %d whole characters)", len(got), browser.MaxCopyText)
	}
}
