package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

var instanceURL = regexp.MustCompile(`^/([a-z0-9_-]+)/a/([a-z0-9.-]+)$`)

// drag presses the left button at (x, y) in b's page, moves through the
// points and releases at the last one.
func drag(t *testing.T, b browser.Browser, x, y float64, to ...[2]float64) {
	t.Helper()
	input(t, b,
		browser.InputEvent{Type: browser.InputMouseMove, X: x, Y: y},
		browser.InputEvent{Type: browser.InputMouseDown, X: x, Y: y, Button: browser.ButtonLeft, Buttons: 1, ClickCount: 1})
	for _, p := range to {
		x, y = p[0], p[1]
		input(t, b, browser.InputEvent{Type: browser.InputMouseMove, X: x, Y: y, Buttons: 1})
	}
	input(t, b, browser.InputEvent{Type: browser.InputMouseUp, X: x, Y: y, Button: browser.ButtonLeft, ClickCount: 1})
}

// pathOf is b's current URL without the cluster's base.
func pathOf(b browser.Browser, base string) string { return strings.TrimPrefix(b.Page().URL, base) }

// TestSamples drives the built-in sample apps of the two strategies with
// several users per instance through users' own Chromium: the whiteboard
// (multiInstance; strokes through instance.append) and team tasks
// (singleBrowserPerUser). The apps put their counts in the page title,
// which the client engine shows as its own, so each user's tab shows what
// their virtual browser rendered.
func TestSamples(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	needChromium(t)
	c := startCluster(t, clusterOpts{proxies: 1, workers: 2, runtime: "chromium"}) // the built-in samples
	base := "http://" + c.public
	users := userBrowsers(t)

	t.Run("whiteboard", func(t *testing.T) {
		// Alice creates a board with the landing page form and opens a
		// browser in it from the board's page.
		alice := open(t, users, base+"/whiteboard")
		eventually(t, alice, "alice's landing page", `document.body.innerText.includes("You have no instances")`, "true")
		do(t, alice, `document.getElementById("new-instance").click()`)
		eventually(t, alice, "board page", `!!document.getElementById("share-instance")`, "true")
		boardPath := pathOf(alice, base)
		if m := instanceURL.FindStringSubmatch(boardPath); m == nil || m[1] != "whiteboard" {
			t.Fatalf("alice is not on a board page: %s", alice.Page().URL)
		}
		do(t, alice, `document.getElementById("new-browser").click()`)
		eventually(t, alice, "alice's engine", "document.body.dataset.status", "live")
		eventually(t, alice, "alice's empty board", "document.title", "Whiteboard: 0 strokes · CloudBrowser")
		alicePath := pathOf(alice, base)
		am := browserURL.FindStringSubmatch(alicePath)
		if am == nil || "/whiteboard/a/"+am[2] != boardPath {
			t.Fatalf("alice's browser %s is not on her board %s", alicePath, boardPath)
		}

		// She shares the board with anyone, reader-writer, from its page,
		// and goes back to her browser.
		do(t, alice, fmt.Sprintf("location.href = %q", boardPath))
		eventually(t, alice, "board page again", `!!document.getElementById("share-instance")`, "true")
		do(t, alice, `const f = document.getElementById("share-instance"); f.principal.value = "*"; f.role.value = "reader-writer";
			f.querySelector("button").click()`)
		eventually(t, alice, "board shared", `document.body.innerText.includes("Shared with: * (reader-writer)")`, "true")
		do(t, alice, fmt.Sprintf("location.href = %q", alicePath))
		eventually(t, alice, "alice back in her browser", "document.body.dataset.status", "live")
		eventually(t, alice, "alice's board still empty", "document.title", "Whiteboard: 0 strokes · CloudBrowser")

		// Bob opens the board's address and gets his own browser in it.
		bob := open(t, users, base+boardPath)
		eventually(t, bob, "bob on the board page", `!!document.getElementById("new-browser")`, "true")
		do(t, bob, `document.getElementById("new-browser").click()`)
		eventually(t, bob, "bob's engine", "document.body.dataset.status", "live")
		eventually(t, bob, "bob's empty board", "document.title", "Whiteboard: 0 strokes · CloudBrowser")
		bm := browserURL.FindStringSubmatch(pathOf(bob, base))
		if bm == nil || bm[2] != am[2] || bm[3] == am[3] {
			t.Fatalf("want bob's own browser on alice's board: %s, alice %s", bob.Page().URL, alicePath)
		}

		// Alice draws with the mouse through her client engine; the stroke
		// reaches bob's virtual browser, and his reaches hers. The board
		// fills most of the page below a toolbar, so these points are on it
		// in a window of the size open() gives.
		x0, y0 := canvasOrigin(t, alice)
		drag(t, alice, x0+300, y0+250, [2]float64{x0 + 360, y0 + 280}, [2]float64{x0 + 420, y0 + 330}, [2]float64{x0 + 480, y0 + 360})
		eventually(t, bob, "alice's stroke reaches bob", "document.title", "Whiteboard: 1 stroke · CloudBrowser")
		eventually(t, alice, "alice's stroke on her board", "document.title", "Whiteboard: 1 stroke · CloudBrowser")
		x0, y0 = canvasOrigin(t, bob)
		drag(t, bob, x0+500, y0+200, [2]float64{x0 + 450, y0 + 300})
		eventually(t, alice, "bob's stroke reaches alice", "document.title", "Whiteboard: 2 strokes · CloudBrowser")
	})

	t.Run("tasks", func(t *testing.T) {
		// Alice creates a team list from the landing page: that leads
		// straight to her browser in it.
		alice := open(t, users, base+"/tasks")
		eventually(t, alice, "alice's landing page", `document.body.innerText.includes("You have no instances")`, "true")
		do(t, alice, `document.getElementById("new-instance").click()`)
		eventually(t, alice, "alice's engine", "document.body.dataset.status", "live")
		eventually(t, alice, "alice's empty list", "document.title", "Tasks: 0 open, 0 done · CloudBrowser")
		am := browserURL.FindStringSubmatch(pathOf(alice, base))
		if am == nil || am[1] != "tasks" {
			t.Fatalf("alice is not in a browser of a list: %s", alice.Page().URL)
		}
		listPath := "/tasks/a/" + am[2]
		if out, err := c.cli(t, "share", listPath, "*", "reader-writer"); err != nil {
			t.Fatalf("share: %v %s", err, out)
		}

		// Bob follows the list's address to his own browser in it.
		bob := open(t, users, base+listPath)
		eventually(t, bob, "bob's engine", "document.body.dataset.status", "live")
		eventually(t, bob, "bob's empty list", "document.title", "Tasks: 0 open, 0 done · CloudBrowser")
		bm := browserURL.FindStringSubmatch(pathOf(bob, base))
		if bm == nil || bm[2] != am[2] || bm[3] == am[3] {
			t.Fatalf("want bob's own browser in alice's list: %s, alice %s", bob.Page().URL, alice.Page().URL)
		}

		enter := []browser.InputEvent{{Type: browser.InputKeyDown, Key: "Enter"}, {Type: browser.InputKeyUp, Key: "Enter"}}
		typeText(t, alice, "buy milk") // into the focused new-task field
		input(t, alice, enter...)
		eventually(t, bob, "alice's task reaches bob", "document.title", "Tasks: 1 open, 0 done · CloudBrowser")
		typeText(t, bob, "call carol")
		input(t, bob, enter...)
		eventually(t, alice, "bob's task reaches alice", "document.title", "Tasks: 2 open, 0 done · CloudBrowser")

		// Bob ticks off the first task: its row is at a fixed place below
		// the 48 px header and the 56 px form, 40 px high.
		x0, y0 := canvasOrigin(t, bob)
		click(t, bob, x0+200, y0+48+56+20)
		eventually(t, alice, "bob's tick reaches alice", "document.title", "Tasks: 1 open, 1 done · CloudBrowser")
		eventually(t, bob, "bob's own list", "document.title", "Tasks: 1 open, 1 done · CloudBrowser")
	})
}
