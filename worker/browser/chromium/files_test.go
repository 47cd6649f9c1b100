package chromium

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// filesPage has two file inputs, one in a frame, and a drop zone; the page
// notes in window.got what each gives it: the files' names and contents,
// or a cancel.
const filesPage = `<!doctype html><title>files</title><style>
body{margin:0} input,div,iframe{position:absolute;left:0;width:300px;height:40px;border:0}
</style>
<script>
window.got = [];
const read = async (how, files) => {
	const fs = await Promise.all([...files].map(async f => ({name: f.name, text: await f.text()})));
	got.push({how, files: fs});
};
window.watch = (el, how) => {
	el.addEventListener("change", () => read(how, el.files));
	el.addEventListener("cancel", () => got.push({how: how + " cancel", files: []}));
};
</script>
<input id=one type=file accept="image/*,.pdf" style="top:0">
<input id=many type=file multiple style="top:50px">
<iframe style="top:100px" srcdoc="<body style=margin:0><input id=inner type=file style='width:300px;height:40px'><script>parent.watch(inner, 'inner')</script>"></iframe>
<div id=zone style="top:200px;height:100px">drop here</div>
<script>
watch(one, "one");
watch(many, "many");
zone.addEventListener("dragover", e => e.preventDefault());
zone.addEventListener("drop", e => { e.preventDefault(); read("drop", e.dataTransfer.files); });
</script>`

// gotFile is a file as the page read it.
type gotFile struct{ Name, Text string }

// pageGot is one entry of the page's window.got.
type pageGot struct {
	How   string
	Files []gotFile
}

// localFile writes a file for the page to read.
func localFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// waitGot waits until the page noted want.
func waitGot(t *testing.T, b browser.Browser, want ...pageGot) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, func() error {
		got := eval[[]pageGot](t, b, "got")
		if !reflect.DeepEqual(got, want) {
			return fmt.Errorf("page got %+v, want %+v", got, want)
		}
		return nil
	})
}

// TestFileChooser: a click on a file input reaches OnFileChooser, and the
// files chosen reach the page with their names and bytes; no files cancel
// the picker; a second answer is refused.
func TestFileChooser(t *testing.T) {
	rt := shared(t)
	a, bee := localFile(t, "a.txt", "alpha"), localFile(t, "b.txt", "beta ü")
	for _, tc := range []struct {
		name     string
		y        float64 // where the input is
		multiple bool
		accept   string
		paths    []string
		want     pageGot
	}{
		{"single", 20, false, "image/*,.pdf", []string{a}, pageGot{"one", []gotFile{{"a.txt", "alpha"}}}},
		{"multiple", 70, true, "", []string{a, bee}, pageGot{"many", []gotFile{{"a.txt", "alpha"}, {"b.txt", "beta ü"}}}},
		{"in a frame", 120, false, "", []string{bee}, pageGot{"inner", []gotFile{{"b.txt", "beta ü"}}}},
		{"cancelled", 20, false, "image/*,.pdf", nil, pageGot{"one cancel", []gotFile{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBrowser(t, rt, browser.Options{URL: secureSite(t, filesPage), Width: 800, Height: 600})
			waitLoaded(t, b)
			choosers := make(chan browser.FileChooser, 10)
			defer b.OnFileChooser(func(fc browser.FileChooser) { choosers <- fc })()
			click(t, b, 50, tc.y)
			var fc browser.FileChooser
			select {
			case fc = <-choosers:
			case <-testCtx(t).Done():
				t.Fatal("no file chooser")
			}
			if fc.Multiple != tc.multiple || fc.Accept != tc.accept {
				t.Fatalf("chooser %+v, want multiple %v accept %q", fc, tc.multiple, tc.accept)
			}
			if err := b.ChooseFiles(testCtx(t), fc.ID, tc.paths); err != nil {
				t.Fatal(err)
			}
			waitGot(t, b, tc.want)
			if err := b.ChooseFiles(testCtx(t), fc.ID, tc.paths); !errors.Is(err, browser.ErrNoChooser) {
				t.Fatalf("second answer: %v, want ErrNoChooser", err)
			}
		})
	}
}

// TestFileChooserUnanswered: with nobody listening a picker is cancelled at
// once and not kept; unknown pickers and missing files are refused, the
// latter leaving the picker open.
func TestFileChooserUnanswered(t *testing.T) {
	b := newBrowser(t, shared(t), browser.Options{URL: secureSite(t, filesPage), Width: 800, Height: 600})
	waitLoaded(t, b)
	ctx := testCtx(t)
	click(t, b, 50, 20)
	waitGot(t, b, pageGot{"one cancel", []gotFile{}})

	choosers := make(chan browser.FileChooser, 10)
	defer b.OnFileChooser(func(fc browser.FileChooser) { choosers <- fc })()
	click(t, b, 50, 20)
	var fc browser.FileChooser
	select {
	case fc = <-choosers:
	case <-ctx.Done():
		t.Fatal("no file chooser")
	}
	for _, id := range []uint64{fc.ID - 1, fc.ID + 1} {
		if err := b.ChooseFiles(ctx, id, nil); !errors.Is(err, browser.ErrNoChooser) {
			t.Errorf("picker %d (open: %d): %v, want ErrNoChooser", id, fc.ID, err)
		}
	}
	missing := filepath.Join(t.TempDir(), "missing.txt")
	if err := b.ChooseFiles(ctx, fc.ID, []string{missing}); err == nil || errors.Is(err, browser.ErrNoChooser) {
		t.Fatalf("a missing file: %v", err)
	}
	if err := b.ChooseFiles(ctx, fc.ID, []string{localFile(t, "c.txt", "gamma")}); err != nil {
		t.Fatal(err)
	}
	waitGot(t, b, pageGot{"one cancel", []gotFile{}}, pageGot{"one", []gotFile{{"c.txt", "gamma"}}})
}

// TestDropFiles: files dropped on the page reach its drop handler with their
// names and bytes; dropped where the page takes nothing, they do nothing
// (no navigation to the file).
func TestDropFiles(t *testing.T) {
	url := secureSite(t, filesPage)
	b := newBrowser(t, shared(t), browser.Options{URL: url, Width: 800, Height: 600})
	waitLoaded(t, b)
	ctx := testCtx(t)
	a, bee := localFile(t, "a.txt", "alpha"), localFile(t, "b.txt", "beta ü")
	if err := b.DropFiles(ctx, 500, 500, []string{a}); err != nil {
		t.Fatal(err)
	}
	if err := b.DropFiles(ctx, 50, 250, []string{a, bee}); err != nil {
		t.Fatal(err)
	}
	waitGot(t, b, pageGot{"drop", []gotFile{{"a.txt", "alpha"}, {"b.txt", "beta ü"}}})
	if got := b.Page().URL; got != url+"/" {
		t.Fatalf("page at %s after the drops", got)
	}
	if err := b.DropFiles(ctx, 50, 250, []string{filepath.Join(t.TempDir(), "missing.txt")}); err == nil {
		t.Fatal("dropping a missing file succeeded")
	}
}
