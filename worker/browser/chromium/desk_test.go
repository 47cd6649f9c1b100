package chromium

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// opened waits for an open prompt of kind with message and returns it.
func (l *promptLog) opened(t *testing.T, kind browser.PromptKind, message string) browser.Prompt {
	t.Helper()
	var found browser.Prompt
	testutil.Eventually(t, 30*time.Second, func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, p := range l.got {
			if p.Kind == kind && p.Message == message && !p.Closed {
				found = p
				return nil
			}
		}
		return fmt.Errorf("no %s %q asked; got %+v", kind, message, l.got)
	})
	return found
}

const permissionPage = `<!doctype html><title>perms</title><input id=field><textarea id=area></textarea><button id=btn>b</button>
<script>
function where() {
	navigator.geolocation.getCurrentPosition(p => document.title = "at " + p.coords.latitude + "," + p.coords.longitude,
		e => document.title = "geo error " + e.code);
}
// No camera or microphone is carried: the page learns its answer from the
// permission's state.
function media(kind, name) {
	const state = () => navigator.permissions.query({name}).then(s => document.title = name + " " + s.state);
	navigator.mediaDevices.getUserMedia({[kind]: true}).then(state, state);
}
</script>`

// TestPermissionsAsked: a page's geolocation, microphone and camera
// requests wait for the user's answer, which decides what the page gets:
// the user's own position when allowed, "denied" when refused, and with
// nobody to ask, denied at once.
func TestPermissionsAsked(t *testing.T) {
	rt := shared(t)
	site := secureSite(t, permissionPage)
	b := newBrowser(t, rt, browser.Options{URL: site, Width: 800, Height: 600})
	waitLoaded(t, b)
	var log promptLog
	stop := b.OnPrompt(log.add)

	eval[any](t, b, "where()")
	p := log.opened(t, browser.PromptPermission, browser.PermissionGeolocation)
	if p.URL != site {
		t.Errorf("asked for origin %q, want %q", p.URL, site)
	}
	if err := b.AnswerPrompt(testCtx(t), p.ID, browser.PromptAnswer{Accept: true, Position: &browser.Position{Latitude: 52.52, Longitude: 13.405, Accuracy: 10}}); err != nil {
		t.Fatal(err)
	}
	waitTitle(t, b, "at 52.52,13.405")
	// Granted: asked again, the page gets it without a question.
	eval[any](t, b, `document.title = ""; where()`)
	waitTitle(t, b, "at 52.52,13.405")

	eval[any](t, b, `media("audio", "microphone")`)
	p = log.opened(t, browser.PromptPermission, browser.PermissionMicrophone)
	if err := b.AnswerPrompt(testCtx(t), p.ID, browser.PromptAnswer{}); err != nil {
		t.Fatal(err)
	}
	waitTitle(t, b, "microphone denied")

	// Nobody listening: denied without a question.
	stop()
	eval[any](t, b, `media("video", "camera")`)
	waitTitle(t, b, "camera denied")
	if _, open := b.OpenPrompt(); open {
		t.Error("a permission request stays open with nobody to ask")
	}
}

// TestEditableFocus: focus moving into a text field, a textarea, out to a
// button, and away, is reported as it changes (a report not yet delivered
// gives way to the next: the state is what counts).
func TestEditableFocus(t *testing.T) {
	rt := shared(t)
	b := newBrowser(t, rt, browser.Options{URL: secureSite(t, permissionPage), Width: 800, Height: 600})
	waitLoaded(t, b)
	var mu sync.Mutex
	var got []bool
	defer b.OnEditable(func(on bool) { mu.Lock(); got = append(got, on); mu.Unlock() })()
	for _, step := range []struct {
		expr    string
		want    bool
		reports int // so far, where known
	}{
		{`document.getElementById("field").focus()`, true, 1},
		{`document.getElementById("area").focus()`, true, 1}, // no change: not reported
		{`document.getElementById("btn").focus()`, false, 2},
		{`document.getElementById("area").focus()`, true, 3},
		{`document.activeElement.blur()`, false, 4},
	} {
		eval[any](t, b, step.expr)
		testutil.Eventually(t, 10*time.Second, func() error {
			mu.Lock()
			defer mu.Unlock()
			if len(got) != step.reports || got[len(got)-1] != step.want {
				return fmt.Errorf("after %s: reports %v, want %d ending %v", step.expr, got, step.reports, step.want)
			}
			return nil
		})
	}
}

// TestPrintMakesPDF: window.print() becomes a download of the page as a
// PDF named for its title; with downloads refused it does nothing.
func TestPrintMakesPDF(t *testing.T) {
	rt := shared(t)
	b := newBrowser(t, rt, browser.Options{URL: secureSite(t, `<!doctype html><title>Invoice 42/7</title><h1>Total: 12 EUR</h1>`), Width: 800, Height: 600})
	waitLoaded(t, b)
	var log downloadLog
	defer b.OnDownload(log.add)()
	eval[any](t, b, "window.print()")
	if err := b.SetDownloads(testCtx(t), t.TempDir()); err != nil {
		t.Fatal(err)
	}
	eval[any](t, b, "window.print()")
	d := log.completed(t)
	if d.Name != "Invoice 42_7.pdf" {
		t.Errorf("name %q", d.Name)
	}
	data, err := os.ReadFile(d.Path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte("%PDF-")) || int64(len(data)) != d.Total {
		t.Errorf("file of %d bytes starting %q, download says %d", len(data), data[:min(8, len(data))], d.Total)
	}
	if n := len(log.ids()); n != 1 {
		t.Errorf("%d downloads; the print before SetDownloads made one", n)
	}
}

// TestCancelDownload: a download stopped in progress ends canceled, and
// one not in progress cannot be cancelled.
func TestCancelDownload(t *testing.T) {
	rt := shared(t)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/big" {
			fmt.Fprint(w, `<!doctype html><a id=a href="/big">big</a>`)
			return
		}
		w.Header().Set("Content-Disposition", "attachment; filename=big.bin")
		w.Header().Set("Content-Length", "10000000")
		w.Write(make([]byte, 256<<10))
		w.(http.Flusher).Flush()
		select { // the rest never comes
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	b := newBrowser(t, rt, browser.Options{URL: srv.URL, Width: 800, Height: 600})
	waitLoaded(t, b)
	if err := b.SetDownloads(testCtx(t), t.TempDir()); err != nil {
		t.Fatal(err)
	}
	var log downloadLog
	defer b.OnDownload(log.add)()
	eval[any](t, b, `document.getElementById("a").click()`)
	var id string
	testutil.Eventually(t, 30*time.Second, func() error {
		for _, d := range log.all() {
			if d.Received > 0 {
				id = d.ID
				return nil
			}
		}
		return errors.New("no progress yet")
	})
	if err := b.CancelDownload(testCtx(t), id); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, func() error {
		all := log.all()
		if last := all[len(all)-1]; last.State != browser.DownloadCanceled {
			return fmt.Errorf("last report %+v", last)
		}
		return nil
	})
	if err := b.CancelDownload(testCtx(t), id); !errors.Is(err, browser.ErrNoDownload) {
		t.Errorf("cancelling it again: %v", err)
	}
}
