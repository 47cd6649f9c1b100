package worker

import (
	"bytes"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/httpserve"
)

// TestFileDoor: the Browser URL's files/ path takes uploads and drops from
// those who may drive, serves finished downloads to them, and answers
// everything else with a status and a message the engine shows.
func TestFileDoor(t *testing.T) {
	f := newHubFixture(t, httpserve.RoleReader)
	fb := f.rt.last()
	f.dial(t, true) // the hub follows the browser: its file door is open
	testutil.Eventually(t, 10*time.Second, testutil.Cond("downloads set up", func() bool { return fb.DownloadDir() != "" }))
	dl := filepath.Join(fb.DownloadDir(), "g1")
	if err := os.WriteFile(dl, []byte("a,b\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fb.Download(browser.Download{ID: "g1", Name: "report.csv", State: browser.DownloadCompleted, Path: dl})

	upload := func(name, data string) (io.Reader, string) {
		var buf bytes.Buffer
		w := multipart.NewWriter(&buf)
		pw, _ := w.CreateFormFile("file", name)
		io.WriteString(pw, data)
		w.Close()
		return &buf, w.FormDataContentType()
	}
	tests := []struct {
		name       string
		owner      bool
		method     string
		path       string
		body       string // "" = a multipart upload of hello.txt
		ctype      string
		crossSite  bool
		wantStatus int
		wantBody   string
	}{
		{"upload", true, "POST", "files/up/1", "", "", false, 204, ""},
		{"answered twice", true, "POST", "files/up/1", "", "", false, 409, "The page no longer waits"},
		{"no such picker", true, "POST", "files/up/x", "", "", false, 404, "No such file picker."},
		{"not multipart", true, "POST", "files/up/2", "hello", "text/plain", false, 400, "multipart/form-data"},
		{"drop without a place", true, "POST", "files/drop?x=a", "", "", false, 400, "x and y"},
		{"drop", true, "POST", "files/drop?x=10&y=20", "", "", false, 204, ""},
		{"from another site", true, "POST", "files/up/3", "", "", true, 403, "own page"},
		{"download", true, "GET", "files/down/g1", "-", "", false, 200, "a,b\n"},
		{"no such download", true, "GET", "files/down/nope", "-", "", false, 404, "No such download"},
		{"wrong method", true, "DELETE", "files/down/g1", "-", "", false, 404, "nothing at this address"},
		{"read-only upload", false, "POST", "files/up/4", "", "", false, 403, "You may only watch"},
		{"read-only download", false, "GET", "files/down/g1", "-", "", false, 403, "You may only watch"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader
			ctype := tc.ctype
			switch tc.body {
			case "":
				body, ctype = upload("hello.txt", "hello")
			case "-":
			default:
				body = strings.NewReader(tc.body)
			}
			req, _ := http.NewRequest(tc.method, f.srv.URL+f.loc+"/"+tc.path, body)
			if ctype != "" {
				req.Header.Set("Content-Type", ctype)
			}
			if tc.owner {
				req.AddCookie(f.cookie)
			}
			if tc.crossSite {
				req.Header.Set("Sec-Fetch-Site", "cross-site")
				req.Header.Set("Origin", "http://evil.example")
			}
			resp, err := f.c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.wantStatus || !strings.Contains(string(got), tc.wantBody) {
				t.Fatalf("%s %s: %d %q, want %d with %q", tc.method, tc.path, resp.StatusCode, got, tc.wantStatus, tc.wantBody)
			}
			if tc.name == "download" && resp.Header.Get("Content-Disposition") != "attachment; filename=report.csv" {
				t.Fatalf("download served as %q", resp.Header.Get("Content-Disposition"))
			}
		})
	}
	paths, ok := fb.Chosen(1)
	if !ok || len(paths) != 1 {
		t.Fatalf("picker 1 got %v %v", paths, ok)
	}
	if data, err := os.ReadFile(paths[0]); err != nil || string(data) != "hello" || filepath.Base(paths[0]) != "hello.txt" {
		t.Fatalf("uploaded %s: %q %v", paths[0], data, err)
	}
	if _, ok := fb.Chosen(3); ok {
		t.Fatal("a cross-site upload reached the page")
	}
}
