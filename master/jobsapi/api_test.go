package jobsapi

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/auth"
	"github.com/cloudbrowser-go/cloudbrowser/master/jobs"
	"github.com/cloudbrowser-go/cloudbrowser/master/rendercache"
	"github.com/cloudbrowser-go/cloudbrowser/master/state"
)

func TestDecodeSpecs(t *testing.T) {
	tests := []struct {
		name      string
		body      string
		n         int
		batch     bool
		wantError string
	}{
		{"one job", `{"kind":"check","url":"http://a/"}`, 1, false, ""},
		{"array", `[{"kind":"check","url":"http://a/"},{"kind":"render","url":"http://b/"}]`, 2, true, ""},
		{"jobs object", `{"jobs":[{"kind":"check","url":"http://a/"}]}`, 1, true, ""},
		{"misspelt option", `{"kind":"render","url":"http://a/","fullPages":true}`, 0, false, "unknown field"},
		{"empty", ` `, 0, false, "required"},
		{"not JSON", `kind=check`, 0, false, "body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			specs, batch, err := decodeSpecs([]byte(tt.body))
			if tt.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantError) {
					t.Fatalf("err = %v, want %q", err, tt.wantError)
				}
				return
			}
			if err != nil || len(specs) != tt.n || batch != tt.batch {
				t.Fatalf("got %d specs, batch %v, err %v", len(specs), batch, err)
			}
		})
	}
}

func TestSpecFromQuery(t *testing.T) {
	tests := []struct {
		query string
		want  wire.JobSpec
		field string // "" = no error
	}{
		{"url=http://a/&format=pdf&width=800&height=600&fullPage=true&waitDelayMs=250&app=x",
			wire.JobSpec{Kind: wire.JobRender, URL: "http://a/", Format: "pdf", Width: 800, Height: 600, FullPage: true, WaitDelayMs: 250, App: "x"}, ""},
		{"url=http://a/&width=wide", wire.JobSpec{}, "width"},
		{"url=http://a/&timeoutMs=1.5s", wire.JobSpec{}, "timeoutMs"},
		{"url=http://a/&noCache=maybe", wire.JobSpec{}, "noCache"},
		{"url=http://a/&noCache=maybe&quality=high", wire.JobSpec{}, "quality"}, // the first bad field, in the spec's order
		{"url=http://a/&quality=40&maxAgeMs=5000&ignoreRobots=1&waitNetworkIdle=false",
			wire.JobSpec{Kind: wire.JobRender, URL: "http://a/", Quality: 40, MaxAgeMs: 5000, IgnoreRobots: true}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			got, err := specFromQuery(httptest.NewRequest("GET", "/api/v1/render?"+tt.query, nil))
			var fe *jobs.FieldError
			if tt.field != "" {
				if !errors.As(err, &fe) || fe.Field != tt.field {
					t.Fatalf("err = %v, want a field error naming %s", err, tt.field)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %+v, %v", got, err)
			}
		})
	}
}

func TestJobErrorStatus(t *testing.T) {
	tests := []struct {
		err        error
		status     int
		retryAfter string
	}{
		{&jobs.FieldError{Field: "url", Msg: "bad"}, http.StatusBadRequest, ""},
		{&jobs.QueueFullError{RetryAfter: 3 * time.Second}, http.StatusTooManyRequests, "3"},
		{jobs.ErrNotFound, http.StatusNotFound, ""},
		{jobs.ErrFinished, http.StatusConflict, ""},
		{errors.New("disk full"), http.StatusInternalServerError, ""},
	}
	for _, tt := range tests {
		w := httptest.NewRecorder()
		jobError(w, tt.err)
		if w.Code != tt.status || w.Header().Get("Retry-After") != tt.retryAfter {
			t.Errorf("%v: %d Retry-After %q, want %d %q", tt.err, w.Code, w.Header().Get("Retry-After"), tt.status, tt.retryAfter)
		}
	}
	w := httptest.NewRecorder()
	jobError(w, &jobs.FieldError{Field: "width", Msg: "too wide"})
	if !strings.Contains(w.Body.String(), `"field": "width"`) {
		t.Errorf("a 400 must name the field: %s", w.Body.String())
	}
}

// fakeHost knows principals by token and apps by name with the
// principals that may use each one's pool besides the admin.
type fakeHost struct {
	tokens map[string]auth.Principal
	apps   map[string][]string
}

func (h fakeHost) Check(r *http.Request, need auth.Role) (auth.Principal, *auth.Refusal) {
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if p, ok := h.tokens[tok]; ok {
		return p, nil
	}
	return auth.Principal{}, &auth.Refusal{Status: http.StatusUnauthorized, Msg: "invalid token"}
}

func (h fakeHost) AppExists(name string) bool {
	_, ok := h.apps[name]
	return ok
}

func (h fakeHost) MayUseApp(p auth.Principal, name string) bool {
	if p.Admin {
		return true
	}
	for _, u := range h.apps[name] {
		if u == p.Name {
			return true
		}
	}
	return false
}

func (fakeHost) PooledLogin(name string) bool { return name == "secret" }

// idleRunner has no worker: nothing is ever started.
type idleRunner struct{}

func (idleRunner) Run(context.Context, string, wire.JobRun) error {
	return errors.New("no worker")
}

func (idleRunner) Cancel(context.Context, string, string, int) error { return nil }

// testService is a running Service whose jobs find every site public and
// without robots.txt, and which no worker runs (they stay queued), served
// with the admin ("admintok"), alice ("alicetok", who may use the app
// "secret") and bob ("bobtok").
func testService(t *testing.T) (*Service, *httptest.Server) {
	t.Helper()
	st, err := state.Open("")
	if err != nil {
		t.Fatal(err)
	}
	jc := jobs.DefaultConfig()
	jc.Resolver = func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("93.184.215.14")}, nil
	}
	jc.Robots = func(context.Context, string, string) ([]byte, int, error) { return nil, http.StatusNotFound, nil }
	jc.Runner = idleRunner{}
	host := fakeHost{
		tokens: map[string]auth.Principal{"admintok": auth.AdminPrincipal, "alicetok": {Name: "alice"}, "bobtok": {Name: "bob"}},
		apps:   map[string][]string{"secret": {"alice"}},
	}
	s, err := New(Config{Jobs: jc, Store: st, Host: host, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx)
	}()
	mux := http.NewServeMux()
	s.Routes(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		srv.Close()
		cancel()
		<-done
		_ = st.Close()
	})
	return s, srv
}

// apiCall is a request with a deadline, so a request left waiting for a
// render that never comes fails instead of hanging.
func apiCall(t *testing.T, srv *httptest.Server, token, method, path, body string) (int, http.Header, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, srv.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(raw)
}

// TestJobsAdmission: every way in (one job, a batch, the synchronous
// render, a monitor) refuses bad input with a 400 naming the field, with
// the messages the API has always given, and drops the cache fields a
// client sends.
func TestJobsAdmission(t *testing.T) {
	_, srv := testService(t)
	const admin = "admintok"
	for _, tc := range []struct {
		name         string
		method, path string
		body         string
		status       int
		field, error string // of a 400
		want, not    string // in / not in the body
	}{
		{"one render", "POST", "/api/v1/jobs", `{"kind":"render","url":"http://a/","width":5}`, 400,
			"width", "width: 5 is out of range: want 0 (default) or 100..4096", "", ""},
		{"one check", "POST", "/api/v1/jobs", `{"kind":"check","url":"http://a/","format":"png"}`, 400,
			"format", "format: only render jobs have a format", "", ""},
		{"a render the cache cannot key", "POST", "/api/v1/jobs", `{"kind":"render","url":"ftp:///x"}`, 400,
			"url", `url: "ftp:///x" is not an absolute URL with a host`, "", ""},
		{"the same, uncached: disallowed", "POST", "/api/v1/jobs", `{"kind":"render","url":"ftp:///x","noCache":true}`, 202,
			"", "", `"state": "disallowed"`, ""},
		{"a batch names the index", "POST", "/api/v1/jobs", `[{"kind":"check","url":"http://a/"},{"kind":"check","url":"http://a/","format":"png"}]`, 400,
			"jobs[1].format", "jobs[1].format: only render jobs have a format", "", ""},
		{"a batch of one does not", "POST", "/api/v1/jobs", `[{"kind":"check","url":"http://a/","format":"png"}]`, 400,
			"format", "format: only render jobs have a format", "", ""},
		{"an empty batch", "POST", "/api/v1/jobs", `[]`, 400, "jobs", "jobs: empty batch", "", ""},
		{"a forged signature is dropped", "POST", "/api/v1/jobs", `{"kind":"check","url":"http://a/","cacheSig":"forged","cacheHolder":"forged"}`, 202,
			"", "", `"state": "queued"`, "forged"},
		{"a cached render gets its own", "POST", "/api/v1/jobs", `{"kind":"render","url":"http://a/","ignoreRobots":true,"cacheSig":"forged"}`, 202,
			"", "", `"cacheSig": "`, "forged"},
		{"render: bad field", "GET", "/api/v1/render?url=http://a/&quality=5", "", 400,
			"quality", "quality: applies to format jpeg only", "", ""},
		{"render: a URL the cache cannot key", "GET", "/api/v1/render?url=ftp:///x", "", 400,
			"url", `url: "ftp:///x" is not an absolute URL with a host`, "", ""},
		{"monitor: robots", "POST", "/api/v1/monitors", `{"kind":"check","url":"http://a/","ignoreRobots":true,"interval":"1m"}`, 400,
			"ignoreRobots", "ignoreRobots: monitors always obey robots.txt", "", ""},
		{"monitor: the spec before the interval", "POST", "/api/v1/monitors", `{"url":"http://a/","width":5,"interval":"1s"}`, 400,
			"width", "width: 5 is out of range: want 0 (default) or 100..4096", "", ""},
		{"monitor: interval", "POST", "/api/v1/monitors", `{"url":"http://a/","interval":"1s"}`, 400,
			"interval", "interval: 1s is out of range: want 10s..720h0m0s", "", ""},
		{"monitor: a render, uncached and unsigned", "POST", "/api/v1/monitors", `{"kind":"render","url":"http://a/","cacheSig":"forged","interval":"1m"}`, 201,
			"", "", `"noCache": true`, "cacheSig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, _, body := apiCall(t, srv, admin, tc.method, tc.path, tc.body)
			if st != tc.status {
				t.Fatalf("%d %s, want %d", st, body, tc.status)
			}
			if tc.status == http.StatusBadRequest {
				var e struct{ Field, Error string }
				if err := json.Unmarshal([]byte(body), &e); err != nil || e.Field != tc.field || e.Error != tc.error {
					t.Fatalf("%s, want field %q error %q", body, tc.field, tc.error)
				}
			}
			if !strings.Contains(body, tc.want) || (tc.not != "" && strings.Contains(body, tc.not)) {
				t.Fatalf("%s: want %q in it, not %q", body, tc.want, tc.not)
			}
		})
	}
}

// TestIsolation: a job, its result, its cache entries and monitors are
// their submitter's: another principal gets 404 for their ids and does not
// see them in lists, and app= needs the host's word that the principal may
// use the app's pool.
func TestIsolation(t *testing.T) {
	s, srv := testService(t)
	const admin, alice, bob = "admintok", "alicetok", "bobtok"
	const page = "http://secret.app.cloudbrowser.internal/account.html"
	aliceSpec := wire.JobSpec{Kind: wire.JobRender, URL: page, Format: wire.FormatText, App: "secret", User: "alice"}
	sig, canon, err := s.Cache().Key(aliceSpec, true)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := s.Cache().ReserveFor("alice", sig, canon, "seed", rendercache.NoCache); err != nil || res.Status != rendercache.Reserved {
		t.Fatalf("seed: %+v %v", res, err)
	}
	if _, _, err := s.Cache().Complete(sig, "seed", rendercache.Render{ContentType: "text/plain", Body: []byte("alice's account: 42 EUR")}); err != nil {
		t.Fatal(err)
	}
	const (
		render     = `{"kind":"render","url":"` + page + `","format":"text","app":"secret"}`
		public     = `{"kind":"render","url":"http://93.184.215.14/","format":"text","ignoreRobots":true}`
		renderPath = "/api/v1/render?format=text&app=secret&url=" + page
	)
	ids := map[string]string{}
	steps := []struct {
		name, token, method, path, body string
		status                          int
		want, not                       string
		save                            string
	}{
		{"alice renders through her pool", alice, "POST", "/api/v1/jobs", render, 200, `"state": "done"`, "", "aliceDone"},
		{"bob names alice's app", bob, "POST", "/api/v1/jobs", render, 403, `pool of the application \"secret\"`, "", ""},
		{"bob submits without app", bob, "POST", "/api/v1/jobs", public, 202, `"state": "queued"`, "", "bobJob"},
		{"bob reads alice's job", bob, "GET", "/api/v1/jobs/{aliceDone}", "", 404, "jobs: not found", "secret", ""},
		{"bob reads alice's result", bob, "GET", "/api/v1/jobs/{aliceDone}/result", "", 404, "jobs: not found", "42 EUR", ""},
		{"alice reads her result", alice, "GET", "/api/v1/jobs/{aliceDone}/result", "", 200, "alice's account: 42 EUR", "", ""},
		{"bob lists jobs", bob, "GET", "/api/v1/jobs", "", 200, "{bobJob}", "{aliceDone}", ""},
		{"bob lists alice's jobs", bob, "GET", "/api/v1/jobs?user=alice", "", 403, `"field": "user"`, "", ""},
		{"the admin lists alice's jobs", admin, "GET", "/api/v1/jobs?user=alice", "", 200, "{aliceDone}", "{bobJob}", ""},
		{"bob cancels alice's job", bob, "DELETE", "/api/v1/jobs/{aliceDone}", "", 404, "jobs: not found", "", ""},
		{"bob renders through alice's pool", bob, "GET", renderPath, "", 403, `"field": "app"`, "42 EUR", ""},
		{"alice renders through her pool", alice, "GET", renderPath, "", 200, "42 EUR", "", ""},
		{"bob purges alice's page", bob, "POST", "/api/v1/cache/purge", `{"url":"` + page + `"}`, 200, `"purged": 0`, "", ""},
		{"alice purges her page", alice, "POST", "/api/v1/cache/purge", `{"url":"` + page + `"}`, 200, `"purged": 1`, "", ""},
		{"bob adds a monitor", bob, "POST", "/api/v1/monitors", `{"kind":"check","url":"http://93.184.215.14/","interval":"1m"}`, 201, "", "", "bobMon"},
		{"alice reads bob's monitor", alice, "GET", "/api/v1/monitors/{bobMon}", "", 404, "jobs: not found", "", ""},
		{"alice lists monitors", alice, "GET", "/api/v1/monitors", "", 200, `"monitors": []`, "", ""},
		{"bob removes his monitor", bob, "DELETE", "/api/v1/monitors/{bobMon}", "", 204, "", "", ""},
		{"no token", "", "GET", "/api/v1/jobs", "", 401, "invalid token", "", ""},
	}
	expand := func(v string) string {
		for k, id := range ids {
			v = strings.ReplaceAll(v, "{"+k+"}", id)
		}
		return v
	}
	for _, st := range steps {
		code, _, body := apiCall(t, srv, st.token, st.method, expand(st.path), st.body)
		if code != st.status || !strings.Contains(body, expand(st.want)) || (st.not != "" && strings.Contains(body, expand(st.not))) {
			t.Fatalf("%s: %d %s, want %d with %q, without %q", st.name, code, body, st.status, expand(st.want), expand(st.not))
		}
		if st.save != "" {
			var v struct{ ID string }
			if err := json.Unmarshal([]byte(body), &v); err != nil || v.ID == "" {
				t.Fatalf("%s: no id in %s", st.name, body)
			}
			ids[st.save] = v.ID
		}
	}
}

// TestMonitorFilter: the monitor list by last check and last state change
// ranges (RFC 3339 or a duration ago), newest first when sorted; a bound
// leaves out monitors never checked or never changed; bad values name
// the field.
func TestMonitorFilter(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	mons := []jobs.Monitor{
		{ID: "old", LastCheck: now.Add(-3 * time.Hour), LastStateChange: now.Add(-30 * time.Hour)},
		{ID: "new", LastCheck: now.Add(-10 * time.Minute), LastStateChange: now.Add(-2 * time.Hour)},
		{ID: "never"},
	}
	tests := []struct {
		query string
		want  []string
		field string
	}{
		{"", []string{"old", "new", "never"}, ""},
		{"checkedAfter=1h", []string{"new"}, ""},
		{"checkedBefore=1h", []string{"old"}, ""},
		{"checkedAfter=" + now.Add(-4*time.Hour).Format(time.RFC3339) + "&checkedBefore=" + now.Add(-time.Hour).Format(time.RFC3339), []string{"old"}, ""},
		{"changedAfter=24h", []string{"new"}, ""},
		{"changedBefore=24h", []string{"old"}, ""},
		{"sort=lastCheck", []string{"new", "old", "never"}, ""},
		{"sort=lastStateChange&checkedAfter=5h", []string{"new", "old"}, ""},
		{"checkedAfter=yesterday", nil, "checkedAfter"},
		{"changedBefore=-1h", nil, "changedBefore"},
		{"sort=url", nil, "sort"},
	}
	for _, tt := range tests {
		q, _ := url.ParseQuery(tt.query)
		f, err := monitorFilterOf(q, now)
		var fe *jobs.FieldError
		if tt.field != "" {
			if !errors.As(err, &fe) || fe.Field != tt.field {
				t.Errorf("%q: %v, want an error naming %s", tt.query, err, tt.field)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tt.query, err)
			continue
		}
		list := slices.DeleteFunc(slices.Clone(mons), func(m jobs.Monitor) bool { return !f.keeps(m) })
		f.sort(list)
		var ids []string
		for _, m := range list {
			ids = append(ids, m.ID)
		}
		if !slices.Equal(ids, tt.want) {
			t.Errorf("%q: %v, want %v", tt.query, ids, tt.want)
		}
	}
	_, srv := testService(t)
	if st, _, b := apiCall(t, srv, "admintok", "GET", "/api/v1/monitors?checkedAfter=soon", ""); st != 400 || !strings.Contains(b, `"checkedAfter"`) {
		t.Errorf("a bad bound: %d %s", st, b)
	}
	if st, _, b := apiCall(t, srv, "admintok", "GET", "/api/v1/monitors?sort=lastCheck&changedAfter=1h", ""); st != 200 || !strings.Contains(b, `"monitors"`) {
		t.Errorf("a good filter: %d %s", st, b)
	}
}
