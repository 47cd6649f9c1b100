package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/cdpticket"
	"github.com/cloudbrowser-go/cloudbrowser/internal/clock/clocktest"
	"github.com/cloudbrowser-go/cloudbrowser/internal/session"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/auth"
	"github.com/cloudbrowser-go/cloudbrowser/master/state"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

func TestMain(m *testing.M) { testutil.Main(m) }

const testSecret = "a cluster secret of enough length!"

var testKey = session.Key(testSecret, cdpticket.Purpose)

// Tokens of the test principals.
const (
	adminTok  = "admintok"
	botTok    = "bottok" // the automation token
	jobsTok   = "jobstok"
	sharedTok = "authortok"
)

// fakeHost is the master as the sessions see it: real authentication
// (auth.Auth with the master's tokens and per-author ones), apps with the
// principals that may use them besides the admin, a placer that numbers
// instances, and an instance table.
type fakeHost struct {
	auth *auth.Auth
	base string // PublicBase's answer

	mu        sync.Mutex
	apps      map[string]fakeApp
	instances map[string]bool // instance id -> exists
	closed    []string        // instances closed, in order
	places    []wire.PlaceRequest
	placeErr  error // the next Place fails with it
	closeErr  error // every CloseInstance fails with it
	n         int
	// busy Places fail next as a full pool would.
	busy int
	// The queue's settings for newFixture (0: no waiting).
	queueMax  int
	queueWait time.Duration
}

type fakeApp struct {
	disabled bool
	users    []string
}

func (h *fakeHost) Check(r *http.Request, need auth.Role) (auth.Principal, *auth.Refusal) {
	return h.auth.Check(r, need)
}

func (h *fakeHost) AppExists(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.apps[name]
	return ok
}

func (h *fakeHost) MayUseApp(p auth.Principal, name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if p.Admin {
		return true
	}
	for _, u := range h.apps[name].users {
		if u == p.Name {
			return true
		}
	}
	return false
}

func (h *fakeHost) Place(ctx context.Context, req wire.PlaceRequest) (wire.Placement, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.places = append(h.places, req)
	if err := h.placeErr; err != nil {
		h.placeErr = nil
		return wire.Placement{}, err
	}
	if h.busy > 0 {
		h.busy--
		return wire.Placement{}, wire.Err(wire.CodePoolLimit, "every browser of the pool is in use")
	}
	if h.apps[req.App].disabled {
		return wire.Placement{}, wire.Err(wire.CodeAppDisabled, "application /"+req.App+" is disabled")
	}
	h.n++
	iid := "w1.i" + strconv.Itoa(h.n)
	h.instances[iid] = true
	return wire.Placement{InstanceID: iid, WorkerID: "w1", BrowserID: "b" + strconv.Itoa(h.n), Created: true}, nil
}

func (h *fakeHost) CloseInstance(ctx context.Context, iid string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closeErr != nil {
		return h.closeErr
	}
	if !h.instances[iid] {
		return ErrInstanceGone
	}
	delete(h.instances, iid)
	h.closed = append(h.closed, iid)
	return nil
}

func (h *fakeHost) InstanceExists(iid string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.instances[iid]
}

func (h *fakeHost) PublicBase(r *http.Request, public bool) string {
	if h.base != "" {
		return h.base
	}
	return "http://" + r.Host
}

func (h *fakeHost) closedList() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.closed...)
}

func (h *fakeHost) setCloseErr(err error) {
	h.mu.Lock()
	h.closeErr = err
	h.mu.Unlock()
}

func (h *fakeHost) setPlaceErr(err error) {
	h.mu.Lock()
	h.placeErr = err
	h.mu.Unlock()
}

func (h *fakeHost) drop(iid string) {
	h.mu.Lock()
	delete(h.instances, iid)
	h.mu.Unlock()
}

// fixture is a running Service on a state store in dir, with its host,
// fake clock and HTTP server.
type fixture struct {
	t     *testing.T
	dir   string
	st    *state.Store
	host  *fakeHost
	clk   *clocktest.Clock
	svc   *Service
	srv   *httptest.Server
	alice string // alice's token
	bob   string
	stop  func()
}

var start = time.Date(2026, 11, 3, 10, 0, 0, 0, time.UTC)

// newFixture starts a Service on the store in dir (a temporary one when
// ""), max sessions per principal (0 = default). host and clk are reused
// if given (a restart).
func newFixture(t *testing.T, dir string, maxSessions int, host *fakeHost, clk *clocktest.Clock) *fixture {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	st, err := state.Open(filepath.Join(dir, state.FileName))
	if err != nil {
		t.Fatal(err)
	}
	if clk == nil {
		clk = clocktest.New(start)
	}
	a, err := auth.New(auth.Config{State: st, Now: clk.Now, Login: auth.DefaultLoginLimits(), Secret: testSecret,
		Tokens: auth.Tokens{Admin: adminTok, Author: sharedTok, Jobs: jobsTok, Automation: botTok}, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, dir: dir, st: st, clk: clk}
	for _, name := range []string{"alice", "bob"} {
		tok, err := a.Authors().Add(name, start)
		if err != nil && !errors.As(err, new(*auth.AuthorExistsError)) {
			t.Fatal(err)
		}
		if name == "alice" {
			f.alice = tok
		} else {
			f.bob = tok
		}
	}
	if host == nil {
		host = &fakeHost{instances: map[string]bool{}, apps: map[string]fakeApp{
			"hello":  {users: []string{auth.AutomationPrincipal, auth.SharedAuthor}},
			"secret": {users: []string{"alice", "bob"}},
			"alices": {users: []string{"alice"}},
			"off":    {disabled: true, users: []string{auth.AutomationPrincipal}},
		}}
	}
	host.auth = a
	f.host = host
	// No waiting unless a test asks (TestQueue): refusals answer at once.
	queueWait := time.Duration(-1)
	if host.queueWait != 0 {
		queueWait = host.queueWait
	}
	svc, err := New(Config{Store: st, Host: host, Key: testKey, Clock: clk, MaxPerPrincipal: maxSessions, QueueMax: host.queueMax, QueueWait: queueWait, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	f.svc = svc
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		svc.Run(ctx)
	}()
	mux := http.NewServeMux()
	svc.Routes(mux, true)
	f.srv = httptest.NewServer(mux)
	stopped := false
	f.stop = func() {
		if stopped {
			return
		}
		stopped = true
		f.srv.Close()
		cancel()
		<-done
		_ = st.Close()
	}
	t.Cleanup(f.stop)
	// Run arms the timers of recorded sessions: wait for it.
	testutil.Eventually(t, 10*time.Second, testutil.Cond("Run started", func() bool {
		svc.mu.Lock()
		defer svc.mu.Unlock()
		return svc.ctx != nil
	}))
	return f
}

// call sends a request with token ("" = none) and returns the status,
// headers and body.
func (f *fixture) call(token, method, path, body string) (int, http.Header, string) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, f.srv.URL+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(raw)
}

// create opens a session on app with token and fails the test unless 201.
func (f *fixture) create(token, body string) View {
	f.t.Helper()
	st, _, raw := f.call(token, "POST", "/api/v1/sessions", body)
	if st != http.StatusCreated {
		f.t.Fatalf("create %s: %d %s", body, st, raw)
	}
	var v View
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		f.t.Fatal(err)
	}
	return v
}

func (f *fixture) list(token, query string) []View {
	f.t.Helper()
	st, _, raw := f.call(token, "GET", "/api/v1/sessions"+query, "")
	if st != http.StatusOK {
		f.t.Fatalf("list: %d %s", st, raw)
	}
	var out struct {
		Sessions []View `json:"sessions"`
	}
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		f.t.Fatal(err)
	}
	return out.Sessions
}

func ids(vs []View) []string {
	out := []string{}
	for _, v := range vs {
		out = append(out, v.ID)
	}
	return out
}

// TestCreate: what a new session answers, its URLs and ticket, and the
// placement it asks for.
func TestCreate(t *testing.T) {
	f := newFixture(t, "", 0, nil, nil)
	v := f.create(botTok, `{"app":"/hello","timeout":"10m","idleTimeout":90000,"keepAlive":"30s","viewport":{"width":1280,"height":720}}`)
	host := strings.TrimPrefix(f.srv.URL, "http://")
	if v.App != "hello" || v.InstanceID != "w1.i1" || v.BrowserID != "b1" || v.Owner != auth.AutomationPrincipal {
		t.Errorf("session %+v", v)
	}
	if !session.ValidID(v.ID) {
		t.Errorf("id %q is not a session id", v.ID)
	}
	if !v.CreatedAt.Equal(start) || !v.ExpiresAt.Equal(start.Add(10*time.Minute)) {
		t.Errorf("created %v, expires %v", v.CreatedAt, v.ExpiresAt)
	}
	if v.Timeout != "10m0s" || v.IdleTimeout != "1m30s" || v.KeepAlive != "30s" || v.Viewport == nil || *v.Viewport != (Viewport{1280, 720}) {
		t.Errorf("times and viewport %+v", v)
	}
	if want := "http://" + host + "/hello/a/w1.i1/b/b1"; v.LiveURL != want {
		t.Errorf("liveUrl %q, want %q", v.LiveURL, want)
	}
	u, err := url.Parse(v.CDPURL)
	if err != nil || u.Scheme != "ws" || u.Host != host || u.Path != "/hello/a/w1.i1/b/b1/cdp" {
		t.Fatalf("cdpUrl %q", v.CDPURL)
	}
	cl, ok := cdpticket.Check(testKey, "w1.i1", "b1", u.Query().Get("ticket"), start.Add(9*time.Minute))
	if !ok || cl.Owner != auth.AutomationPrincipal || cl.Session != v.ID {
		t.Errorf("ticket: %+v %v", cl, ok)
	}
	if _, ok := cdpticket.Check(testKey, "w1.i1", "b1", u.Query().Get("ticket"), start.Add(10*time.Minute)); ok {
		t.Error("the ticket outlives the session")
	}
	f.host.mu.Lock()
	pl := f.host.places[0]
	f.host.mu.Unlock()
	if pl.App != "hello" || pl.User != auth.AutomationPrincipal || !pl.New || pl.ClientIP != "127.0.0.1" || pl.RequestID == "" {
		t.Errorf("place request %+v", pl)
	}

	// The defaults, and wss behind https.
	f.host.base = "https://cb.example.com"
	d := f.create(sharedTok, `{"app":"hello"}`)
	if d.Timeout != "15m0s" || d.IdleTimeout != "5m0s" || d.KeepAlive != "0s" || d.Viewport != nil || d.Owner != auth.SharedAuthor {
		t.Errorf("defaults %+v", d)
	}
	if !strings.HasPrefix(d.CDPURL, "wss://cb.example.com/hello/a/w1.i2/b/b2/cdp?ticket=") || d.LiveURL != "https://cb.example.com/hello/a/w1.i2/b/b2" {
		t.Errorf("https URLs: %s %s", d.CDPURL, d.LiveURL)
	}
	if got := counter(t, f.svc.m.created); got != 2 {
		t.Errorf("created metric %v", got)
	}
}

// TestCreateRefusals: every refusal, with its status, the field it names
// and Retry-After where there is one.
func TestCreateRefusals(t *testing.T) {
	f := newFixture(t, "", 0, nil, nil)
	for _, tc := range []struct {
		name       string
		token      string
		body       string
		placeErr   error
		status     int
		field      string // "" = none expected
		msg        string // in the error
		retryAfter string
	}{
		{"no token", "", `{"app":"hello"}`, nil, 401, "", "missing token", ""},
		{"wrong token", "nope", `{"app":"hello"}`, nil, 401, "", "invalid token", ""},
		{"the jobs token", jobsTok, `{"app":"hello"}`, nil, 403, "", "automation.token", ""},
		{"unknown app", botTok, `{"app":"nope"}`, nil, 404, "app", "no application is mounted at /nope", ""},
		{"not allowed to use the app", botTok, `{"app":"alices"}`, nil, 403, "app", "may not open sessions on /alices", ""},
		{"another author's app", "bob", `{"app":"alices"}`, nil, 403, "app", `"bob" may not`, ""},
		{"disabled app", botTok, `{"app":"off"}`, nil, 409, "app", "disabled", ""},
		{"instance quota", botTok, `{"app":"hello"}`, &rmi.RemoteError{Code: wire.CodeQuota, Message: "instances-per-user: at most 10"}, 429, "", "instances-per-user: at most 10", ""},
		{"local quota", botTok, `{"app":"hello"}`, wire.Err(wire.CodeQuota, "instances-per-ip: at most 50"), 429, "", "instances-per-ip", ""},
		{"no worker", botTok, `{"app":"hello"}`, wire.Err(wire.CodeNoWorkers, "no worker is available to host hello"), 503, "", "no worker", "5"},
		{"starting", botTok, `{"app":"hello"}`, wire.Err(wire.CodeStarting, "the cluster is starting"), 503, "", "starting", "5"},
		{"app removed meanwhile", botTok, `{"app":"hello"}`, wire.Err(wire.CodeUnknownApp, "no application is mounted at /hello"), 404, "app", "/hello", ""},
		{"worker failure", botTok, `{"app":"hello"}`, errors.New("create instance of hello on w1: browser crashed"), 502, "", "browser crashed", ""},
		{"empty body", botTok, ``, nil, 400, "body", "JSON object is required", ""},
		{"not JSON", botTok, `app=hello`, nil, 400, "body", "invalid character", ""},
		{"two objects", botTok, `{"app":"hello"} {}`, nil, 400, "body", "one JSON object", ""},
		{"no app", botTok, `{}`, nil, 400, "app", "required", ""},
		{"blank app", botTok, `{"app":" "}`, nil, 400, "app", "required", ""},
		{"app not a string", botTok, `{"app":5}`, nil, 400, "app", "must be a JSON string", ""},
		{"unknown field", botTok, `{"app":"hello","timeoutMs":5}`, nil, 400, "timeoutMs", "unknown field", ""},
		{"negative timeout", botTok, `{"app":"hello","timeout":"-1s"}`, nil, 400, "timeout", "must not be negative", ""},
		{"zero timeout", botTok, `{"app":"hello","timeout":0}`, nil, 400, "timeout", "at least 1s", ""},
		{"sub-second timeout", botTok, `{"app":"hello","timeout":500}`, nil, 400, "timeout", "at least 1s", ""},
		{"absurd timeout", botTok, `{"app":"hello","timeout":"25h"}`, nil, 400, "timeout", "at most 24h0m0s", ""},
		{"absurd timeout in ms", botTok, `{"app":"hello","timeout":86400001}`, nil, 400, "timeout", "at most 24h0m0s", ""},
		{"huge timeout in ms", botTok, `{"app":"hello","timeout":1e30}`, nil, 400, "timeout", "whole number of milliseconds", ""},
		{"fractional ms", botTok, `{"app":"hello","timeout":1500.5}`, nil, 400, "timeout", "whole number of milliseconds", ""},
		{"timeout not a duration", botTok, `{"app":"hello","timeout":"soon"}`, nil, 400, "timeout", `"soon" is not a duration`, ""},
		{"timeout an object", botTok, `{"app":"hello","timeout":{}}`, nil, 400, "timeout", "must be a duration", ""},
		{"zero idle timeout", botTok, `{"app":"hello","idleTimeout":"0s"}`, nil, 400, "idleTimeout", "at least 1s", ""},
		{"negative keep-alive", botTok, `{"app":"hello","keepAlive":-5}`, nil, 400, "keepAlive", "must not be negative", ""},
		{"absurd keep-alive", botTok, `{"app":"hello","keepAlive":"48h"}`, nil, 400, "keepAlive", "at most", ""},
		{"narrow viewport", botTok, `{"app":"hello","viewport":{"width":50,"height":600}}`, nil, 400, "viewport.width", "between 100 and 4096", ""},
		{"viewport without height", botTok, `{"app":"hello","viewport":{"width":800}}`, nil, 400, "viewport.height", "got 0", ""},
		{"viewport field misspelt", botTok, `{"app":"hello","viewport":{"w":800,"height":600}}`, nil, 400, "w", "unknown field", ""},
		{"viewport not an object", botTok, `{"app":"hello","viewport":"big"}`, nil, 400, "viewport", "must be a JSON object", ""},
		{"viewport width a string", botTok, `{"app":"hello","viewport":{"width":"800","height":600}}`, nil, 400, "viewport.width", "must be a JSON number", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok := tc.token
			if tok == "bob" {
				tok = f.bob
			}
			f.host.setPlaceErr(tc.placeErr)
			defer f.host.setPlaceErr(nil)
			st, hdr, raw := f.call(tok, "POST", "/api/v1/sessions", tc.body)
			var e struct {
				Status int    `json:"status"`
				Error  string `json:"error"`
				Field  string `json:"field"`
			}
			_ = json.Unmarshal([]byte(raw), &e)
			if st != tc.status || e.Field != tc.field || !strings.Contains(e.Error, tc.msg) || hdr.Get("Retry-After") != tc.retryAfter {
				t.Errorf("%d %s (Retry-After %q); want %d, field %q, error containing %q, Retry-After %q",
					st, raw, hdr.Get("Retry-After"), tc.status, tc.field, tc.msg, tc.retryAfter)
			}
		})
	}
	if n := f.svc.Open(); n != 0 {
		t.Errorf("%d sessions open after refusals", n)
	}
	if got := counter(t, f.svc.m.refused.WithLabelValues("quota")); got != 2 {
		t.Errorf("quota refusals metric %v, want 2", got)
	}
}

// TestWhoSeesWhat: each principal lists, reads and deletes its own
// sessions only (another's id answers 404 word for word as an unknown
// one); the admin sees and deletes all; ?app= filters.
func TestWhoSeesWhat(t *testing.T) {
	f := newFixture(t, "", 0, nil, nil)
	// A second apart: lists are oldest first.
	next := func(token, body string) View {
		f.clk.Advance(time.Second)
		return f.create(token, body)
	}
	bot := next(botTok, `{"app":"hello"}`)
	alice1 := next(f.alice, `{"app":"secret"}`)
	alice2 := next(f.alice, `{"app":"alices"}`)
	bob := next(f.bob, `{"app":"secret"}`)
	admin := next(adminTok, `{"app":"alices"}`)

	for _, tc := range []struct {
		name, token, query string
		want               []string
	}{
		{"automation token", botTok, "", []string{bot.ID}},
		{"alice", f.alice, "", []string{alice1.ID, alice2.ID}},
		{"alice, one app", f.alice, "?app=alices", []string{alice2.ID}},
		{"alice, /app", f.alice, "?app=/secret", []string{alice1.ID}},
		{"bob", f.bob, "", []string{bob.ID}},
		{"shared author: none", sharedTok, "", []string{}},
		{"admin: all", adminTok, "", []string{bot.ID, alice1.ID, alice2.ID, bob.ID, admin.ID}},
		{"admin, one app", adminTok, "?app=secret", []string{alice1.ID, bob.ID}},
	} {
		if got := ids(f.list(tc.token, tc.query)); strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%s lists %v, want %v", tc.name, got, tc.want)
		}
	}
	if st, _, _ := f.call(jobsTok, "GET", "/api/v1/sessions", ""); st != http.StatusForbidden {
		t.Errorf("the jobs token lists sessions: %d", st)
	}

	_, _, unknown := f.call(f.bob, "GET", "/api/v1/sessions/"+session.NewID(), "")
	st, _, other := f.call(f.bob, "GET", "/api/v1/sessions/"+alice1.ID, "")
	if st != http.StatusNotFound || strings.ReplaceAll(other, alice1.ID, "ID") != strings.ReplaceAll(unknown, unknownID(unknown), "ID") {
		t.Errorf("bob reads alice's session: %d %s (an unknown id: %s)", st, other, unknown)
	}
	if st, _, raw := f.call(f.alice, "GET", "/api/v1/sessions/"+alice1.ID, ""); st != http.StatusOK || !strings.Contains(raw, alice1.CDPURL[:20]) {
		t.Errorf("alice reads her session: %d %s", st, raw)
	}
	if st, _, _ := f.call(adminTok, "GET", "/api/v1/sessions/"+alice1.ID, ""); st != http.StatusOK {
		t.Errorf("the admin reads alice's session: %d", st)
	}
	if st, _, _ := f.call(f.bob, "DELETE", "/api/v1/sessions/"+alice1.ID, ""); st != http.StatusNotFound {
		t.Errorf("bob deletes alice's session: %d", st)
	}
	if len(f.host.closedList()) != 0 {
		t.Fatalf("instances closed by refused deletes: %v", f.host.closedList())
	}
	if st, _, raw := f.call(f.alice, "DELETE", "/api/v1/sessions/"+alice1.ID, ""); st != http.StatusNoContent {
		t.Fatalf("alice deletes her session: %d %s", st, raw)
	}
	if st, _, raw := f.call(adminTok, "DELETE", "/api/v1/sessions/"+bob.ID, ""); st != http.StatusNoContent {
		t.Fatalf("the admin deletes bob's session: %d %s", st, raw)
	}
	if got := f.host.closedList(); strings.Join(got, ",") != alice1.InstanceID+","+bob.InstanceID {
		t.Errorf("closed instances %v", got)
	}
	if st, _, _ := f.call(f.alice, "DELETE", "/api/v1/sessions/"+alice1.ID, ""); st != http.StatusNotFound {
		t.Errorf("a second delete: %d", st)
	}
	if f.st.Has(Bucket, alice1.ID) || !f.st.Has(Bucket, alice2.ID) {
		t.Error("the store does not follow the deletes")
	}
	if got := counter(t, f.svc.m.ended.WithLabelValues(ReasonDeleted)); got != 2 {
		t.Errorf("ended{deleted} %v", got)
	}
}

// unknownID is the id a "no session ID" answer names.
func unknownID(body string) string {
	m := regexp.MustCompile(`no session ([a-z2-7]+)`).FindStringSubmatch(body)
	if m == nil {
		return "\x00"
	}
	return m[1]
}

// TestDeleteUnreachable: a delete whose instance cannot be closed now is
// answered 503 with Retry-After and keeps the session; an instance already
// gone ends it (204).
func TestDeleteUnreachable(t *testing.T) {
	f := newFixture(t, "", 0, nil, nil)
	v := f.create(botTok, `{"app":"hello"}`)
	f.host.setCloseErr(wire.Err(wire.CodeNoWorkers, "the worker w1 of instance w1.i1 is not connected"))
	st, hdr, raw := f.call(botTok, "DELETE", "/api/v1/sessions/"+v.ID, "")
	if st != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" || !strings.Contains(raw, "not connected") {
		t.Fatalf("delete with the worker away: %d %s", st, raw)
	}
	if got := ids(f.list(botTok, "")); len(got) != 1 {
		t.Fatalf("the session is gone after a failed delete: %v", got)
	}
	f.host.setCloseErr(ErrInstanceGone)
	if st, _, raw := f.call(botTok, "DELETE", "/api/v1/sessions/"+v.ID, ""); st != http.StatusNoContent {
		t.Fatalf("delete of a session whose instance is gone: %d %s", st, raw)
	}
}

// TestMaxSessions: over the per-principal maximum, 429 with Retry-After
// until the principal's first session ends; other principals are not
// affected, and a deleted session frees its place.
func TestMaxSessions(t *testing.T) {
	f := newFixture(t, "", 2, nil, nil)
	first := f.create(botTok, `{"app":"hello","timeout":"10m"}`)
	f.clk.Advance(time.Minute)
	f.create(botTok, `{"app":"hello","timeout":"1h"}`)
	st, hdr, raw := f.call(botTok, "POST", "/api/v1/sessions", `{"app":"hello"}`)
	if st != http.StatusTooManyRequests || hdr.Get("Retry-After") != "540" || !strings.Contains(raw, "at most 2 automation sessions") {
		t.Fatalf("third session: %d Retry-After %q %s; want 429, 540 (the first ends in 9m)", st, hdr.Get("Retry-After"), raw)
	}
	f.create(f.alice, `{"app":"secret"}`) // alice has her own count
	if st, _, _ := f.call(botTok, "DELETE", "/api/v1/sessions/"+first.ID, ""); st != http.StatusNoContent {
		t.Fatal("delete")
	}
	f.create(botTok, `{"app":"hello"}`)
	// A session whose instance vanished does not count.
	for _, v := range f.list(botTok, "") {
		f.host.drop(v.InstanceID)
	}
	f.create(botTok, `{"app":"hello"}`)
	f.create(botTok, `{"app":"hello"}`)
	if got := counter(t, f.svc.m.refused.WithLabelValues("max-sessions")); got != 1 {
		t.Errorf("max-sessions refusals %v", got)
	}
}

// TestExpiry: at its time a session's instance is closed and its record
// deleted; a worker that cannot be reached is tried again a minute later.
func TestExpiry(t *testing.T) {
	f := newFixture(t, "", 0, nil, nil)
	short := f.create(botTok, `{"app":"hello","timeout":"10m"}`)
	long := f.create(botTok, `{"app":"hello","timeout":"1h"}`)
	f.clk.Advance(10*time.Minute - time.Second)
	if len(f.host.closedList()) != 0 {
		t.Fatal("closed before its time")
	}
	f.clk.Advance(time.Second)
	if got := f.host.closedList(); len(got) != 1 || got[0] != short.InstanceID {
		t.Fatalf("closed %v at 10m, want %s", got, short.InstanceID)
	}
	if f.st.Has(Bucket, short.ID) {
		t.Error("the expired session's record is still stored")
	}
	if st, _, _ := f.call(botTok, "GET", "/api/v1/sessions/"+short.ID, ""); st != http.StatusNotFound {
		t.Errorf("GET of an expired session: %d", st)
	}

	f.host.setCloseErr(wire.Err(wire.CodeNoWorkers, "not connected"))
	f.clk.Advance(50 * time.Minute)
	if got := ids(f.list(botTok, "")); len(got) != 1 || got[0] != long.ID {
		t.Fatalf("a session whose instance could not be closed was dropped: %v", got)
	}
	f.host.setCloseErr(nil)
	f.clk.Advance(time.Minute)
	if got := f.host.closedList(); len(got) != 2 || got[1] != long.InstanceID {
		t.Fatalf("closed %v after the retry", got)
	}
	if n := f.svc.Open(); n != 0 {
		t.Errorf("%d open", n)
	}
	if got := counter(t, f.svc.m.ended.WithLabelValues(ReasonTimeout)); got != 2 {
		t.Errorf("ended{timeout} %v", got)
	}
	if n := f.clk.Active(); n != 0 {
		t.Errorf("%d timers left", n)
	}
}

// TestRestart: a new Service on the same store lists the same sessions
// with the same ids, expiry and CDP URL, and ends them at their time.
func TestRestart(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, dir, 0, nil, nil)
	a := f.create(botTok, `{"app":"hello","timeout":"10m","viewport":{"width":800,"height":600}}`)
	b := f.create(f.alice, `{"app":"secret","timeout":"2h","keepAlive":"1m"}`)
	f.stop()
	if n := f.clk.Active(); n != 0 {
		t.Errorf("%d timers left by a stopped service", n)
	}

	f.clk.Advance(5 * time.Minute) // the master was down for 5 minutes
	g := newFixture(t, dir, 0, f.host, f.clk)
	for _, want := range []View{a, b} {
		tok := botTok
		if want.Owner == "alice" {
			tok = f.alice // the same store: the same authors
		}
		st, _, raw := g.call(tok, "GET", "/api/v1/sessions/"+want.ID, "")
		if st != http.StatusOK {
			t.Fatalf("after the restart %s: %d %s", want.ID, st, raw)
		}
		var got View
		_ = json.Unmarshal([]byte(raw), &got)
		// The server's port changed: compare the URLs without the host.
		got.CDPURL, want.CDPURL = stripHost(got.CDPURL), stripHost(want.CDPURL)
		got.LiveURL, want.LiveURL = stripHost(got.LiveURL), stripHost(want.LiveURL)
		if got.CDPURL != want.CDPURL || got.LiveURL != want.LiveURL || !got.ExpiresAt.Equal(want.ExpiresAt) ||
			got.InstanceID != want.InstanceID || got.KeepAlive != want.KeepAlive || (got.Viewport == nil) != (want.Viewport == nil) {
			t.Errorf("after the restart:\n got %+v\nwant %+v", got, want)
		}
	}
	g.clk.Advance(5 * time.Minute)
	if got := g.host.closedList(); len(got) != 1 || got[0] != a.InstanceID {
		t.Fatalf("closed %v at 10m, want the first session's", got)
	}
	if got := ids(g.list(adminTok, "")); len(got) != 1 || got[0] != b.ID {
		t.Errorf("left after the first expired: %v", got)
	}
}

func stripHost(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return u
	}
	p.Host = ""
	return p.String()
}

// TestRestartDropsGone: a recorded session whose instance the master no
// longer knows is ended when the service starts.
func TestRestartDropsGone(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, dir, 0, nil, nil)
	a := f.create(botTok, `{"app":"hello"}`)
	b := f.create(botTok, `{"app":"hello"}`)
	f.stop()
	f.host.drop(a.InstanceID)
	g := newFixture(t, dir, 0, f.host, f.clk)
	testutil.Eventually(t, 10*time.Second, testutil.Cond("the gone session dropped", func() bool {
		return !g.st.Has(Bucket, a.ID)
	}))
	if !g.st.Has(Bucket, b.ID) {
		t.Error("the live session was dropped too")
	}
}

// TestInstanceEnds: a session ends when its worker reports its instance
// closed (the hook), or when a read finds the instance gone.
func TestInstanceEnds(t *testing.T) {
	f := newFixture(t, "", 0, nil, nil)
	a := f.create(botTok, `{"app":"hello"}`)
	b := f.create(botTok, `{"app":"hello"}`)
	c := f.create(botTok, `{"app":"hello"}`)
	f.create(botTok, `{"app":"hello"}`)
	f.svc.InstanceClosed(a.InstanceID)
	f.svc.InstanceClosed("w9.unrelated")
	if f.st.Has(Bucket, a.ID) {
		t.Error("the closed instance's session is still stored")
	}
	f.host.drop(b.InstanceID)
	f.host.drop(c.InstanceID)
	if n := f.svc.Open(); n != 1 {
		t.Errorf("open gauge %d, want 1 (the vanished instance's session is not counted)", n)
	}
	if st, _, _ := f.call(botTok, "GET", "/api/v1/sessions/"+b.ID, ""); st != http.StatusNotFound {
		t.Errorf("GET of a session whose instance is gone: %d", st)
	}
	if got := f.list(botTok, ""); len(got) != 1 {
		t.Errorf("list %v, want the one left", ids(got))
	}
	if f.st.Has(Bucket, b.ID) || f.st.Has(Bucket, c.ID) {
		t.Error("records of vanished instances are still stored")
	}
	if got := counter(t, f.svc.m.ended.WithLabelValues(ReasonInstanceClosed)); got != 1 {
		t.Errorf("ended{instance-closed} %v", got)
	}
	if got := counter(t, f.svc.m.ended.WithLabelValues(ReasonInstanceGone)); got != 2 {
		t.Errorf("ended{instance-gone} %v", got)
	}
	if n := f.clk.Active(); n != 1 {
		t.Errorf("%d expiry timers, want the open session's only", n)
	}
}

// TestNewConfig: what New refuses.
func TestNewConfig(t *testing.T) {
	st, err := state.Open("")
	if err != nil {
		t.Fatal(err)
	}
	h := &fakeHost{}
	for _, cfg := range []Config{{Host: h, Key: testKey}, {Store: st, Key: testKey}, {Store: st, Host: h},
		{Store: st, Host: h, Key: testKey, MaxPerPrincipal: -1}} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

// counter is a counter's value.
func counter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestJSONVersion: CDP's discovery endpoint opens a session of the app
// named in the query, authenticated by the query's token (or the header),
// and answers its cdpUrl as the webSocketDebuggerUrl; without an app, a
// token or a known app it refuses as the API does.
func TestJSONVersion(t *testing.T) {
	f := newFixture(t, "", 0, nil, nil)
	for _, path := range []string{"/json/version?app=hello&token=" + botTok, "/json/version/?token=" + botTok + "&app=hello"} {
		st, _, raw := f.call("", "GET", path, "")
		var v struct {
			Browser string `json:"Browser"`
			WS      string `json:"webSocketDebuggerUrl"`
		}
		if st != http.StatusOK || json.Unmarshal([]byte(raw), &v) != nil {
			t.Fatalf("%s: %d %s", path, st, raw)
		}
		u, err := url.Parse(v.WS)
		if err != nil || u.Scheme != "ws" || !strings.HasSuffix(u.Path, "/cdp") || u.Query().Get("ticket") == "" {
			t.Errorf("%s: webSocketDebuggerUrl %q", path, v.WS)
		}
	}
	if n := len(f.list(botTok, "")); n != 2 {
		t.Errorf("%d sessions after two discoveries, want 2", n)
	}
	for _, tc := range []struct {
		name, token, path string
		status            int
	}{
		{"no app", botTok, "/json/version", http.StatusBadRequest},
		{"no token", "", "/json/version?app=hello", http.StatusUnauthorized},
		{"a wrong token", "", "/json/version?app=hello&token=nope", http.StatusUnauthorized},
		{"the jobs token", "", "/json/version?app=hello&token=" + jobsTok, http.StatusForbidden},
		{"an unknown app", botTok, "/json/version?app=nowhere", http.StatusNotFound},
	} {
		if st, _, raw := f.call(tc.token, "GET", tc.path, ""); st != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, st, raw, tc.status)
		}
	}
}

// TestQueue: a session nobody can take waits for a browser: it is opened
// once one comes free (tried again every second, or at once when a session
// ends); a full queue and a wait too long answer 429 with Retry-After.
func TestQueue(t *testing.T) {
	host := &fakeHost{instances: map[string]bool{}, apps: map[string]fakeApp{"hello": {users: []string{auth.AutomationPrincipal}}},
		queueMax: 1, queueWait: 10 * time.Second}
	f := newFixture(t, "", 0, host, nil)
	type answer struct {
		status int
		hdr    http.Header
		body   string
	}
	post := func() <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			st, h, b := f.call(botTok, "POST", "/api/v1/sessions", `{"app":"hello"}`)
			ch <- answer{st, h, b}
		}()
		return ch
	}
	busy := func(n int) { host.mu.Lock(); host.busy = n; host.mu.Unlock() }
	waiting := func(n int) {
		t.Helper()
		testutil.Eventually(t, 10*time.Second, testutil.Cond(fmt.Sprintf("%d waiting", n), func() bool { return f.svc.Waiting() == n }))
	}

	// Two tries find the pool full; the third, a second later each, opens it.
	busy(2)
	timers := f.clk.Active()
	a := post()
	var got answer
	for done := false; !done; {
		select {
		case got = <-a:
			done = true
		default:
			if f.svc.Waiting() == 1 && f.clk.Active() > timers { // the request waits on its timer
				f.clk.Advance(retryEvery)
			}
			runtime.Gosched()
		}
	}
	if got.status != http.StatusCreated {
		t.Fatalf("after waiting: %d %s", got.status, got.body)
	}
	var first View
	if err := json.Unmarshal([]byte(got.body), &first); err != nil {
		t.Fatal(err)
	}

	// The queue holds one: a second request is refused at once.
	busy(1 << 20)
	b := post()
	waiting(1)
	st, hdr, body := f.call(botTok, "POST", "/api/v1/sessions", `{"app":"hello"}`)
	if st != http.StatusTooManyRequests || hdr.Get("Retry-After") == "" || !strings.Contains(body, "already wait") {
		t.Fatalf("a request beyond the queue: %d %q %s", st, hdr.Get("Retry-After"), body)
	}
	// A session ending wakes the waiting one, which then finds a browser.
	busy(0)
	if st, _, body := f.call(botTok, "DELETE", "/api/v1/sessions/"+first.ID, ""); st != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", st, body)
	}
	if got := <-b; got.status != http.StatusCreated {
		t.Fatalf("woken by the session's end: %d %s", got.status, got.body)
	}

	// Nothing comes free within the wait: 429.
	busy(1 << 20)
	c := post()
	waiting(1)
	f.clk.Advance(11 * time.Second)
	for got = range c {
		break
	}
	if got.status != http.StatusTooManyRequests || got.hdr.Get("Retry-After") == "" || !strings.Contains(got.body, "within 10s") {
		t.Fatalf("after the wait: %d %q %s", got.status, got.hdr.Get("Retry-After"), got.body)
	}
	waiting(0)
}
