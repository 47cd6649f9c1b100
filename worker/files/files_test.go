package files

import (
	"bytes"
	"errors"
	"io"
	"mime/multipart"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock/clocktest"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

func TestMain(m *testing.M) { testutil.Main(m) }

type part struct{ field, name, body string }

// body is a multipart upload of parts.
func body(t *testing.T, parts ...part) *multipart.Reader {
	t.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for _, p := range parts {
		var pw io.Writer
		var err error
		if p.name == "" {
			pw, err = w.CreateFormField(p.field)
		} else {
			pw, err = w.CreateFormFile(p.field, p.name)
		}
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(pw, p.body)
	}
	w.Close()
	return multipart.NewReader(&buf, w.Boundary())
}

func newStore(t *testing.T, max int64) (*Store, *clocktest.Clock) {
	t.Helper()
	clk := clocktest.New(time.Unix(1e9, 0))
	s, err := New(Config{Dir: filepath.Join(t.TempDir(), "b1"), MaxBytes: max, KeepFor: time.Hour, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return s, clk
}

// filesIn lists the regular files under dir.
func filesIn(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func TestUploads(t *testing.T) {
	tests := []struct {
		name    string
		max     int64
		parts   []part
		want    []string // names kept, in order
		wantErr error
	}{
		{"two files", 100, []part{{"f", "a.txt", "hello"}, {"note", "", "a field"}, {"f", "b.bin", "\x00\x01"}}, []string{"a.txt", "b.bin"}, nil},
		{"same name twice", 100, []part{{"f", "x.txt", "1"}, {"f", "x.txt", "2"}}, []string{"x.txt", "x (2).txt"}, nil},
		{"names cleaned", 100, []part{{"f", "../../etc/passwd", "p"}, {"f", `C:\Users\me\report.pdf`, "r"}, {"f", "  ", "c"}, {"f", "..", "d"}},
			[]string{"passwd", "report.pdf", "file", "file (2)"}, nil},
		{"long name cut", 1000, []part{{"f", strings.Repeat("é", 150), "x"}}, []string{strings.Repeat("é", 100)}, nil},
		{"exactly the limit", 5, []part{{"f", "a", "12345"}}, []string{"a"}, nil},
		{"over the limit", 5, []part{{"f", "a", "123"}, {"f", "b", "456"}}, nil, ErrTooLarge},
		{"no file", 100, []part{{"note", "", "only a field"}}, nil, ErrNoFiles},
		{"too many", 1000, func() []part {
			var ps []part
			for range MaxFiles + 1 {
				ps = append(ps, part{"f", "same", "x"})
			}
			return ps
		}(), nil, ErrTooMany},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newStore(t, tc.max)
			ups, err := s.SaveUploads(body(t, tc.parts...))
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				if got := filesIn(t, s.cfg.Dir); len(got) != 0 || s.Used() != 0 {
					t.Fatalf("a failed upload left %v, %d bytes counted", got, s.Used())
				}
				return
			}
			var names []string
			var total int64
			for i, u := range ups {
				names = append(names, u.Name)
				data, err := os.ReadFile(u.Path)
				if err != nil || int64(len(data)) != u.Size || filepath.Base(u.Path) != u.Name || !strings.HasPrefix(u.Path, s.cfg.Dir+"/uploads/") {
					t.Fatalf("upload %d %+v: %q %v", i, u, data, err)
				}
				total += u.Size
			}
			if strings.Join(names, "|") != strings.Join(tc.want, "|") {
				t.Fatalf("names %q, want %q", names, tc.want)
			}
			if s.Used() != total {
				t.Fatalf("used %d, want %d", s.Used(), total)
			}
		})
	}
}

// completed writes a finished download's file as Chromium would.
func completed(t *testing.T, s *Store, id, name, data string) browser.Download {
	t.Helper()
	path := filepath.Join(s.DownloadDir(), id)
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return browser.Download{ID: id, Name: name, State: browser.DownloadCompleted, Path: path, Total: int64(len(data)), Received: int64(len(data))}
}

func TestDownloads(t *testing.T) {
	s, clk := newStore(t, 10)
	if err := s.Downloaded(browser.Download{ID: "g0", State: browser.DownloadInProgress}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Open("g0"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("an unfinished download opens: %v", err)
	}
	if err := s.Downloaded(completed(t, s, "g1", "../report.csv", "a,b\n")); err != nil {
		t.Fatal(err)
	}
	f, d, err := s.Open("g1")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(f)
	f.Close()
	if string(data) != "a,b\n" || d.Name != "report.csv" || s.Used() != 4 {
		t.Fatalf("download %q %+v, used %d", data, d, s.Used())
	}
	if got := s.Downloads(); len(got) != 1 || got[0].ID != "g1" || got[0].Name != "report.csv" || got[0].Size != 4 ||
		!got[0].Expires.Equal(clk.Now().Add(time.Hour)) {
		t.Fatalf("listed %+v", got)
	}
	// Over the limit: the file goes.
	big := completed(t, s, "g2", "big", "0123456789")
	if err := s.Downloaded(big); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("over the limit: %v", err)
	}
	if _, err := os.Stat(big.Path); !os.IsNotExist(err) {
		t.Fatalf("the refused download stays: %v", err)
	}
	// A path the browser should never give is refused.
	if err := s.Downloaded(browser.Download{ID: "g3", State: browser.DownloadCompleted, Path: "/etc/passwd"}); err == nil {
		t.Fatal("a download outside the folder was taken")
	}
	// Kept for KeepFor, then gone.
	clk.Advance(time.Hour - time.Nanosecond)
	if _, _, err := s.Open("g1"); err != nil {
		t.Fatalf("before KeepFor: %v", err)
	}
	clk.Advance(time.Nanosecond)
	if _, _, err := s.Open("g1"); !errors.Is(err, ErrNotFound) || s.Used() != 0 {
		t.Fatalf("after KeepFor: %v, used %d", err, s.Used())
	}
	if got := filesIn(t, s.DownloadDir()); len(got) != 0 {
		t.Fatalf("expired download stays: %v", got)
	}
	if got := s.Downloads(); len(got) != 0 {
		t.Fatalf("expired download listed: %+v", got)
	}
}

func TestDiscard(t *testing.T) {
	s, _ := newStore(t, 100)
	ups, err := s.SaveUploads(body(t, part{"f", "a", "xyz"}, part{"f", "b", "12"}))
	if err != nil {
		t.Fatal(err)
	}
	s.Discard(ups)
	if got := filesIn(t, s.cfg.Dir); len(got) != 0 || s.Used() != 0 {
		t.Fatalf("discarded uploads stay: %v, %d bytes counted", got, s.Used())
	}
}

func TestRemove(t *testing.T) {
	s, _ := newStore(t, 100)
	if _, err := s.SaveUploads(body(t, part{"f", "a", "x"})); err != nil {
		t.Fatal(err)
	}
	if err := s.Downloaded(completed(t, s, "g1", "d", "y")); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.cfg.Dir); !os.IsNotExist(err) {
		t.Fatalf("the folder stays: %v", err)
	}
	if _, err := s.SaveUploads(body(t, part{"f", "a", "x"})); !errors.Is(err, ErrRemoved) {
		t.Fatalf("upload after Remove: %v", err)
	}
	if _, _, err := s.Open("g1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("download after Remove: %v", err)
	}
}
