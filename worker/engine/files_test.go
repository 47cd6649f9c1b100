package engine

import (
	"bytes"
	"context"
	"errors"
	"io"
	"mime/multipart"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock/clocktest"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/files"
)

// upload is a multipart body of one file.
func upload(t *testing.T, name, data string) *multipart.Reader {
	t.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	pw, _ := w.CreateFormFile("file", name)
	io.WriteString(pw, data)
	w.Close()
	return multipart.NewReader(&buf, w.Boundary())
}

// nextOf is conn's next text message of kind (others skipped).
func nextOf(t *testing.T, conn *websocket.Conn, kind string) map[string]any {
	t.Helper()
	for {
		m, err := nextText(t, conn)
		if err != nil {
			t.Fatalf("waiting for %s: %v", kind, err)
		}
		if m["t"] == kind {
			return m
		}
	}
}

// getsNone says conn got no message of the kinds before a ping's answer:
// anything sent to it earlier comes first.
func getsNone(t *testing.T, conn *websocket.Conn, who string, kinds ...string) {
	t.Helper()
	if err := conn.WriteJSON(map[string]any{"t": "ping", "seq": 7}); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := nextText(t, conn)
		if err != nil {
			t.Fatalf("%s: %v", who, err)
		}
		if m["t"] == "pong" {
			return
		}
		for _, k := range kinds {
			if m["t"] == k {
				t.Fatalf("%s got %v", who, m)
			}
		}
	}
}

func newFilesFixture(t *testing.T, fc FilesConfig) (*hubFixture, *clocktest.Clock, *files.Store) {
	t.Helper()
	clk := clocktest.New(time.Unix(1e9, 0))
	st, err := files.New(files.Config{Dir: filepath.Join(t.TempDir(), "b1"), MaxBytes: 100, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	fc.Store = st
	f := newHubFixture(t, func(c *Config) { c.Files = fc; c.Clock = clk })
	return f, clk, st
}

func click(t *testing.T, conn *websocket.Conn) {
	t.Helper()
	if err := conn.WriteJSON(map[string]any{"t": "input", "type": "mousedown", "x": 1, "y": 1}); err != nil {
		t.Fatal(err)
	}
}

// TestFilePickers: a picker goes to the viewer who clicked, no one else;
// the uploaded files are set on it; one opened with no viewer's gesture
// gets no file; an app without uploads tells its user why.
func TestFilePickers(t *testing.T) {
	f, clk, st := newFilesFixture(t, FilesConfig{})
	a, _ := f.dial(t, AccessWrite)
	b, _ := f.dial(t, AccessWrite)
	ro, _ := f.dial(t, AccessRead)
	click(t, a)
	testutil.Eventually(t, 10*time.Second, testutil.Cond("the click", func() bool { return len(f.fb.Inputs()) == 1 }))
	f.fb.OpenChooser(browser.FileChooser{ID: 1, Multiple: true, Accept: "image/*"})
	if m := nextOf(t, a, "fileChooser"); m["id"] != 1.0 || m["multiple"] != true || m["accept"] != "image/*" {
		t.Fatalf("a's picker %v", m)
	}
	getsNone(t, b, "b", "fileChooser")
	getsNone(t, ro, "the read-only viewer", "fileChooser")

	ups, err := f.h.Files().Upload(context.Background(), 1, upload(t, "cat.png", "meow"))
	if err != nil {
		t.Fatal(err)
	}
	paths, ok := f.fb.Chosen(1)
	if !ok || len(paths) != 1 || paths[0] != ups[0].Path {
		t.Fatalf("picker got %v %v, want %v", paths, ok, ups)
	}
	if data, err := os.ReadFile(paths[0]); err != nil || string(data) != "meow" || st.Used() != 4 {
		t.Fatalf("uploaded %q %v, used %d", data, err, st.Used())
	}

	clk.Advance(gestureWindow + time.Nanosecond)
	f.fb.OpenChooser(browser.FileChooser{ID: 2})
	if paths, ok := f.fb.Chosen(2); !ok || len(paths) != 0 {
		t.Fatalf("a picker with no gesture: %v %v, want cancelled", paths, ok)
	}
	getsNone(t, a, "a, long after", "fileChooser")

	// Over the limit: refused, nothing set on the page.
	if _, err := f.h.Files().Upload(context.Background(), 3, upload(t, "big", string(make([]byte, 200)))); !errors.Is(err, files.ErrTooLarge) {
		t.Fatalf("too large: %v", err)
	}
	if _, ok := f.fb.Chosen(3); ok {
		t.Fatal("a refused upload reached the page")
	}

	// The browser ends: its files go.
	f.fb.Crash()
	testutil.Eventually(t, 10*time.Second, testutil.Cond("the files removed", func() bool {
		_, err := os.Stat(filepath.Dir(st.DownloadDir()))
		return os.IsNotExist(err)
	}))
}

func TestUploadsOff(t *testing.T) {
	f, _, _ := newFilesFixture(t, FilesConfig{NoUploads: true})
	a, _ := f.dial(t, AccessWrite)
	click(t, a)
	testutil.Eventually(t, 10*time.Second, testutil.Cond("the click", func() bool { return len(f.fb.Inputs()) == 1 }))
	f.fb.OpenChooser(browser.FileChooser{ID: 1})
	if m := nextOf(t, a, "fileChooser"); m["refused"] != ErrUploadsOff.Error()+"." {
		t.Fatalf("picker of an app without uploads: %v", m)
	}
	if paths, ok := f.fb.Chosen(1); !ok || len(paths) != 0 {
		t.Fatalf("picker %v %v, want cancelled", paths, ok)
	}
	if _, err := f.h.Files().Upload(context.Background(), 1, upload(t, "a", "x")); !errors.Is(err, ErrUploadsOff) {
		t.Fatalf("upload: %v", err)
	}
	if _, err := f.h.Files().Drop(context.Background(), 1, 1, upload(t, "a", "x")); !errors.Is(err, ErrUploadsOff) {
		t.Fatalf("drop: %v", err)
	}
}

// TestDownloads: a download's progress goes to the viewers who may drive,
// at most every progressEvery; finished, it opens; too large, it is
// refused and says so.
func TestDownloads(t *testing.T) {
	f, clk, st := newFilesFixture(t, FilesConfig{})
	a, _ := f.dial(t, AccessWrite)
	b, _ := f.dial(t, AccessWrite)
	ro, _ := f.dial(t, AccessRead)
	if f.fb.DownloadDir() != st.DownloadDir() {
		t.Fatalf("downloads go to %q, want %q", f.fb.DownloadDir(), st.DownloadDir())
	}
	d := browser.Download{ID: "g1", Name: "report.csv", Total: 8, State: browser.DownloadInProgress}
	f.fb.Download(d)
	d.Received = 4
	f.fb.Download(d) // too soon: not sent
	clk.Advance(progressEvery)
	d.Received = 6
	f.fb.Download(d)
	for _, conn := range []*websocket.Conn{a, b} {
		if m := nextOf(t, conn, "download"); m["id"] != "g1" || m["name"] != "report.csv" || m["state"] != "inProgress" || m["received"] != nil {
			t.Fatalf("first progress %v", m)
		}
		if m := nextOf(t, conn, "download"); m["received"] != 6.0 {
			t.Fatalf("second progress %v (the one between was too soon)", m)
		}
	}
	getsNone(t, ro, "the read-only viewer", "download")

	path := filepath.Join(st.DownloadDir(), "g1")
	if err := os.WriteFile(path, []byte("a,b\n1,2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d.State, d.Received, d.Path = browser.DownloadCompleted, 8, path
	f.fb.Download(d)
	for _, conn := range []*websocket.Conn{a, b} {
		if m := nextOf(t, conn, "download"); m["state"] != "completed" {
			t.Fatalf("completed: %v", m)
		}
	}
	r, got, err := f.h.Files().Open("g1")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(r)
	r.Close()
	if string(data) != "a,b\n1,2\n" || got.Name != "report.csv" {
		t.Fatalf("download %q %+v", data, got)
	}

	big := filepath.Join(st.DownloadDir(), "g2")
	os.WriteFile(big, make([]byte, 200), 0o600)
	f.fb.Download(browser.Download{ID: "g2", Name: "big.bin", State: browser.DownloadCompleted, Path: big})
	if m := nextOf(t, b, "download"); m["id"] != "g2" || m["state"] != "refused" || m["error"] == nil {
		t.Fatalf("too large: %v", m)
	}
	if _, _, err := f.h.Files().Open("g2"); !errors.Is(err, files.ErrNotFound) {
		t.Fatalf("refused download opens: %v", err)
	}
}

// TestDownloadOverLimitStopped: a download that passes the browser's limit
// while it comes (or announces a size over it) is cancelled then, not
// when its last byte is in, and its viewers are told why, once.
func TestDownloadOverLimitStopped(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    browser.Download
	}{
		{"announced too large", browser.Download{ID: "big", Name: "big.iso", Total: 101, State: browser.DownloadInProgress}},
		{"grew too large", browser.Download{ID: "big", Name: "stream.bin", Received: 101, State: browser.DownloadInProgress}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, _, _ := newFilesFixture(t, FilesConfig{})
			a, _ := f.dial(t, AccessWrite)
			f.fb.Download(browser.Download{ID: "big", Name: tc.d.Name, State: browser.DownloadInProgress})
			if m := nextOf(t, a, "download"); m["state"] != "inProgress" {
				t.Fatalf("start %v", m)
			}
			f.fb.Download(tc.d)
			if m := nextOf(t, a, "download"); m["id"] != "big" || m["state"] != "refused" || m["error"] == nil {
				t.Fatalf("over the limit: %v", m)
			}
			testutil.Eventually(t, 10*time.Second, testutil.Cond("the download cancelled", func() bool {
				c := f.fb.Cancelled()
				return len(c) == 1 && c[0] == "big"
			}))
			// Chromium's own end of it says nothing more.
			f.fb.Download(browser.Download{ID: "big", Name: tc.d.Name, State: browser.DownloadCanceled})
			getsNone(t, a, "the viewer", "download")
		})
	}
}
