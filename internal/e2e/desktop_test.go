package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium"
)

// desktopUser starts one proxy and one Chromium worker with the test apps
// and opens alice's client engine on the desktop test app, its page ready
// and sized to her screen.
func desktopUser(t *testing.T) (*cluster, *chromium.Runtime, browser.Browser) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	needChromium(t)
	apps, _ := filepath.Abs("testdata/apps")
	c := startCluster(t, clusterOpts{proxies: 1, workers: 1, runtime: "chromium", extra: []string{"--apps", apps}})
	users := userBrowsers(t)
	alice := open(t, users, "http://"+c.public+"/desktop")
	eventually(t, alice, "alice's engine", "document.body.dataset.status", "live")
	eventually(t, alice, "the test page", "document.title", "ready · CloudBrowser")
	sizedToScreen(t, alice)
	return c, users, alice
}

// phoneUser starts the same cluster and opens a phone's client engine
// (390x844 CSS pixels at DPR 2, a touch screen) on the desktop test app.
func phoneUser(t *testing.T) browser.Browser {
	t.Helper()
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	needChromium(t)
	apps, _ := filepath.Abs("testdata/apps")
	c := startCluster(t, clusterOpts{proxies: 1, workers: 1, runtime: "chromium", extra: []string{"--apps", apps}})
	phone := open(t, userBrowsers(t), "about:blank")
	input(t, phone, browser.InputEvent{Type: browser.InputResize, Width: 390, Height: 844, Scale: 2, Mobile: true})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := phone.Navigate(ctx, "http://"+c.public+"/desktop"); err != nil {
		t.Fatal(err)
	}
	eventually(t, phone, "the phone's engine", "document.body.dataset.status", "live")
	eventually(t, phone, "the test page", "document.title", "ready · CloudBrowser")
	sizedToScreen(t, phone)
	return phone
}

// readOnlyViewer shares the browser at url with everyone as readers and
// opens bob's client engine on it.
func readOnlyViewer(t *testing.T, c *cluster, users *chromium.Runtime, url string) browser.Browser {
	t.Helper()
	if out, err := c.cli(t, "share", strings.TrimPrefix(url, "http://"+c.public), "*", "reader"); err != nil {
		t.Fatalf("share: %v %s", err, out)
	}
	bob := open(t, users, url)
	eventually(t, bob, "bob read-only", "document.body.dataset.status", "live (read-only)")
	return bob
}

// clickElement clicks the middle of the element with id in the user's
// page, with the mouse, as the user would.
func clickElement(t *testing.T, b browser.Browser, id string) {
	t.Helper()
	var r struct{ X, Y float64 }
	expr := `(() => { const r = document.getElementById(` + jsString(id) + `).getBoundingClientRect(); return {X: r.left + r.width / 2, Y: r.top + r.height / 2}; })()`
	if err := b.Evaluate(context.Background(), expr, &r); err != nil {
		t.Fatalf("where is #%s: %v", id, err)
	}
	click(t, b, r.X, r.Y)
}

// sizedToScreen waits until b's engine shows a frame of its own screen's
// width: the owner's viewport took, so screen positions are page
// positions (a pooled browser starts at another size).
func sizedToScreen(t *testing.T, b browser.Browser) {
	t.Helper()
	eventually(t, b, "a frame of the screen's size", `document.body.dataset.pageWidth == document.getElementById("screen").clientWidth`, "true")
}

func jsString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// TestDialogsThroughEngine: a page's confirm, prompt and alert show in
// every viewer's client engine over the screen, with the page's text; the
// first answer of a viewer who may use the browser reaches the page (OK
// and Cancel), and the other viewers' dialogs close; a read-only viewer
// sees the dialog but cannot answer it; a viewer who joins while a dialog
// is open sees it too.
func TestDialogsThroughEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	c, users, alice := desktopUser(t)
	base := "http://" + c.public
	browserPath := strings.TrimPrefix(alice.Page().URL, base)
	// Alice in a second tab (her cookies: both may answer) and bob,
	// read-only.
	alice2 := open(t, users, "about:blank")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cookies, err := alice.Cookies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := alice2.SetCookies(ctx, cookies); err != nil {
		t.Fatal(err)
	}
	if err := alice2.Navigate(ctx, base+browserPath); err != nil {
		t.Fatal(err)
	}
	eventually(t, alice2, "alice's second tab", "document.body.dataset.status", "live")
	bob := readOnlyViewer(t, c, users, base+browserPath)

	x0, y0 := canvasOrigin(t, alice)
	dialogShown := func(b browser.Browser, who, kind string) {
		t.Helper()
		eventually(t, b, who+" sees the "+kind, "document.body.dataset.dialog", kind)
		eventually(t, b, who+" sees its text", `!document.getElementById("dialog").hidden`, "true")
	}
	dialogGone := func(b browser.Browser, who string) {
		t.Helper()
		eventually(t, b, who+"'s dialog closed", `document.getElementById("dialog").hidden`, "true")
	}

	// confirm, answered OK by alice's first tab.
	click(t, alice, x0+120, y0+40)
	for _, v := range []struct {
		b   browser.Browser
		who string
	}{{alice, "alice"}, {alice2, "alice's second tab"}, {bob, "bob"}} {
		dialogShown(v.b, v.who, "confirm")
		eventually(t, v.b, v.who+" reads the page's text", `document.getElementById("dialog-text").textContent`, "Delete the draft?\nIt cannot be undone.")
	}
	eventually(t, bob, "bob may not answer", `document.getElementById("dialog-ok").disabled && document.getElementById("dialog-cancel").disabled`, "true")
	eventually(t, alice, "alice may", `document.getElementById("dialog-ok").disabled`, "false")
	clickElement(t, alice, "dialog-ok")
	eventually(t, alice2, "the page got OK", "document.title", "1 confirm true · CloudBrowser")
	dialogGone(alice2, "alice's second tab")
	dialogGone(bob, "bob")

	// confirm again, cancelled from the second tab.
	click(t, alice, x0+120, y0+40)
	dialogShown(alice2, "alice's second tab", "confirm")
	clickElement(t, alice2, "dialog-cancel")
	eventually(t, alice, "the page got Cancel", "document.title", "2 confirm false · CloudBrowser")
	dialogGone(alice, "alice")

	// prompt: its default shows; alice types her answer.
	click(t, alice, x0+120, y0+100)
	dialogShown(alice, "alice", "prompt")
	eventually(t, alice, "the default answer", `document.getElementById("dialog-input").value`, "guest")
	// A viewer who joins now sees the open dialog.
	carol := open(t, users, base+browserPath)
	dialogShown(carol, "a late viewer", "prompt")
	if err := alice.Evaluate(context.Background(), `(() => { const i = document.getElementById("dialog-input"); i.focus(); i.select(); })()`, nil); err != nil {
		t.Fatal(err)
	}
	input(t, alice, browser.InputEvent{Type: browser.InputInsertText, Text: "日本語"})
	input(t, alice, browser.InputEvent{Type: browser.InputKeyDown, Key: "Enter", Code: "Enter", KeyCode: 13}, browser.InputEvent{Type: browser.InputKeyUp, Key: "Enter", Code: "Enter", KeyCode: 13})
	eventually(t, bob, "the page got the typed answer", "document.title", "3 prompt 日本語 · CloudBrowser")
	dialogGone(carol, "the late viewer")

	// alert: one button; the page goes on once it is acknowledged.
	click(t, alice, x0+120, y0+160)
	dialogShown(alice, "alice", "alert")
	eventually(t, alice, "an alert has no Cancel", `document.getElementById("dialog-cancel").hidden`, "true")
	clickElement(t, alice, "dialog-ok")
	eventually(t, alice, "the page went on", "document.title", "4 alert done · CloudBrowser")
}

// TestTextAndClipboardThroughEngine: an IME's composition typed in the
// user's engine reaches the page as the composed text, not the raw keys;
// a phone keyboard's text (input events, no key) does too; what the page
// copies reaches the engine of the user who acted and no other viewer's.
func TestTextAndClipboardThroughEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	c, users, alice := desktopUser(t)
	base := "http://" + c.public
	browserPath := strings.TrimPrefix(alice.Page().URL, base)
	if out, err := c.cli(t, "share", browserPath, "*", "reader-writer"); err != nil {
		t.Fatalf("share: %v %s", err, out)
	}
	bob := open(t, users, base+browserPath)
	eventually(t, bob, "bob, who may drive", "document.body.dataset.status", "live")
	x0, y0 := canvasOrigin(t, alice)

	// Japanese through an IME: the candidate shows as a composition, the
	// commit inserts 日本語, and the page counts one composition.
	click(t, alice, x0+120, y0+235) // the text field
	input(t, alice, browser.InputEvent{Type: browser.InputCompose, Text: "にほんご"})
	eventually(t, alice, "the composition shows in the page", "document.title", "text にほんご /0 · CloudBrowser")
	input(t, alice, browser.InputEvent{Type: browser.InputInsertText, Text: "日本語"})
	eventually(t, bob, "the committed text", "document.title", "text 日本語 /1 · CloudBrowser")
	// A phone keyboard: text in input events, with no key events.
	input(t, alice, browser.InputEvent{Type: browser.InputInsertText, Text: "です"})
	eventually(t, bob, "a phone keyboard's text", "document.title", "text 日本語です /1 · CloudBrowser")

	// Alice selects the field and copies: her engine gets the text.
	ctrl := func(b browser.Browser, k string) {
		input(t, b, browser.InputEvent{Type: browser.InputKeyDown, Key: k, Code: "Key" + strings.ToUpper(k), Modifiers: browser.ModCtrl},
			browser.InputEvent{Type: browser.InputKeyUp, Key: k, Code: "Key" + strings.ToUpper(k), Modifiers: browser.ModCtrl})
	}
	ctrl(alice, "a")
	ctrl(alice, "c")
	eventually(t, alice, "alice's copy reached her engine", "window.cloudbrowserEngine.copied()", "日本語です")
	eventually(t, alice, "shown to alice", `["clipboard", "offered"].includes(document.body.dataset.copied)`, "true")
	// Bob did not copy: a ping's answer comes after anything the worker
	// had sent him by then, and nothing was.
	pingEngine(t, bob)
	eventually(t, bob, "bob got no copy", "document.body.dataset.copies || 0", "0")

	// Bob clicks the page's copy button: his engine gets it, not alice's.
	click(t, bob, x0+120, y0+300)
	eventually(t, bob, "bob's copy", "window.cloudbrowserEngine.copied()", "from the button")
	pingEngine(t, alice)
	eventually(t, alice, "alice got only her own copy", "document.body.dataset.copies", "1")
}

// pingEngine waits for a round trip of b's engine socket.
func pingEngine(t *testing.T, b browser.Browser) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := b.Evaluate(ctx, `window.cloudbrowserEngine.ping("x").then(() => true)`, nil); err != nil {
		t.Fatalf("engine ping: %v", err)
	}
}

// evalString evaluates expr (a promise is awaited) in b to a string.
func evalString(t *testing.T, b browser.Browser, expr string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var s string
	if err := b.Evaluate(ctx, expr, &s); err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return s
}

// TestFilesThroughEngine: the page's file picker opens the user's own
// picker, and the chosen file's name and bytes reach the page; a file
// dropped on the screen reaches the element under it; a download of the
// page shows in the engine and its bytes come back from the Browser URL's
// path; a read-only viewer gets none of it, and the limit holds.
func TestFilesThroughEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	c, users, alice := desktopUser(t)
	base := "http://" + c.public
	browserPath := strings.TrimPrefix(alice.Page().URL, base)
	x0, y0 := canvasOrigin(t, alice)
	disk := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(disk, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	hello := write("hello.txt", "hello from alice's disk")

	// Alice's own picker, as she would answer it.
	picked := make(chan error, 1)
	defer alice.OnFileChooser(func(fc browser.FileChooser) {
		go func() { picked <- alice.ChooseFiles(context.Background(), fc.ID, []string{hello}) }()
	})()
	click(t, alice, x0+100, y0+355) // the page's file input
	eventually(t, alice, "the engine shows the page's picker", `document.getElementById("picker").hidden`, "false")
	eventually(t, alice, "as a multiple picker", `document.getElementById("picker-input").multiple + " " + document.getElementById("picker-input").accept`, "true .txt,text/plain")
	clickElement(t, alice, "picker-choose")
	if err := <-picked; err != nil {
		t.Fatalf("alice's picker: %v", err)
	}
	eventually(t, alice, "the page read the file", "document.title", "chose hello.txt=hello from alice's disk · CloudBrowser")
	eventually(t, alice, "the picker closed", `document.getElementById("picker").hidden`, "true")

	// A file dropped on the page's drop zone.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := alice.DropFiles(ctx, x0+120, y0+570, []string{write("dropped.txt", "dropped bytes ✓")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, alice, "the page got the dropped file", "document.title", "dropped dropped.txt=dropped bytes ✓ · CloudBrowser")

	// The page downloads a blob: the engine offers it, and its bytes come
	// back through the Browser URL.
	click(t, alice, x0+120, y0+420)
	eventually(t, alice, "the download finished", `(window.cloudbrowserEngine.downloads()[0] || {}).state`, "completed")
	eventually(t, alice, "its name", `window.cloudbrowserEngine.downloads()[0].name`, "notes.txt")
	href := evalString(t, alice, `window.cloudbrowserEngine.downloads()[0].href`)
	if !strings.HasPrefix(href, browserPath+"/files/down/") {
		t.Fatalf("download at %q, want under %s/files/down/", href, browserPath)
	}
	got := evalString(t, alice, `fetch(`+jsString(href)+`).then(r => r.text().then(t => r.status + "|" + r.headers.get("content-disposition") + "|" + t))`)
	if want := "200|attachment; filename=notes.txt|notes of the page\nsecond line ✓\n"; got != want {
		t.Fatalf("download: %q, want %q", got, want)
	}

	// Over the browser's 1 MiB: refused with a message, nothing reaches
	// the page.
	post := `(url, n) => { const fd = new FormData(); fd.append("file", new Blob([new Uint8Array(n)]), "big.bin");
		return fetch(url, {method: "POST", body: fd}).then(r => r.text().then(t => r.status + "|" + t)); }`
	got = evalString(t, alice, `(`+post+`)(`+jsString(browserPath+"/files/drop?x=120&y=570")+`, 2 << 20)`)
	if !strings.HasPrefix(got, "413|Too large") {
		t.Fatalf("a 2 MiB upload to a 1 MiB browser: %q", got)
	}

	// Bob may only watch: neither the download nor an upload.
	bob := readOnlyViewer(t, c, users, base+browserPath)
	if got := evalString(t, bob, `fetch(`+jsString(href)+`).then(r => String(r.status))`); got != "403" {
		t.Fatalf("read-only download: %s, want 403", got)
	}
	if got := evalString(t, bob, `(`+post+`)(`+jsString(browserPath+"/files/up/1")+`, 10)`); !strings.HasPrefix(got, "403|You may only watch") {
		t.Fatalf("read-only upload: %q", got)
	}
	eventually(t, alice, "the page saw nothing more", "document.title", "dropped dropped.txt=dropped bytes ✓ · CloudBrowser")
}

// tap touches the user's page at x, y with one finger, as a phone would.
func tap(t *testing.T, b browser.Browser, x, y float64) {
	t.Helper()
	input(t, b,
		browser.InputEvent{Type: browser.InputTouch, Phase: browser.TouchStart, Touches: []browser.TouchPoint{{X: x, Y: y}}},
		browser.InputEvent{Type: browser.InputTouch, Phase: browser.TouchEnd})
}

// TestPhoneThroughEngine: a user on a phone gets the page's mobile layout
// (a coarse pointer, the phone's width and pixel ratio), a tap on the
// screen clicks the page's button through its touch events, a pinch zooms
// the page, and the frames carry the phone's device pixels.
func TestPhoneThroughEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	phone := phoneUser(t)
	x0, y0 := canvasOrigin(t, phone)
	width := evalString(t, phone, `String(document.getElementById("screen").clientWidth)`)

	tap(t, phone, x0+120, y0+480) // the probe button
	eventually(t, phone, "the page's mobile layout", "document.title", "probe coarse=true w="+width+" dpr=2 touches=1 · CloudBrowser")
	// The frames are drawn at the phone's pixels: twice the CSS size.
	eventually(t, phone, "device-pixel frames", "Number(document.body.dataset.frameWidth) / Number(document.body.dataset.pageWidth)", "2")

	// Two fingers moving apart zoom the page.
	pinch := func(d float64) browser.InputEvent {
		return browser.InputEvent{Type: browser.InputTouch, Phase: browser.TouchMove, Touches: []browser.TouchPoint{{X: x0 + 150 - d, Y: y0 + 600, ID: 0}, {X: x0 + 200 + d, Y: y0 + 600, ID: 1}}}
	}
	start := pinch(0)
	start.Phase = browser.TouchStart
	input(t, phone, start)
	for d := 10.0; d <= 120; d += 10 {
		input(t, phone, pinch(d))
	}
	input(t, phone, browser.InputEvent{Type: browser.InputTouch, Phase: browser.TouchEnd})
	eventually(t, phone, "the page zoomed", "document.title", "zoomed · CloudBrowser")
}

// TestPhoneKeyboardOnlyForText: on a phone the engine's keyboard (its
// text area's focus) comes only while the page's focus is in a text
// field: a tap on a button leaves it closed, a tap on the field opens it,
// a tap elsewhere closes it again.
func TestPhoneKeyboardOnlyForText(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	phone := phoneUser(t)
	x0, y0 := canvasOrigin(t, phone)
	keyboard := `String(document.activeElement && document.activeElement.id === "keys")`

	tap(t, phone, x0+120, y0+480) // the probe button
	eventually(t, phone, "the tap reached the page", "document.title.startsWith('probe')", "true")
	eventually(t, phone, "no keyboard for a button", keyboard, "false")
	tap(t, phone, x0+100, y0+235) // the text field
	eventually(t, phone, "the page's focus is in a text field", "document.body.dataset.editable", "true")
	eventually(t, phone, "the keyboard opens", keyboard, "true")
	input(t, phone, browser.InputEvent{Type: browser.InputInsertText, Text: "hi"})
	eventually(t, phone, "typed into the field", "document.title", "text hi /0 · CloudBrowser")
	tap(t, phone, x0+120, y0+480)
	eventually(t, phone, "the focus left the field", "document.body.dataset.editable", "false")
	eventually(t, phone, "the keyboard closes", keyboard, "false")
}

// permissionSite serves, on loopback (a secure context, as the https
// sites that ask for these are), a page whose buttons ask for the user's
// location (top left) and for a camera (below it); what the page gets
// becomes its title.
const permissionSite = `<!doctype html><title>site</title>
<style>body{margin:0} button{position:absolute;left:20px;width:200px;height:40px}</style>
<button id=where style="top:20px">where am I</button><button id=camera style="top:80px">camera</button>
<script>
let n = 0;
function said(what) { n++; document.title = n + " " + what; }
where.onclick = () => navigator.geolocation.getCurrentPosition(p => said("at " + p.coords.latitude.toFixed(2) + "," + p.coords.longitude.toFixed(2)), e => said("geo error " + e.code));
camera.onclick = () => {
	const state = () => navigator.permissions.query({name: "camera"}).then(s => said("camera " + s.state));
	navigator.mediaDevices.getUserMedia({video: true}).then(state, state);
};
</script>`

// TestPermissionsThroughEngine: a site asking for the user's location
// shows a permission dialog in every viewer's engine; the owner allows it
// and the page gets the position the user's own browser gives; a camera
// request blocked is denied in the page; a read-only viewer sees the
// question but cannot answer.
func TestPermissionsThroughEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	needChromium(t)
	site := loopbackSite(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, permissionSite) }))
	c := startCluster(t, clusterOpts{proxies: 1, workers: 1, runtime: "chromium"})
	dir := filepath.Join(c.dir, "site")
	writeBundle(t, dir, `{"name":"Site","mountPoint":"site","entry":"index.html","strategy":"singleInstancePerUser","egress":{"allow":["127.0.0.1"]}}`,
		`<!doctype html><title>ready</title><script>location.href = '`+site.URL+`/'</script>`)
	if out, err := c.cli(t, "deploy", dir); err != nil {
		t.Fatalf("deploy: %v %s", err, out)
	}
	base := "http://" + c.public
	users := userBrowsers(t)
	alice := open(t, users, base+"/site")
	eventually(t, alice, "alice's engine", "document.body.dataset.status", "live")
	eventually(t, alice, "the site", "document.title", "site · CloudBrowser")
	sizedToScreen(t, alice)
	browserPath := strings.TrimPrefix(alice.Page().URL, base)
	bob := readOnlyViewer(t, c, users, base+browserPath)
	x0, y0 := canvasOrigin(t, alice)

	// Alice's own browser knows where she is (a test has no GPS: its
	// answer is given here).
	if err := alice.Evaluate(context.Background(), `navigator.geolocation.getCurrentPosition = (ok) => ok({coords: {latitude: 48.8566, longitude: 2.3522, accuracy: 25}})`, nil); err != nil {
		t.Fatal(err)
	}
	click(t, alice, x0+120, y0+40) // where am I
	for _, v := range []struct {
		b   browser.Browser
		who string
	}{{alice, "alice"}, {bob, "bob"}} {
		eventually(t, v.b, v.who+" is asked", "document.body.dataset.dialog", "permission")
		eventually(t, v.b, v.who+" reads what for", `document.getElementById("dialog-text").textContent`, "know your location")
		eventually(t, v.b, v.who+" reads who asks", `document.getElementById("dialog-origin").textContent`, strings.TrimPrefix(site.URL, "http://")+" wants to")
	}
	eventually(t, bob, "bob may not answer", `document.getElementById("dialog-ok").disabled`, "true")
	eventually(t, alice, "alice may allow", `document.getElementById("dialog-ok").textContent + " " + document.getElementById("dialog-ok").disabled`, "Allow false")
	clickElement(t, alice, "dialog-ok")
	eventually(t, alice, "the page knows where alice is", "document.title", "1 at 48.86,2.35 · CloudBrowser")
	eventually(t, bob, "bob's question closed", `document.getElementById("dialog").hidden`, "true")

	click(t, alice, x0+120, y0+100) // camera
	eventually(t, alice, "the camera question", `document.getElementById("dialog-text").textContent.startsWith("use a camera")`, "true")
	clickElement(t, alice, "dialog-cancel") // Block
	eventually(t, alice, "the page is denied the camera", "document.title", "2 camera denied · CloudBrowser")
}

// TestPrintThroughEngine: window.print() offers the page as a PDF in the
// download bar, and a download over the app's limit is stopped with the
// reason shown.
func TestPrintThroughEngine(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	_, _, alice := desktopUser(t)
	x0, y0 := canvasOrigin(t, alice)

	click(t, alice, x0+300, y0+40) // print
	eventually(t, alice, "the printed page offered", `(window.cloudbrowserEngine.downloads().find(d => d.name === "Invoice 7.pdf") || {}).state`, "completed")
	href := evalString(t, alice, `window.cloudbrowserEngine.downloads().find(d => d.name === "Invoice 7.pdf").href`)
	if got := evalString(t, alice, `fetch(`+jsString(href)+`).then(r => r.text()).then(t => t.slice(0, 5))`); got != "%PDF-" {
		t.Fatalf("the printed page starts %q", got)
	}

	click(t, alice, x0+300, y0+100) // a 2 MiB download, over the 1 MiB limit
	eventually(t, alice, "the big download stopped", `(window.cloudbrowserEngine.downloads().find(d => d.name === "big.bin") || {}).state`, "refused")
	eventually(t, alice, "with the reason", `document.querySelector('#downloads-list li[data-state="refused"] .note').textContent`, "The browser's files would pass its limit: this one was not kept.")
}
