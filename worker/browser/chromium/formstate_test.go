package chromium

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// formPage has one of each kind of field, a scrolled list, a tall body (the
// window scrolls) and a field the page only adds a moment after its load.
// window.events counts the input and change events each field got.
const formPage = `<!doctype html><title>form state</title>
<body style="margin:0;height:3000px">
<textarea id="notes" rows="3" cols="30" wrap="off" style="position:absolute;left:10px;top:10px"></textarea>
<input name="title" style="position:absolute;left:10px;top:90px">
<input type="email" id="mail" style="position:absolute;left:10px;top:120px">
<input type="password" id="pw" style="position:absolute;left:10px;top:150px">
<input type="file" id="upload" style="position:absolute;left:10px;top:180px">
<input type="hidden" id="token" value="t0">
<select id="color"><option>red</option><option>green</option><option>blue</option></select>
<select id="tags" multiple><option>a</option><option>b</option><option>c</option></select>
<input type="checkbox" name="opt" value="x"><input type="checkbox" name="opt" value="y" checked>
<input type="radio" name="size" value="s" checked><input type="radio" name="size" value="l">
<div><div contenteditable="true" style="width:200px">edit <b>me</b> here</div></div>
<div id="list" style="position:absolute;left:400px;top:10px;width:200px;height:100px;overflow:auto">
<div style="height:2000px;width:1000px">long</div></div>
<div id="late-box"></div>
<script>
window.events = {};
for (const t of ["input", "change"]) {
  document.addEventListener(t, (e) => {
    const k = (e.target.id || e.target.name || e.target.localName) + ":" + t;
    window.events[k] = (window.events[k] || 0) + 1;
  });
}
setTimeout(() => { document.getElementById("late-box").innerHTML = '<input id="late">'; }, 300);
</script>`

func formServer(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, formPage)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/form"
}

// formBrowser is a new browser (its own context) with the form page loaded.
func formBrowser(t *testing.T, url string) browser.Browser {
	t.Helper()
	b := newBrowser(t, shared(t), browser.Options{URL: url, Width: 800, Height: 600})
	waitLoaded(t, b)
	testutil.Eventually(t, 30*time.Second, testutil.Cond("the late field", func() bool {
		return eval[bool](t, b, `document.getElementById("late") !== null`)
	}))
	return b
}

func capture(t *testing.T, b browser.Browser) *wire.FormState {
	t.Helper()
	st, err := browser.CaptureForm(testCtx(t), b, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func restoreForm(t *testing.T, b browser.Browser, st *wire.FormState) browser.FormRestored {
	t.Helper()
	r, err := browser.RestoreForm(testCtx(t), b, st)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestFormStateRoundTrip: what a user left in each kind of field, the
// focus with its caret or selection, and the scroll of the window and of a
// scrolled element are read from one browser and put back into the same
// page loaded in a new browser context, where reading them again gives
// the same state; the page's code got input/change events for them.
// Passwords, files and hidden inputs are never read.
func TestFormStateRoundTrip(t *testing.T) {
	url := formServer(t)
	// The user's edits, made as the page sees a user's: values, then the
	// focus and selection last (a click elsewhere would move them).
	const edits = `
		document.getElementById("notes").value = "line one\nline two\nline three\nline four\nline five\nline six";
		document.getElementsByName("title")[0].value = "My title";
		document.getElementById("mail").value = "a@b.example";
		document.getElementById("pw").value = "hunter2-secret";
		document.getElementById("token").value = "t1";
		document.getElementById("color").value = "blue";
		document.getElementById("tags").options[0].selected = true;
		document.getElementById("tags").options[2].selected = true;
		document.querySelector("input[value=x]").checked = true;
		document.querySelector("input[value=y]").checked = false;
		document.querySelector("input[value=l]").checked = true;
		document.querySelector("[contenteditable]").innerHTML = "new <i>text</i> typed";
		document.getElementById("late").value = "made later";
		document.getElementById("list").scrollTo(30, 500);
		window.scrollTo(0, 700);
		true`
	for _, tc := range []struct {
		name  string
		focus string // JS that focuses and selects
		// want: the focused element's key and selection
		key string
		sel *wire.FormSelection
	}{
		{"caret in a textarea", `const e = document.getElementById("notes"); e.focus({preventScroll: true}); e.setSelectionRange(40, 40); e.scrollTop = 20;`,
			"#notes", &wire.FormSelection{Start: 40, End: 40}},
		{"backward selection in a named input", `const e = document.getElementsByName("title")[0]; e.focus({preventScroll: true}); e.setSelectionRange(1, 5, "backward");`,
			"n:title", &wire.FormSelection{Start: 1, End: 5, Backward: true}},
		{"focus without a selection API", `document.getElementById("mail").focus({preventScroll: true});`,
			"#mail", nil},
		{"caret in an editable element", `const e = document.querySelector("[contenteditable]"); e.focus({preventScroll: true});
			const t = e.querySelector("i").firstChild; getSelection().setBaseAndExtent(t, 2, t, 2);`,
			"p:div[0]/div[0]", &wire.FormSelection{Start: 6, End: 6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := formBrowser(t, url)
			if !eval[bool](t, a, edits) {
				t.Fatal("edits failed")
			}
			if !eval[bool](t, a, "(() => {"+tc.focus+" return true; })()") {
				t.Fatal("focus failed")
			}
			st := capture(t, a)
			if st == nil {
				t.Fatal("nothing captured")
			}
			raw, _ := json.Marshal(st)
			for _, never := range []string{"hunter2-secret", `"#pw"`, `"#upload"`, `"#token"`} {
				if strings.Contains(string(raw), never) {
					t.Fatalf("captured %s: %s", never, raw)
				}
			}
			if st.Focus != tc.key || !reflect.DeepEqual(st.Selection, tc.sel) {
				t.Fatalf("focus %q selection %+v, want %q %+v", st.Focus, st.Selection, tc.key, tc.sel)
			}
			if st.ScrollY != 700 {
				t.Fatalf("window scroll %v, want 700", st.ScrollY)
			}

			b := formBrowser(t, url)
			if r := restoreForm(t, b, st); r.Applied == 0 || r.Pending != 0 {
				t.Fatalf("restore: %+v", r)
			}
			if got := capture(t, b); !reflect.DeepEqual(got, st) {
				g, _ := json.Marshal(got)
				t.Fatalf("restored state differs:\n got %s\nwant %s", g, raw)
			}
			// Restored values reach the page's code as events, once.
			events := eval[map[string]int](t, b, "window.events")
			for _, k := range []string{"notes:input", "notes:change", "title:change", "color:change", "tags:change", "size:change", "late:input", "div:input"} {
				if events[k] != 1 {
					t.Errorf("event %s fired %d times, want 1 (all: %v)", k, events[k], events)
				}
			}
			if events["opt:change"] != 2 { // both checkboxes changed
				t.Errorf("checkbox change events: %d, want 2", events["opt:change"])
			}
			if got := eval[string](t, b, `document.getElementById("pw").value + "|" + document.getElementById("token").value`); got != "|t0" {
				t.Errorf("password and hidden fields after restore: %q, want untouched", got)
			}

			// Restoring again is a no-op: nothing applied, no new event.
			if r := restoreForm(t, b, st); r.Applied != 0 || r.Pending != 0 {
				t.Fatalf("second restore: %+v", r)
			}
			if again := eval[map[string]int](t, b, "window.events"); !reflect.DeepEqual(again, events) {
				t.Fatalf("a second restore fired events: %v, was %v", again, events)
			}
		})
	}
}

// TestFormStateKeepsTheUsersEdits: what the user typed after the restore
// is theirs: restoring again (or late) does not overwrite it, nor move
// their focus.
func TestFormStateKeepsTheUsersEdits(t *testing.T) {
	url := formServer(t)
	a := formBrowser(t, url)
	eval[bool](t, a, `(() => { const e = document.getElementById("notes"); e.value = "from the snapshot"; e.focus(); e.setSelectionRange(4, 4); return true; })()`)
	st := capture(t, a)

	b := formBrowser(t, url)
	restoreForm(t, b, st)
	if got := eval[string](t, b, `document.activeElement.id + ":" + document.getElementById("notes").selectionStart`); got != "notes:4" {
		t.Fatalf("focus after restore: %s", got)
	}
	// The user types at the restored caret (trusted key events), then
	// moves to another field with a click.
	typeText(t, b, "XY")
	testutil.Eventually(t, 30*time.Second, testutil.Cond("typed", func() bool {
		return eval[string](t, b, `document.getElementById("notes").value`) == "fromXY the snapshot"
	}))
	click(t, b, 20, 100) // the title input
	testutil.Eventually(t, 30*time.Second, testutil.Cond("focus moved", func() bool {
		return eval[string](t, b, `document.activeElement.name`) == "title"
	}))
	if r := restoreForm(t, b, st); r.Applied != 0 {
		t.Fatalf("a restore after the user's edits changed %d things", r.Applied)
	}
	if got := eval[string](t, b, `document.getElementById("notes").value + "|" + document.activeElement.name`); got != "fromXY the snapshot|title" {
		t.Fatalf("after a second restore: %q", got)
	}
}

// TestFormStateLateElements: a field the page makes only after its load
// gets its value when it appears.
func TestFormStateLateElements(t *testing.T) {
	url := formServer(t)
	a := formBrowser(t, url)
	eval[bool](t, a, `(() => { document.getElementById("late").value = "arrives later"; return true; })()`)
	st := capture(t, a)

	b := newBrowser(t, shared(t), browser.Options{URL: url, Width: 800, Height: 600})
	// At once after the commit: the restore waits for the load, and the
	// late field comes 300 ms after it.
	r := restoreForm(t, b, st)
	if r.Pending == 0 {
		t.Logf("the late field was there already: %+v", r)
	}
	testutil.Eventually(t, 30*time.Second, testutil.Cond("the late field restored", func() bool {
		return eval[string](t, b, `(document.getElementById("late") || {}).value || ""`) == "arrives later"
	}))
}

// TestFormStateBounded: fields beyond the limit are left out and counted;
// a page with nothing to put back gives nil.
func TestFormStateBounded(t *testing.T) {
	url := formServer(t)
	b := formBrowser(t, url)
	// An editable element has no default to compare with: it is always
	// kept. Without it, the untouched page has nothing to put back.
	eval[bool](t, b, `(() => { document.querySelector("[contenteditable]").remove(); return true; })()`)
	if st := capture(t, b); st != nil {
		t.Fatalf("an untouched page: %+v", st)
	}
	eval[bool](t, b, `(() => { document.getElementById("notes").value = "x".repeat(5000); document.getElementsByName("title")[0].value = "short"; return true; })()`)
	st, err := browser.CaptureForm(testCtx(t), b, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if st == nil || st.Skipped != 1 || len(st.Fields) != 1 || st.Fields[0].Key != "n:title" {
		t.Fatalf("bounded capture: %+v", st)
	}
}
