package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// runCLI runs the binary's command tree against a master at base with
// token "tok" and returns what it printed.
func runCLI(t *testing.T, base string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	a := app()
	var out, errOut bytes.Buffer
	a.Writer, a.ErrWriter = &out, &errOut
	full := append([]string{"cloudbrowser"}, args...)
	full = append(full, "--master", base, "--token", "tok")
	err = a.Run(context.Background(), full)
	return out.String(), errOut.String(), err
}

// jsonEqual compares two JSON texts by value.
func jsonEqual(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("request body %q is not JSON: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want %q: %v", want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("request body = %s, want %s", got, want)
	}
}

const showJob = `{"id":"j1","state":"failed","reason":"3 attempts failed","class":"example.com","created":"2024-05-01T10:00:00Z",
 "started":"2024-05-01T10:00:01Z","finished":"2024-05-01T10:00:09Z","worker":"w-2","tries":2,
 "attempts":[{"n":1,"worker":"w-1","started":"2024-05-01T10:00:01Z","ended":"2024-05-01T10:00:04Z","err":"browser crashed"},
             {"n":2,"worker":"w-2","started":"2024-05-01T10:00:05Z","ended":"2024-05-01T10:00:09Z","err":"lease timed out"}],
 "spec":{"kind":"render","url":"https://example.com/","format":"pdf"},
 "result":{"Status":200,"FinalURL":"https://example.com/home","Title":"Example","Hash":"abc123","ContentType":"application/pdf",
           "Timings":{"LeaseMs":5,"NavigateMs":1200,"WaitMs":30,"CaptureMs":400,"TotalMs":1635}}}`

// TestJobsCommands runs every jobs command against a fake API and checks
// the request it sends and what it prints.
func TestJobsCommands(t *testing.T) {
	dir := t.TempDir()
	batchFile := filepath.Join(dir, "jobs.json")
	batch := `[{"kind":"check","url":"https://a.example/"},{"kind":"render","url":"https://b.example/","format":"png"}]`
	if err := os.WriteFile(batchFile, []byte(batch), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		args        []string
		method      string
		path        string
		query       string // exact encoded query, "" = none
		body        string // JSON, "" = no body expected
		status      int
		header      map[string]string
		answer      string
		wantOut     []string
		wantErrOut  []string
		wantErr     []string // all substrings of the error; nil = success
		wantFile    string   // file (under dir) and its content
		wantFileOut string
	}{
		{
			name: "render to a file",
			args: []string{"render", "https://example.com/a?b=1", "-o", filepath.Join(dir, "out.jpg"), "--format", "jpeg", "--quality", "80",
				"--width", "800", "--height", "600", "--full-page", "--wait-selector", "#main", "--wait-network-idle", "--wait-delay", "500ms",
				"--timeout", "30s", "--max-age", "1h", "--no-cache", "--ignore-robots", "--app", "/shop"},
			method: "GET", path: "/api/v1/render",
			query:  "app=shop&format=jpeg&fullPage=true&height=600&ignoreRobots=true&maxAgeMs=3600000&noCache=true&quality=80&timeoutMs=30000&url=https%3A%2F%2Fexample.com%2Fa%3Fb%3D1&waitDelayMs=500&waitNetworkIdle=true&waitSelector=%23main&width=800",
			status: 200, header: map[string]string{"X-Cache": "MISS", "Content-Type": "image/jpeg"}, answer: "JPEGDATA",
			wantOut:  []string{"cache miss, 8 bytes, image/jpeg", "out.jpg"},
			wantFile: "out.jpg", wantFileOut: "JPEGDATA",
		},
		{
			name:   "render to stdout, cache hit",
			args:   []string{"render", "https://example.com/", "-o", "-"},
			method: "GET", path: "/api/v1/render", query: "url=https%3A%2F%2Fexample.com%2F",
			status: 200, header: map[string]string{"X-Cache": "HIT", "Age": "42"}, answer: "PNG",
			wantOut: []string{"PNG"}, wantErrOut: []string{"cache hit, 3 bytes", "age 42s"},
		},
		{
			name:   "render refused with a field",
			args:   []string{"render", "https://example.com/", "-o", filepath.Join(dir, "never.png")},
			method: "GET", path: "/api/v1/render", query: "url=https%3A%2F%2Fexample.com%2F",
			status: 400, answer: `{"status":400,"error":"address class private is not allowed","field":"url"}`,
			wantErr: []string{"400 Bad Request", "address class private is not allowed", `field "url"`},
		},
		{
			name:   "render rate limited",
			args:   []string{"render", "https://example.com/", "-o", "-"},
			method: "GET", path: "/api/v1/render", query: "url=https%3A%2F%2Fexample.com%2F",
			status: 429, header: map[string]string{"Retry-After": "7"}, answer: `{"status":429,"error":"too many jobs"}`,
			wantErr: []string{"429", "too many jobs", "retry after 7s"},
		},
		{
			name:   "render timed out",
			args:   []string{"render", "https://example.com/", "-o", "-"},
			method: "GET", path: "/api/v1/render", query: "url=https%3A%2F%2Fexample.com%2F",
			status: 504, answer: `{"status":504,"error":"render timed out after 30s"}`,
			wantErr: []string{"504", "render timed out after 30s"},
		},
		{
			name:   "submit a batch of checks",
			args:   []string{"jobs", "submit", "--kind", "check", "--subresources", "https://a.example/", "https://b.example/x"},
			method: "POST", path: "/api/v1/jobs",
			body:   `[{"kind":"check","url":"https://a.example/","subresources":true},{"kind":"check","url":"https://b.example/x","subresources":true}]`,
			status: 202, answer: `{"jobs":[{"id":"j1","state":"queued","spec":{"kind":"check","url":"https://a.example/"}},
				{"id":"j2","state":"disallowed","reason":"robots.txt disallows /x","spec":{"kind":"check","url":"https://b.example/x"}}]}`,
			wantOut: []string{"j1\tqueued\thttps://a.example/", "j2\tdisallowed (robots.txt disallows /x)\thttps://b.example/x"},
		},
		{
			name:   "submit one render served from the cache",
			args:   []string{"jobs", "submit", "https://a.example/", "--format", "pdf"},
			method: "POST", path: "/api/v1/jobs", body: `{"kind":"render","url":"https://a.example/","format":"pdf"}`,
			status: 200, header: map[string]string{"X-Cache": "HIT"}, answer: `{"id":"j3","state":"done","spec":{"kind":"render","url":"https://a.example/"}}`,
			wantOut: []string{"j3\tdone (cache hit)"},
		},
		{
			name:   "submit joins a render being generated",
			args:   []string{"jobs", "submit", "https://a.example/"},
			method: "POST", path: "/api/v1/jobs", body: `{"kind":"render","url":"https://a.example/"}`,
			status: 202, answer: `{"id":"j4","state":"working","generatingSince":"2024-05-01T10:00:00Z","spec":{"kind":"render","url":"https://a.example/"}}`,
			wantOut: []string{"j4\tworking (same render already generating since 2024-05-01"},
		},
		{
			name:   "submit a file",
			args:   []string{"jobs", "submit", "--file", batchFile},
			method: "POST", path: "/api/v1/jobs", body: batch,
			status: 202, answer: `{"jobs":[{"id":"j5","state":"queued"},{"id":"j6","state":"queued"}]}`,
			wantOut: []string{"j5\tqueued", "j6\tqueued"},
		},
		{
			name:   "submit refused with a field",
			args:   []string{"jobs", "submit", "https://a.example/"},
			method: "POST", path: "/api/v1/jobs", body: `{"kind":"render","url":"https://a.example/"}`,
			status: 403, answer: `{"status":403,"error":"this token may not submit jobs"}`,
			wantErr: []string{"403 Forbidden", "this token may not submit jobs"},
		},
		{
			name:   "list",
			args:   []string{"jobs", "list", "--state", "failed", "--limit", "5"},
			method: "GET", path: "/api/v1/jobs", query: "limit=5&state=failed",
			status: 200, answer: `{"jobs":[{"id":"j1","state":"failed","reason":"3 attempts failed","class":"example.com","tries":3,
				"worker":"w-1","spec":{"kind":"render","url":"https://example.com/"}}],"next":"c42"}`,
			wantOut: []string{"ID", "STATE", "j1", "failed", "render", "https://example.com/", "example.com", "3 attempts failed", "next: c42"},
		},
		{
			name:   "list after a cursor",
			args:   []string{"jobs", "list", "--after", "c42"},
			method: "GET", path: "/api/v1/jobs", query: "after=c42",
			status: 200, answer: `{"jobs":[]}`, wantOut: []string{"ID"},
		},
		{
			name:   "show",
			args:   []string{"jobs", "show", "j1"},
			method: "GET", path: "/api/v1/jobs/j1",
			status: 200, answer: showJob,
			wantOut: []string{"3 attempts failed", "https://example.com/home", "Example", "application/pdf", "abc123",
				"lease 5 ms, navigate 1200 ms, wait 30 ms, capture 400 ms, total 1635 ms",
				"ATTEMPT", "browser crashed", "lease timed out", "w-1", "2024-05-01"},
		},
		{
			name:   "show unknown",
			args:   []string{"jobs", "show", "nope"},
			method: "GET", path: "/api/v1/jobs/nope",
			status: 404, answer: `{"error":"no job nope"}`,
			wantErr: []string{"404", "no job nope"},
		},
		{
			name:   "result to a file",
			args:   []string{"jobs", "result", "j1", "-o", filepath.Join(dir, "r.pdf")},
			method: "GET", path: "/api/v1/jobs/j1/result",
			status: 200, header: map[string]string{"Content-Type": "application/pdf"}, answer: "%PDF-1.7",
			wantOut: []string{"8 bytes, application/pdf"}, wantFile: "r.pdf", wantFileOut: "%PDF-1.7",
		},
		{
			name:   "result not finished",
			args:   []string{"jobs", "result", "j1"},
			method: "GET", path: "/api/v1/jobs/j1/result",
			status: 409, answer: `{"status":409,"error":"job j1 is working"}`,
			wantErr: []string{"409", "job j1 is working"},
		},
		{
			name:   "cancel",
			args:   []string{"jobs", "cancel", "j1"},
			method: "DELETE", path: "/api/v1/jobs/j1",
			status: 200, answer: `{"id":"j1","state":"cancelled"}`, wantOut: []string{"j1: cancelled"},
		},
		{
			name:   "cancel finished",
			args:   []string{"jobs", "cancel", "j1"},
			method: "DELETE", path: "/api/v1/jobs/j1",
			status: 409, answer: `{"status":409,"error":"job j1 already finished (done)"}`,
			wantErr: []string{"409", "already finished"},
		},
		{
			name:   "monitor add",
			args:   []string{"monitor", "add", "https://a.example/", "--every", "5m"},
			method: "POST", path: "/api/v1/monitors", body: `{"kind":"check","url":"https://a.example/","interval":"5m0s"}`,
			status: 201, answer: `{"id":"m1","spec":{"kind":"check","url":"https://a.example/"},"intervalMs":300000,"nextRun":"2024-05-01T10:05:00Z"}`,
			wantOut: []string{"monitor m1: check https://a.example/ every 5m0s, next run 2024-05-01"},
		},
		{
			name:   "monitor add render",
			args:   []string{"monitor", "add", "https://a.example/", "--every", "1h", "--kind", "render", "--format", "png", "--app", "shop"},
			method: "POST", path: "/api/v1/monitors", body: `{"kind":"render","url":"https://a.example/","format":"png","app":"shop","interval":"1h0m0s"}`,
			status: 201, answer: `{"id":"m2","spec":{"kind":"render","url":"https://a.example/"},"intervalMs":3600000}`,
			wantOut: []string{"monitor m2: render https://a.example/ every 1h0m0s"},
		},
		{
			name:   "monitor add refused",
			args:   []string{"monitor", "add", "https://a.example/", "--every", "5m"},
			method: "POST", path: "/api/v1/monitors", body: `{"kind":"check","url":"https://a.example/","interval":"5m0s"}`,
			status: 400, answer: `{"status":400,"error":"too many monitors","field":"interval"}`,
			wantErr: []string{"too many monitors", `field "interval"`},
		},
		{
			name:   "monitor list",
			args:   []string{"monitor", "list", "--state", "unavailable"},
			method: "GET", path: "/api/v1/monitors", query: "state=unavailable",
			status: 200, answer: `{"monitors":[{"id":"m1","spec":{"kind":"check","url":"https://a.example/"},"intervalMs":300000,
				"state":"unavailable","reason":"HTTP 503","lastCheck":"2024-05-01T10:00:00Z","lastStateChange":"2024-05-01T09:00:00Z","checks":12}]}`,
			wantOut: []string{"LAST CHECK", "LAST CHANGE", "m1", "unavailable", "https://a.example/", "5m0s", "HTTP 503", "2024-05-01"},
		},
		{
			name:   "monitor list by last check",
			args:   []string{"monitor", "list", "--checked-after", "1h", "--changed-before", "2026-11-27T00:00:00Z", "--sort", "lastCheck"},
			method: "GET", path: "/api/v1/monitors", query: "changedBefore=2026-11-27T00%3A00%3A00Z&checkedAfter=1h&sort=lastCheck",
			status: 200, answer: `{"monitors":[]}`,
			wantOut: []string{"LAST CHECK"},
		},
		{
			name:   "monitor remove",
			args:   []string{"monitor", "remove", "m1"},
			method: "DELETE", path: "/api/v1/monitors/m1",
			status: 200, answer: `{}`, wantOut: []string{"monitor m1: removed"},
		},
		{
			name:   "monitor remove unknown",
			args:   []string{"monitor", "remove", "m9"},
			method: "DELETE", path: "/api/v1/monitors/m9",
			status: 404, answer: `{"error":"no monitor m9"}`, wantErr: []string{"404", "no monitor m9"},
		},
		{
			name:   "cache purge",
			args:   []string{"cache", "purge", "https://a.example/"},
			method: "POST", path: "/api/v1/cache/purge", body: `{"url":"https://a.example/"}`,
			status: 200, answer: `{"purged":3}`, wantOut: []string{"purged 3 cached renders of https://a.example/"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				if r.Method != tc.method || r.URL.Path != tc.path {
					t.Errorf("request %s %s, want %s %s", r.Method, r.URL.Path, tc.method, tc.path)
				}
				if r.URL.RawQuery != tc.query {
					t.Errorf("query %q, want %q", r.URL.RawQuery, tc.query)
				}
				if got := r.Header.Get("Authorization"); got != "Bearer tok" {
					t.Errorf("Authorization %q", got)
				}
				body, _ := io.ReadAll(r.Body)
				if tc.body == "" {
					if len(body) != 0 {
						t.Errorf("unexpected body %q", body)
					}
				} else {
					if ct := r.Header.Get("Content-Type"); ct != "application/json" {
						t.Errorf("Content-Type %q", ct)
					}
					jsonEqual(t, body, tc.body)
				}
				for k, v := range tc.header {
					w.Header().Set(k, v)
				}
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.answer)
			}))
			defer srv.Close()
			out, errOut, err := runCLI(t, srv.URL, tc.args...)
			if calls.Load() != 1 {
				t.Errorf("%d requests, want 1", calls.Load())
			}
			if tc.wantErr == nil && err != nil {
				t.Fatalf("error: %v", err)
			}
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("no error, want %q (output %q)", tc.wantErr, out)
				}
				for _, s := range tc.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
			}
			for _, s := range tc.wantOut {
				if !strings.Contains(out, s) {
					t.Errorf("output does not contain %q:\n%s", s, out)
				}
			}
			for _, s := range tc.wantErrOut {
				if !strings.Contains(errOut, s) {
					t.Errorf("stderr does not contain %q:\n%s", s, errOut)
				}
			}
			if tc.wantFile != "" {
				b, err := os.ReadFile(filepath.Join(dir, tc.wantFile))
				if err != nil || string(b) != tc.wantFileOut {
					t.Errorf("%s = %q, %v; want %q", tc.wantFile, b, err, tc.wantFileOut)
				}
			}
		})
	}
	// A refused render must not leave a file behind.
	if _, err := os.Stat(filepath.Join(dir, "never.png")); !os.IsNotExist(err) {
		t.Errorf("never.png exists after a refused render: %v", err)
	}
}

// TestJobsFlagValidation: bad input is refused before asking the master,
// with a message naming the flag, argument or file entry.
func TestJobsFlagValidation(t *testing.T) {
	dir := t.TempDir()
	badFile := filepath.Join(dir, "bad.json")
	os.WriteFile(badFile, []byte(`[{"kind":"check","url":"https://a.example/"},{"kind":"render","url":"https://b.example/","width":-1,"height":5}]`), 0o644)
	notJSON := filepath.Join(dir, "notjson.json")
	os.WriteFile(notJSON, []byte(`{"kind":`), 0o644)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the master was asked: %s %s", r.Method, r.URL)
		w.WriteHeader(500)
	}))
	defer srv.Close()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"render", "https://a.example/"}, "-o/--output: required"},
		{[]string{"render", "-o", "-"}, "render needs one argument"},
		{[]string{"render", "ftp://a.example/", "-o", "-"}, `URL: "ftp://a.example/" must be an absolute http:// or https:// URL`},
		{[]string{"render", "example.com", "-o", "-"}, "URL: "},
		{[]string{"render", "https://a.example/", "-o", "-", "--format", "gif"}, `--format: must be png, jpeg, pdf, html or text, not "gif"`},
		{[]string{"render", "https://a.example/", "-o", "-", "--width", "800"}, "--height: must be given with the width"},
		{[]string{"render", "https://a.example/", "-o", "-", "--height", "800"}, "--width: must be given with the height"},
		{[]string{"render", "https://a.example/", "-o", "-", "--width", "-5", "--height", "10"}, "--width: must be between 1 and 16384"},
		{[]string{"render", "https://a.example/", "-o", "-", "--width", "20000", "--height", "10"}, "--width: must be between 1 and 16384"},
		{[]string{"render", "https://a.example/", "-o", "-", "--quality", "80"}, "--quality: only for the jpeg format"},
		{[]string{"render", "https://a.example/", "-o", "-", "--format", "jpeg", "--quality", "101"}, "--quality: must be between 1 and 100"},
		{[]string{"render", "https://a.example/", "-o", "-", "--format", "pdf", "--full-page"}, "--full-page: only for the png and jpeg formats"},
		{[]string{"render", "https://a.example/", "-o", "-", "--timeout", "-1s"}, "--timeout: must be at least 1ms"},
		{[]string{"render", "https://a.example/", "-o", "-", "--wait-delay", "1us"}, "--wait-delay: must be at least 1ms"},
		{[]string{"jobs", "submit"}, "jobs submit needs at least one URL"},
		{[]string{"jobs", "submit", "--kind", "scrape", "https://a.example/"}, `--kind: must be render or check, not "scrape"`},
		{[]string{"jobs", "submit", "--kind", "check", "--format", "png", "https://a.example/"}, "--format: only for renders"},
		{[]string{"jobs", "submit", "--kind", "check", "--ignore-robots", "https://a.example/"}, "--ignore-robots: only for renders"},
		{[]string{"jobs", "submit", "--subresources", "https://a.example/"}, "--subresources: only for checks"},
		{[]string{"jobs", "submit", "https://a.example/", "https://"}, `URL: "https://" must be an absolute`},
		{[]string{"jobs", "submit", "--file", badFile}, "job 1: width: must be between 1 and 16384"},
		{[]string{"jobs", "submit", "--file", notJSON}, "not a JSON job or array of jobs"},
		{[]string{"jobs", "submit", "--file", filepath.Join(dir, "missing.json")}, "--file: "},
		{[]string{"jobs", "submit", "--file", badFile, "https://a.example/"}, "--file: give either --file or URLs"},
		{[]string{"jobs", "list", "--state", "running"}, `--state: must be one of queued, working, done, failed, disallowed, cancelled, not "running"`},
		{[]string{"jobs", "list", "--limit", "-1"}, "--limit: must be at least 1"},
		{[]string{"jobs", "show"}, "jobs show needs one argument: the job id"},
		{[]string{"jobs", "cancel", "a", "b"}, "jobs cancel needs one argument"},
		{[]string{"monitor", "add", "https://a.example/"}, "--every: must be at least 10s"},
		{[]string{"monitor", "add", "https://a.example/", "--every", "5s"}, "--every: must be at least 10s (got 5s)"},
		{[]string{"monitor", "add", "https://a.example/", "--every", "5m", "--ignore-robots"}, "--ignore-robots: not for monitors"},
		{[]string{"monitor", "add", "https://a.example/", "--every", "5m", "--kind", "ping"}, "--kind: must be render or check"},
		{[]string{"monitor", "list", "--state", "down"}, `--state: must be one of ok, changed, unavailable, error, not "down"`},
		{[]string{"monitor", "remove"}, "monitor remove needs one argument: the monitor id"},
		{[]string{"cache", "purge", "not a url"}, "URL: "},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, _, err := runCLI(t, srv.URL, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestStatusJobs(t *testing.T) {
	st := &wire.ClusterStatus{MasterID: "m-1", Jobs: &wire.JobsStatus{
		Workers:  []wire.JobSlots{{Worker: "w-1", Slots: 4, Used: 3, Free: 1}, {Worker: "w-2", Slots: 2, Used: 0, Free: 2}},
		Queued:   map[string]int{"example.com": 7, "leftover": 2},
		Working:  3,
		Outcomes: map[string]int64{"done": 40, "failed": 2},
		Monitors: map[string]int{"ok": 5, "unavailable": 1, "": 2},
		Changes: []wire.MonitorChange{{Monitor: "m1", URL: "https://a.example/", From: "ok", To: "unavailable",
			Reason: "HTTP 503", At: time.Now().Add(-time.Minute).Format(time.RFC3339)}},
		Cache: wire.CacheStatus{Entries: 10, Bytes: 3 << 20, Hits: 30, Misses: 10, Evictions: 1},
	}}
	var b bytes.Buffer
	printStatus(&b, st)
	out := b.String()
	for _, re := range []string{
		`JOB SLOTS\s+SLOTS\s+USED\s+FREE`, `w-1\s+4\s+3\s+1`, `w-2\s+2\s+0\s+2`,
		`example\.com\s+7`, `leftover\s+2`, `\(working\)\s+3`,
		`job outcomes\s+done=40,failed=2`, `monitors\s+ok=5,unavailable=1,unchecked=2`,
		`render cache\s+10 entries, 3\.0 MiB, hits 30, misses 10 \(hit ratio 75%\), evictions 1`,
		`m1\s+https://a\.example/\s+ok\s+unavailable\s+HTTP 503\s+.*\(1m\d+s ago\)`,
	} {
		if !regexpMatch(re, out) {
			t.Errorf("status output does not match %q:\n%s", re, out)
		}
	}
	b.Reset()
	st.Jobs = nil
	printStatus(&b, st)
	if strings.Contains(b.String(), "JOB SLOTS") {
		t.Errorf("jobs printed without jobs status:\n%s", b.String())
	}
}

func regexpMatch(re, s string) bool { return regexp.MustCompile(re).MatchString(s) }

func TestStatusFrameSize(t *testing.T) {
	for _, tc := range []struct {
		drawn, graded float64
		want          string
	}{
		{0, 0, "100%"},
		{0, 0.75, "75%"},
		{0.5, 1, "50% (drawn at 50%)"},
		{0.5, 0.5, "25% (drawn at 50%)"},
	} {
		w := wire.WorkerStatus{WorkerInfo: wire.WorkerInfo{ID: "w-1", RenderScale: tc.drawn}, Load: wire.Load{FrameScale: tc.graded}}
		var b bytes.Buffer
		printStatus(&b, &wire.ClusterStatus{MasterID: "m-1", Workers: []wire.WorkerStatus{w}})
		if !regexpMatch(`FRAME SIZE\n.*w-1 .*\s`+regexp.QuoteMeta(tc.want)+`\n`, b.String()) {
			t.Errorf("drawn %v graded %v: want frame size %q in\n%s", tc.drawn, tc.graded, tc.want, b.String())
		}
	}
}
