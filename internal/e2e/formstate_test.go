package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// TestFormStateSurvivesMoves: a user types into a textarea
// through a real client engine, moves the caret and scrolls the page and a
// list; then the instance moves to the other worker, once by a drain with
// migration and once by a SIGTERM of its worker, while the user keeps
// typing. After each move the page on the new worker shows everything
// typed, in order (also the keys typed during the move), with the caret
// after the last of them and the same scroll, as the user sees it in the
// engine's title.
func TestFormStateSurvivesMoves(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	needChromium(t)
	apps, _ := filepath.Abs("testdata/apps")
	c := startCluster(t, clusterOpts{proxies: 1, workers: 2, runtime: "chromium", extra: []string{"--apps", apps}})
	base := "http://" + c.public
	users := userBrowsers(t)
	u := open(t, users, base+"/formstate")
	eventually(t, u, "engine live", "document.body.dataset.status", "live")
	eventually(t, u, "the app's page", `document.title.startsWith("fs len=0 ")`, "true")
	// Pointer positions map to the page through the drawn frame.
	eventually(t, u, "a frame drawn", "Number(document.body.dataset.frames || 0) > 0", "true")
	iid := instanceOf(t, strings.TrimPrefix(u.Page().URL, base))

	// Eight lines in the textarea (it shows four: it scrolls), the caret
	// two lines up, the window and the list scrolled.
	x0, y0 := canvasOrigin(t, u)
	click(t, u, x0+100, y0+40)
	lines := make([]string, 8)
	for i := range lines {
		lines[i] = fmt.Sprintf("line %d abc", i+1)
		if i > 0 {
			press(t, u, "Enter")
		}
		typeText(t, u, lines[i])
	}
	press(t, u, "ArrowUp")
	press(t, u, "ArrowUp")
	input(t, u, browser.InputEvent{Type: browser.InputWheel, X: x0 + 700, Y: y0 + 400, DeltaY: 400})
	input(t, u, browser.InputEvent{Type: browser.InputWheel, X: x0 + 100, Y: y0 + 180, DeltaY: 300})
	text := strings.Join(lines, "\n")
	seen := settledView(t, u, func(v formView) error {
		if v.Len != len(text) || v.Hash != fnvHex(text) || v.SelStart != v.SelEnd || v.SelStart >= len(text) ||
			v.TA == 0 || v.Win == 0 || v.List == 0 || v.Focus != "pad" {
			return fmt.Errorf("not the typed, scrolled page yet: %+v", v)
		}
		return nil
	})

	// from is where the instance is; each move sends it to the other
	// worker while the user types.
	move := func(name string, do func(from string)) {
		from := instanceWorker(c.mustStatus(), iid)
		kept := engineInt(t, u, "kept")
		ty := startTyping(u)
		do(from)
		var to string
		c.waitFor("the instance on the other worker", 60*time.Second, func(st *wire.ClusterStatus) bool {
			to = instanceWorker(st, iid)
			return to != "" && to != from
		})
		// The user types on until the engine has kept keys typed during
		// the move and reached the new worker.
		testutil.Eventually(t, 60*time.Second, func() error {
			if w := engineString(t, u, "worker"); w != to {
				return fmt.Errorf("%s: the engine is served by %q, not yet by %s", name, w, to)
			}
			if n := engineInt(t, u, "kept"); n <= kept {
				return fmt.Errorf("%s: no input kept during the move yet (%d)", name, n)
			}
			return nil
		})
		typed, err := ty.stop()
		if err != nil {
			t.Fatalf("%s: typing: %v", name, err)
		}
		eventually(t, u, name+": engine live on the new worker", "document.body.dataset.status", "live")
		eventually(t, u, name+": nothing left to send", "document.body.dataset.queued", "0")
		caret := seen.SelStart
		text = text[:caret] + typed + text[caret:]
		want := formView{Len: len(text), Hash: fnvHex(text), SelStart: caret + len(typed), SelEnd: caret + len(typed),
			TA: seen.TA, Win: seen.Win, List: seen.List, Focus: "pad", Tail: jsonString(text[max(0, len(text)-12):])}
		seen = settledView(t, u, func(v formView) error {
			if v != want {
				return fmt.Errorf("%s: after the move (%d keys typed meanwhile) the page shows\n %+v\nwant\n %+v", name, len(typed), v, want)
			}
			return nil
		})
		t.Logf("%s: %s → %s, %d characters typed during the move, all there", name, from, to, len(typed))
		t.Logf("text-lost %s: 0 of %d characters typed during the move", strings.ReplaceAll(name, " ", "-"), len(typed))
	}

	move("drain with migration", func(from string) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+c.admin+"/api/v1/workers/"+from+"/drain?migrate=true", nil)
		req.Header.Set("Authorization", "Bearer "+c.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("drain with migration: %s", resp.Status)
		}
		c.adminPost("/api/v1/workers/" + from + "/undrain") // the SIGTERM's move goes back to it
	})
	move("SIGTERM", func(from string) {
		c.workers[from].stop() // returns once the worker handed over and exited
	})
}

// formView is what the test app's title shows.
type formView struct {
	Len              int
	Hash             string
	SelStart, SelEnd int
	TA, Win, List    int
	Focus, Tail      string
}

var formTitle = regexp.MustCompile(`^fs len=(\d+) h=([0-9a-f]+) sel=(\d+),(\d+) ta=(\d+) win=(\d+) list=(\d+) focus=(\S*) tail=(.*) · CloudBrowser$`)

// view reads the virtual page's state from the engine's title.
func view(t *testing.T, b browser.Browser) (formView, error) {
	var title string
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.Evaluate(ctx, "document.title", &title); err != nil {
		return formView{}, err
	}
	m := formTitle.FindStringSubmatch(title)
	if m == nil {
		return formView{}, fmt.Errorf("title %q", title)
	}
	n := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
	return formView{Len: n(1), Hash: m[2], SelStart: n(3), SelEnd: n(4), TA: n(5), Win: n(6), List: n(7), Focus: m[8], Tail: m[9]}, nil
}

// settledView waits until the page shows a view cond accepts, the same in
// two readings in a row (a scroll may still be animating), and returns it.
func settledView(t *testing.T, b browser.Browser, cond func(formView) error) formView {
	t.Helper()
	var last *formView
	testutil.Eventually(t, 60*time.Second, func() error {
		v, err := view(t, b)
		if err != nil {
			last = nil
			return err
		}
		if err := cond(v); err != nil {
			last = nil
			return err
		}
		if last == nil || *last != v {
			last = &v
			return fmt.Errorf("still changing: %+v", v)
		}
		return nil
	})
	return *last
}

func press(t *testing.T, b browser.Browser, key string) {
	t.Helper()
	input(t, b, browser.InputEvent{Type: browser.InputKeyDown, Key: key}, browser.InputEvent{Type: browser.InputKeyUp, Key: key})
}

func engineString(t *testing.T, b browser.Browser, key string) string {
	t.Helper()
	var s string
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = b.Evaluate(ctx, fmt.Sprintf("document.body.dataset[%q] || \"\"", key), &s)
	return s
}

func engineInt(t *testing.T, b browser.Browser, key string) int {
	t.Helper()
	n, _ := strconv.Atoi(engineString(t, b, key))
	return n
}

func fnvHex(s string) string {
	h := fnv.New32a()
	h.Write([]byte(s))
	return fmt.Sprintf("%x", h.Sum32())
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// typist types letters into the engine at a fast typist's cadence (one
// key every 20 ms) until stopped.
type typist struct {
	quit, done chan struct{}
	mu         sync.Mutex
	typed      strings.Builder
	err        error
}

func startTyping(b browser.Browser) *typist {
	ty := &typist{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(ty.done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ty.quit:
				return
			case <-tick.C:
			}
			k := string(rune('a' + i%26))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := b.Input(ctx, browser.InputEvent{Type: browser.InputKeyDown, Key: k, Text: k})
			if err == nil {
				ty.mu.Lock()
				ty.typed.WriteString(k)
				ty.mu.Unlock()
				err = b.Input(ctx, browser.InputEvent{Type: browser.InputKeyUp, Key: k})
			}
			cancel()
			if err != nil {
				ty.mu.Lock()
				ty.err = err
				ty.mu.Unlock()
				return
			}
		}
	}()
	return ty
}

// stop ends the typing and returns what was typed.
func (ty *typist) stop() (string, error) {
	close(ty.quit)
	<-ty.done
	ty.mu.Lock()
	defer ty.mu.Unlock()
	return ty.typed.String(), ty.err
}

// TestTextLostOnCrash measures what a kill -9 of a typing user's worker
// costs: the page comes back on the other worker from its last periodic
// snapshot, so what was typed after it is lost, and nothing else. The
// restored text must be one the user had (the text before, plus a prefix
// of what was typed); the figure logged ("text-lost kill-9") is the rest.
func TestTextLostOnCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	needChromium(t)
	apps, _ := filepath.Abs("testdata/apps")
	c := startCluster(t, clusterOpts{proxies: 1, workers: 2, runtime: "chromium", extra: []string{"--apps", apps}})
	base := "http://" + c.public
	u := open(t, userBrowsers(t), base+"/formstate")
	eventually(t, u, "engine live", "document.body.dataset.status", "live")
	eventually(t, u, "a frame drawn", "Number(document.body.dataset.frames || 0) > 0", "true")
	iid := instanceOf(t, strings.TrimPrefix(u.Page().URL, base))
	x0, y0 := canvasOrigin(t, u)
	click(t, u, x0+100, y0+40)
	before := "typed before"
	typeText(t, u, before)
	settledView(t, u, func(v formView) error {
		if v.Len != len(before) || v.Hash != fnvHex(before) {
			return fmt.Errorf("not the typed text yet: %+v", v)
		}
		return nil
	})
	// Typing for longer than the snapshot interval: a snapshot is taken
	// while the user types, so the page must come back with at least the
	// text typed before.
	ty := startTyping(u)
	start := time.Now()
	testutil.Eventually(t, 30*time.Second, func() error {
		if d := time.Since(start); d < worker.DefaultSnapshotInterval+time.Second {
			return fmt.Errorf("typing for %s", d)
		}
		return nil
	})
	typed, err := ty.stop()
	if err != nil {
		t.Fatal(err)
	}
	typing := time.Since(start).Round(100 * time.Millisecond)
	all := before + typed
	settledView(t, u, func(v formView) error {
		if v.Len != len(all) || v.Hash != fnvHex(all) {
			return fmt.Errorf("not all typed in the page yet: %+v", v)
		}
		return nil
	})
	from := instanceWorker(c.mustStatus(), iid)
	c.workers[from].kill()
	c.movedOff(iid, from)
	eventually(t, u, "engine live on the other worker", "document.body.dataset.status", "live")
	kept := -1
	settledView(t, u, func(v formView) error {
		for k := len(all); k >= len(before); k-- {
			if v.Len == k && v.Hash == fnvHex(all[:k]) {
				kept = k
				return nil
			}
		}
		return fmt.Errorf("the restored page is not the text before the crash less what was typed last: %+v", v)
	})
	t.Logf("text-lost kill-9: %d of %d characters typed over %s before the crash (snapshot interval %s)",
		len(all)-kept, len(typed), typing, worker.DefaultSnapshotInterval)
}
