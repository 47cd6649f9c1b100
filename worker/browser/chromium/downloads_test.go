package chromium

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/chromedp"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// downloadSite serves a page with download links at the top left (y 0-40:
// a download link; 50-90: a link to a new window, which downloads; 100-140:
// a link in a cross-site frame) and, at /file, an attachment of the bytes
// it returns.
func downloadSite(t *testing.T) (url string, served []byte) {
	served = make([]byte, 300<<10) // some progress before it completes
	for i := range served {
		served[i] = byte(rand.N(256))
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/file":
			w.Header().Set("Content-Disposition", "attachment; filename=report.bin")
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(served)
		case "/frame":
			fmt.Fprint(w, `<body style="margin:0"><a href="/file" style="display:block;height:40px">download</a>`)
		default:
			// localhost and 127.0.0.1 are two sites: the frame runs in a
			// renderer of its own.
			frame := "http://" + strings.Replace(r.Host, "127.0.0.1", "localhost", 1) + "/frame"
			fmt.Fprintf(w, `<!doctype html><title>downloads</title><style>
body{margin:0} a,iframe{position:absolute;left:0;width:200px;height:40px;display:block;border:0}</style>
<a href="/file" download style="top:0">download</a>
<a href="/file" target=_blank style="top:50px">new window</a>
<iframe src="%s" style="top:100px"></iframe>`, frame)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL, served
}

// blobDownload makes the page download text it made itself, as name.
func blobDownload(name, text string) string {
	return fmt.Sprintf(`(() => {
		const a = document.createElement("a");
		a.href = URL.createObjectURL(new Blob([%q]));
		a.download = %q;
		document.body.append(a);
		a.click();
	})()`, text, name)
}

// downloadLog collects what OnDownload reports.
type downloadLog struct {
	mu  sync.Mutex
	got []browser.Download
}

func (l *downloadLog) add(d browser.Download) { l.mu.Lock(); l.got = append(l.got, d); l.mu.Unlock() }

func (l *downloadLog) all() []browser.Download {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.got)
}

// ids are the downloads reported, in order.
func (l *downloadLog) ids() []string {
	var ids []string
	for _, d := range l.all() {
		if !slices.Contains(ids, d.ID) {
			ids = append(ids, d.ID)
		}
	}
	return ids
}

// completed waits for a completed download and returns it.
func (l *downloadLog) completed(t *testing.T) browser.Download {
	t.Helper()
	var done browser.Download
	testutil.Eventually(t, 30*time.Second, func() error {
		for _, d := range l.all() {
			if d.State != browser.DownloadInProgress {
				done = d
				return nil
			}
		}
		return errors.New("no download completed")
	})
	if done.State != browser.DownloadCompleted {
		t.Fatalf("download ended %+v", done)
	}
	return done
}

// TestDownloads: what the page downloads, from a server or made by itself,
// lands in the downloads folder under its ID with the bytes it had, and
// OnDownload follows it from its start to its end.
func TestDownloads(t *testing.T) {
	rt := shared(t)
	site, served := downloadSite(t)
	for _, tc := range []struct {
		name   string
		y      float64 // of the link clicked
		script string  // run instead
		file   string
		url    string // its prefix
		want   []byte
	}{
		{"attachment", 20, "", "report.bin", site + "/file", served},
		{"from a new window", 70, "", "report.bin", site + "/file", served},
		{"from a cross-site frame", 120, "", "report.bin", strings.Replace(site, "127.0.0.1", "localhost", 1) + "/file", served},
		{"blob", 0, blobDownload("made.txt", "made by the page ü"), "made.txt", "blob:" + site, []byte("made by the page ü")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBrowser(t, rt, browser.Options{URL: site, Width: 800, Height: 600})
			waitLoaded(t, b)
			dir := t.TempDir()
			if err := b.SetDownloads(testCtx(t), dir); err != nil {
				t.Fatal(err)
			}
			var log downloadLog
			defer b.OnDownload(log.add)()
			if tc.script != "" {
				eval[any](t, b, tc.script)
			} else {
				click(t, b, 20, tc.y)
			}
			d := log.completed(t)
			if d.Name != tc.file || !strings.HasPrefix(d.URL, tc.url) || d.Path != filepath.Join(dir, d.ID) ||
				d.Received != int64(len(tc.want)) || d.Total != d.Received {
				t.Fatalf("download %+v", d)
			}
			if got, err := os.ReadFile(d.Path); err != nil || !bytes.Equal(got, tc.want) {
				t.Fatalf("file: %d bytes (%v), want %d", len(got), err, len(tc.want))
			}
			all := log.all()
			if ids := log.ids(); len(ids) != 1 || all[0].State != browser.DownloadInProgress || all[len(all)-1] != d {
				t.Fatalf("reported %+v", all)
			}
		})
	}
}

// TestDownloadsStayWithTheirBrowser: two browsers of one Chromium each see
// their own downloads only.
func TestDownloadsStayWithTheirBrowser(t *testing.T) {
	rt := shared(t)
	site, _ := downloadSite(t)
	type side struct {
		b   browser.Browser
		dir string
		log downloadLog
	}
	var sides [2]*side
	for i := range sides {
		s := &side{b: newBrowser(t, rt, browser.Options{URL: site, Width: 800, Height: 600}), dir: t.TempDir()}
		waitLoaded(t, s.b)
		if err := s.b.SetDownloads(testCtx(t), s.dir); err != nil {
			t.Fatal(err)
		}
		defer s.b.OnDownload(s.log.add)()
		sides[i] = s
	}
	one, other := sides[0], sides[1]
	click(t, one.b, 20, 20)
	first := one.log.completed(t)
	eval[any](t, other.b, blobDownload("mine.txt", "the other's"))
	second := other.log.completed(t)
	if ids := one.log.ids(); !slices.Equal(ids, []string{first.ID}) {
		t.Errorf("first browser saw %v, want only %s", ids, first.ID)
	}
	if ids := other.log.ids(); !slices.Equal(ids, []string{second.ID}) {
		t.Errorf("second browser saw %v, want only %s", ids, second.ID)
	}
	for _, s := range sides {
		if ents, err := os.ReadDir(s.dir); err != nil || len(ents) != 1 {
			t.Errorf("%s holds %v (%v), want one file", s.dir, ents, err)
		}
	}
}

// TestDownloadsRefused: without a downloads folder (at first, or after one)
// the page's download fails: no file anywhere, nothing reported.
func TestDownloadsRefused(t *testing.T) {
	rt := shared(t)
	site, _ := downloadSite(t)
	for _, tc := range []struct {
		name  string
		first string // SetDownloads before the refusal; "" = none
	}{
		{"by default", ""},
		{"after a folder", "dir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBrowser(t, rt, browser.Options{URL: site, Width: 800, Height: 600})
			waitLoaded(t, b)
			cb := b.(*cbrowser)
			dir := t.TempDir()
			if tc.first != "" {
				if err := b.SetDownloads(testCtx(t), dir); err != nil {
					t.Fatal(err)
				}
				if err := b.SetDownloads(testCtx(t), ""); err != nil {
					t.Fatal(err)
				}
			}
			var log downloadLog
			defer b.OnDownload(log.add)()
			ended := pageDownloadEnds(t, cb)
			click(t, b, 20, 20)
			var guid string
			select {
			case end := <-ended:
				if end.State != cdpbrowser.DownloadProgressStateCanceled {
					t.Fatalf("download %+v, want it canceled", end)
				}
				guid = end.GUID
			case <-testCtx(t).Done():
				t.Fatal("the download never ended")
			}
			if got := log.all(); len(got) != 0 {
				t.Errorf("reported %+v", got)
			}
			home, _ := os.UserHomeDir()
			for _, root := range []string{dir, cb.p.dir, filepath.Join(home, "Downloads")} {
				filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
					if err == nil && (strings.Contains(d.Name(), guid) || strings.HasPrefix(d.Name(), "report")) {
						t.Errorf("a file for the refused download: %s", path)
					}
					return nil
				})
			}
		})
	}
}

// pageDownloadEnds reports how the downloads of b's page end, seen on the
// browser session.
func pageDownloadEnds(t *testing.T, b *cbrowser) <-chan cdpbrowser.EventDownloadProgress {
	ctx, cancel := context.WithCancel(b.ctx)
	t.Cleanup(cancel)
	ch := make(chan cdpbrowser.EventDownloadProgress, 10)
	var mu sync.Mutex
	mine := map[string]bool{}
	err := chromedp.ListenBrowser(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *cdpbrowser.EventDownloadWillBegin:
			mine[ev.GUID] = ev.FrameID == cdp.FrameID(b.t.TargetID)
		case *cdpbrowser.EventDownloadProgress:
			if mine[ev.GUID] && ev.State != cdpbrowser.DownloadProgressStateInProgress {
				select {
				case ch <- *ev:
				default: // the reader of every browser must not wait
				}
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// TestFilesEndWithTheBrowser: a closed browser takes no files and reports
// nothing more.
func TestFilesEndWithTheBrowser(t *testing.T) {
	b := newBrowser(t, shared(t), browser.Options{URL: secureSite(t, filesPage), Width: 800, Height: 600})
	waitLoaded(t, b)
	ctx := testCtx(t)
	opened := make(chan struct{}, 10)
	defer b.OnFileChooser(func(browser.FileChooser) { opened <- struct{}{} })()
	click(t, b, 50, 20)
	<-opened
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.OnDownload(func(d browser.Download) { t.Errorf("reported %+v after the end", d) })()
	a := localFile(t, "a.txt", "alpha")
	if err := b.ChooseFiles(ctx, 1, []string{a}); !errors.Is(err, browser.ErrClosed) {
		t.Errorf("choose files: %v, want ErrClosed", err)
	}
	if err := b.DropFiles(ctx, 50, 250, []string{a}); !errors.Is(err, browser.ErrClosed) {
		t.Errorf("drop files: %v, want ErrClosed", err)
	}
	if err := b.SetDownloads(ctx, t.TempDir()); !errors.Is(err, browser.ErrClosed) {
		t.Errorf("set downloads: %v, want ErrClosed", err)
	}
}
