package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

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
	needChromium(t)
	apps, _ := filepath.Abs("testdata/apps")
	c := startCluster(t, clusterOpts{proxies: 1, workers: 1, runtime: "chromium", extra: []string{"--apps", apps}})
	base := "http://" + c.public
	users := userBrowsers(t)

	alice := open(t, users, base+"/desktop")
	eventually(t, alice, "alice's engine", "document.body.dataset.status", "live")
	eventually(t, alice, "the test page", "document.title", "ready · CloudBrowser")
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
	if out, err := c.cli(t, "share", browserPath, "*", "reader"); err != nil {
		t.Fatalf("share: %v %s", err, out)
	}
	bob := open(t, users, base+browserPath)
	eventually(t, bob, "bob read-only", "document.body.dataset.status", "live (read-only)")

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
