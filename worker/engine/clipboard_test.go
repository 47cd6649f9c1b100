package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock/clocktest"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// TestCopyGoesToWhoActed: the page's copy reaches the viewer whose input
// came last, within the copy window, and no other viewer: not a second
// writer, not a read-only viewer, and nobody once the window passed.
func TestCopyGoesToWhoActed(t *testing.T) {
	f := newHubFixture(t)
	clk := clocktest.New(time.Unix(1e9, 0))
	f.h.gestures.clk = clk // before any client: nothing reads it yet
	a, _ := f.dial(t, AccessWrite)
	b, _ := f.dial(t, AccessWrite)
	ro, _ := f.dial(t, AccessRead)

	acted := 0
	act := func(conn *websocket.Conn, ev map[string]any) {
		t.Helper()
		ev["t"] = "input"
		if err := conn.WriteJSON(ev); err != nil {
			t.Fatal(err)
		}
		acted++
		// The gesture is noted before the browser takes the input.
		testutil.Eventually(t, 10*time.Second, testutil.Cond("the input taken", func() bool { return len(f.fb.Inputs()) == acted }))
	}
	// gets says conn's next text message is the copy of text (want "":
	// no copy; a ping's answer comes first).
	gets := func(name string, conn *websocket.Conn, want string) {
		t.Helper()
		if want == "" {
			if err := conn.WriteJSON(map[string]any{"t": "ping", "seq": 9}); err != nil {
				t.Fatal(err)
			}
		}
		for {
			m, err := nextText(t, conn)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			switch {
			case m["t"] == "clipboard" && m["text"] == want:
				return
			case m["t"] == "clipboard":
				t.Fatalf("%s got the copy %q, want %q", name, m["text"], want)
			case m["t"] == "pong" && want == "":
				return
			case m["t"] == "pong":
				t.Fatalf("%s: no copy, want %q", name, want)
			}
		}
	}

	act(a, map[string]any{"type": "keydown", "key": "c", "modifiers": int(browser.ModCtrl)})
	f.fb.Copy("a's text")
	gets("a, who pressed Ctrl+C", a, "a's text")
	gets("b", b, "")
	gets("the read-only viewer", ro, "")

	act(b, map[string]any{"type": "mousedown", "x": 1, "y": 1})
	act(a, map[string]any{"type": "mousemove", "x": 2, "y": 2}) // not a gesture
	clk.Advance(gestureWindow)
	f.fb.Copy("b's text")
	gets("b, who clicked", b, "b's text")
	gets("a, who only moved the mouse", a, "")

	clk.Advance(time.Nanosecond) // the window passed
	f.fb.Copy("a timer's text")
	for i, conn := range []*websocket.Conn{a, b, ro} {
		gets(fmt.Sprintf("viewer %d, after the window", i), conn, "")
	}

	// The viewer who acted leaves: nobody gets the copy.
	act(a, map[string]any{"type": "keydown", "key": "x", "modifiers": int(browser.ModCtrl)})
	a.Close()
	testutil.Eventually(t, 10*time.Second, testutil.Cond("a gone", func() bool { return f.h.Count() == 2 }))
	f.fb.Copy("after a left")
	gets("b, after a left", b, "")
}

// TestEditableToWriters: where the page's focus is goes to the viewers who
// may type, as it changes and to one who joins while a field is focused;
// a read-only viewer is not told.
func TestEditableToWriters(t *testing.T) {
	f := newHubFixture(t)
	a, _ := f.dial(t, AccessWrite)
	ro, _ := f.dial(t, AccessRead)
	f.fb.Focus(true)
	if m := nextOf(t, a, "editable"); m["on"] != true {
		t.Fatalf("focus in a field: %v", m)
	}
	getsNone(t, ro, "the read-only viewer", "editable")
	late, _ := f.dial(t, AccessWrite)
	if m := nextOf(t, late, "editable"); m["on"] != true {
		t.Fatalf("a viewer joining: %v", m)
	}
	f.fb.Focus(false)
	for _, conn := range []*websocket.Conn{a, late} {
		if m := nextOf(t, conn, "editable"); m["on"] != false {
			t.Fatalf("focus out: %v", m)
		}
	}
	lateRO, _ := f.dial(t, AccessRead)
	getsNone(t, lateRO, "a read-only viewer joining", "editable")
}
