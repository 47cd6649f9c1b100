package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

const sessionAnswer = `{"id":"s1abc","app":"shop","instanceId":"w1.i1","browserId":"b1",
 "cdpUrl":"ws://cb.test/shop/a/w1.i1/b/b1/cdp?ticket=T","liveUrl":"http://cb.test/shop/a/w1.i1/b/b1",
 "createdAt":"2024-05-01T10:00:00Z","expiresAt":"2024-05-01T10:10:00Z","owner":"automation",
 "timeout":"10m0s","idleTimeout":"5m0s","keepAlive":"30s","viewport":{"width":1280,"height":720}}`

// TestSessionsCommands runs every sessions command against a fake API and
// checks the request it sends and what it prints.
func TestSessionsCommands(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		method  string
		path    string
		query   string
		body    string // JSON, "" = no body expected
		status  int
		header  map[string]string
		answer  string
		wantOut []string
		wantErr []string
	}{
		{
			name:   "create with every option",
			args:   []string{"sessions", "create", "--app", "/shop", "--timeout", "10m", "--idle-timeout", "90s", "--keep-alive", "30s", "--width", "1280", "--height", "720"},
			method: "POST", path: "/api/v1/sessions",
			body:   `{"app":"shop","timeout":"10m0s","idleTimeout":"1m30s","keepAlive":"30s","viewport":{"width":1280,"height":720}}`,
			status: 201, answer: sessionAnswer,
			wantOut: []string{"session", "s1abc", "/shop", "ws://cb.test/shop/a/w1.i1/b/b1/cdp?ticket=T", "http://cb.test/shop/a/w1.i1/b/b1",
				"2024-05-01 ", "10m0s", "1280x720", "automation"},
		},
		{
			name:   "create with the defaults, CDP URL only",
			args:   []string{"sessions", "create", "--app", "shop", "--cdp-url"},
			method: "POST", path: "/api/v1/sessions", body: `{"app":"shop"}`,
			status: 201, answer: sessionAnswer,
			wantOut: []string{"ws://cb.test/shop/a/w1.i1/b/b1/cdp?ticket=T\n"},
		},
		{
			name:   "create, raw JSON",
			args:   []string{"sessions", "create", "--app", "shop", "--json"},
			method: "POST", path: "/api/v1/sessions", body: `{"app":"shop"}`,
			status: 201, answer: sessionAnswer, wantOut: []string{`"cdpUrl":"ws://cb.test`},
		},
		{
			name:   "create over the maximum",
			args:   []string{"sessions", "create", "--app", "shop"},
			method: "POST", path: "/api/v1/sessions", body: `{"app":"shop"}`,
			status: 429, header: map[string]string{"Retry-After": "540"},
			answer:  `{"status":429,"error":"at most 10 automation sessions may be open at once per principal"}`,
			wantErr: []string{"429", "at most 10 automation sessions", "retry after 540s"},
		},
		{
			name:   "create refused with a field",
			args:   []string{"sessions", "create", "--app", "nope"},
			method: "POST", path: "/api/v1/sessions", body: `{"app":"nope"}`,
			status: 404, answer: `{"status":404,"error":"app: no application is mounted at /nope","field":"app"}`,
			wantErr: []string{"404", "no application is mounted at /nope", `field "app"`},
		},
		{
			name:   "create with the jobs token",
			args:   []string{"sessions", "create", "--app", "shop"},
			method: "POST", path: "/api/v1/sessions", body: `{"app":"shop"}`,
			status: 403, answer: `{"status":403,"error":"the jobs token may only submit and read jobs, renders and monitors; automation sessions need the automation token"}`,
			wantErr: []string{"403", "automation sessions need the automation token"},
		},
		{
			name:   "list",
			args:   []string{"sessions", "list", "--app", "/shop"},
			method: "GET", path: "/api/v1/sessions", query: "app=shop",
			status: 200, answer: `{"sessions":[` + sessionAnswer + `]}`,
			wantOut: []string{"ID", "EXPIRES", "s1abc", "/shop", "automation", "w1.i1", "b1", "2024-05-01"},
		},
		{
			name:   "list, none",
			args:   []string{"sessions", "list"},
			method: "GET", path: "/api/v1/sessions",
			status: 200, answer: `{"sessions":[]}`, wantOut: []string{"ID", "EXPIRES"},
		},
		{
			name:   "show",
			args:   []string{"sessions", "show", "s1abc"},
			method: "GET", path: "/api/v1/sessions/s1abc",
			status: 200, answer: sessionAnswer, wantOut: []string{"cdp url", "ws://cb.test/shop/a/w1.i1/b/b1/cdp?ticket=T", "keep alive", "30s"},
		},
		{
			name:   "show, CDP URL only",
			args:   []string{"sessions", "show", "s1abc", "--cdp-url"},
			method: "GET", path: "/api/v1/sessions/s1abc",
			status: 200, answer: sessionAnswer, wantOut: []string{"ws://cb.test/shop/a/w1.i1/b/b1/cdp?ticket=T\n"},
		},
		{
			name:   "show unknown",
			args:   []string{"sessions", "show", "nope"},
			method: "GET", path: "/api/v1/sessions/nope",
			status: 404, answer: `{"status":404,"error":"no session nope"}`, wantErr: []string{"404", "no session nope"},
		},
		{
			name:   "delete",
			args:   []string{"sessions", "delete", "s1abc"},
			method: "DELETE", path: "/api/v1/sessions/s1abc",
			status: 204, wantOut: []string{"session s1abc: deleted"},
		},
		{
			name:   "delete with the worker away",
			args:   []string{"sessions", "delete", "s1abc"},
			method: "DELETE", path: "/api/v1/sessions/s1abc",
			status: 503, header: map[string]string{"Retry-After": "5"},
			answer:  `{"status":503,"error":"closing the instance w1.i1 of session s1abc: the worker w1 of instance w1.i1 is not connected"}`,
			wantErr: []string{"503", "not connected", "retry after 5s"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				if r.Method != tc.method || r.URL.Path != tc.path || r.URL.RawQuery != tc.query {
					t.Errorf("request %s %s?%s, want %s %s?%s", r.Method, r.URL.Path, r.URL.RawQuery, tc.method, tc.path, tc.query)
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
			out, _, err := runCLI(t, srv.URL, tc.args...)
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
		})
	}
}

// TestSessionsFlagValidation: bad input is refused before asking the
// master, naming the flag or argument.
func TestSessionsFlagValidation(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the master was asked: %s %s", r.Method, r.URL)
		w.WriteHeader(500)
	}))
	defer srv.Close()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sessions", "create"}, "--app: required"},
		{[]string{"sessions", "create", "--app", "/"}, "--app: required"},
		{[]string{"sessions", "create", "shop"}, "takes no arguments (the app is --app)"},
		{[]string{"sessions", "create", "--app", "shop", "--timeout", "-1m"}, "--timeout: must not be negative"},
		{[]string{"sessions", "create", "--app", "shop", "--timeout", "25h"}, "--timeout: must be at most 24h0m0s"},
		{[]string{"sessions", "create", "--app", "shop", "--timeout", "500ms"}, "--timeout: must be at least 1s"},
		{[]string{"sessions", "create", "--app", "shop", "--idle-timeout", "-5s"}, "--idle-timeout: must not be negative"},
		{[]string{"sessions", "create", "--app", "shop", "--keep-alive", "48h"}, "--keep-alive: must be at most 24h0m0s"},
		{[]string{"sessions", "create", "--app", "shop", "--width", "800"}, "--height: must be given with --width"},
		{[]string{"sessions", "create", "--app", "shop", "--height", "800"}, "--width: must be given with --height"},
		{[]string{"sessions", "create", "--app", "shop", "--width", "50", "--height", "800"}, "--width: must be between 100 and 4096, got 50"},
		{[]string{"sessions", "create", "--app", "shop", "--width", "800", "--height", "5000"}, "--height: must be between 100 and 4096, got 5000"},
		{[]string{"sessions", "show"}, "sessions show needs one argument: the session id"},
		{[]string{"sessions", "delete", "a", "b"}, "sessions delete needs one argument"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, _, err := runCLI(t, srv.URL, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
