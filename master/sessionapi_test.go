package master

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/cdpticket"
	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/httpsec"
	"github.com/cloudbrowser-go/cloudbrowser/internal/session"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/balance"
	"github.com/cloudbrowser-go/cloudbrowser/master/sessions"
)

// sessionsMaster is a started master (fake clock) with the admin, shared
// author, jobs and automation tokens, its admin API, and cfg changed by
// change.
func sessionsMaster(t *testing.T, change func(*Config)) (*Master, *httptest.Server) {
	t.Helper()
	cfg := testConfig(balance.LeastLoad)
	cfg.AdminToken, cfg.AuthorToken, cfg.JobsToken, cfg.AutomationToken = "admintok", "authortok", "jobstok", "bottok"
	if change != nil {
		change(&cfg)
	}
	m := startConfig(t, cfg)
	srv := httptest.NewServer(m.admin.handler(false))
	t.Cleanup(srv.Close)
	return m, srv
}

// TestAutomationTokenRole: the automation token may use the sessions API
// and nothing else; the jobs token may not use it.
func TestAutomationTokenRole(t *testing.T) {
	_, srv := sessionsMaster(t, nil)
	for _, tc := range []struct {
		name, token, method, path string
		body                      []byte
		status                    int
		msg                       string
	}{
		{"automation token deploys", "bottok", "POST", "/api/v1/apps", archiveOf(t, "bots", nil), 403, "only open, read and close automation sessions"},
		{"automation token lists apps", "bottok", "GET", "/api/v1/apps", nil, 403, "/api/v1/sessions"},
		{"automation token submits a job", "bottok", "POST", "/api/v1/jobs", []byte(`{"kind":"check","url":"https://example.com/"}`), 403, "/api/v1/sessions"},
		{"automation token renders", "bottok", "GET", "/api/v1/render?url=https://example.com/", nil, 403, "/api/v1/sessions"},
		{"automation token lists jobs", "bottok", "GET", "/api/v1/jobs", nil, 403, "/api/v1/sessions"},
		{"automation token reads the cluster", "bottok", "GET", "/api/v1/cluster", nil, 403, "/api/v1/sessions"},
		{"automation token grants itself", "bottok", "PUT", "/api/v1/apps/hello/job-users/automation", nil, 403, "/api/v1/sessions"},
		{"jobs token opens a session", "jobstok", "POST", "/api/v1/sessions", []byte(`{"app":"multi"}`), 403, "automation.token"},
		{"jobs token lists sessions", "jobstok", "GET", "/api/v1/sessions", nil, 403, "automation.token"},
		{"jobs token deletes a session", "jobstok", "DELETE", "/api/v1/sessions/" + session.NewID(), nil, 403, "automation.token"},
		{"automation token lists sessions", "bottok", "GET", "/api/v1/sessions", nil, 200, `"sessions": []`},
		{"shared author lists sessions", "authortok", "GET", "/api/v1/sessions", nil, 200, `"sessions": []`},
		{"admin lists sessions", "admintok", "GET", "/api/v1/sessions", nil, 200, `"sessions": []`},
	} {
		st, body := call(t, srv, tc.token, tc.method, tc.path, tc.body)
		if st != tc.status || !strings.Contains(body, tc.msg) {
			t.Errorf("%s: %d %s; want %d with %q", tc.name, st, body, tc.status, tc.msg)
		}
	}
}

// TestSessionsThroughThePlacer: a session is placed by the master's placer
// on a worker, its URLs name the instance and browser, the apps' rules
// decide who may open one, a delete closes the instance on its worker, and
// the worker's word that an instance closed ends its session.
func TestSessionsThroughThePlacer(t *testing.T) {
	m, srv := sessionsMaster(t, nil)
	w := addWorker(t, m, "w1")
	alice := addAuthor(t, srv, "alice")
	if st, body := call(t, srv, alice, "POST", "/api/v1/apps", archiveOf(t, "alices", nil)); st != http.StatusCreated {
		t.Fatalf("alice deploys: %d %s", st, body)
	}
	open := func(token, app string, want int) sessions.View {
		t.Helper()
		st, body := call(t, srv, token, "POST", "/api/v1/sessions", []byte(`{"app":"`+app+`","timeout":"10m"}`))
		if st != want {
			t.Fatalf("open %s: %d %s, want %d", app, st, body, want)
		}
		var v sessions.View
		_ = json.Unmarshal([]byte(body), &v)
		return v
	}

	bot := open("bottok", "multi", http.StatusCreated) // the admin's app
	if !m.workers.Known(bot.InstanceID) || !strings.HasPrefix(bot.InstanceID, "w1.") || bot.BrowserID != "bautomation" {
		t.Fatalf("placement %+v", bot)
	}
	u, err := url.Parse(bot.CDPURL)
	if err != nil || u.Scheme != "ws" || u.Host != strings.TrimPrefix(srv.URL, "http://") ||
		u.Path != "/multi/a/"+bot.InstanceID+"/b/bautomation/cdp" {
		t.Fatalf("cdpUrl %q", bot.CDPURL)
	}
	// The workers hold the same key (Cluster.Info), so they accept it.
	key := session.Key(testSecret, cdpticket.Purpose)
	if cl, ok := cdpticket.Check(key, bot.InstanceID, bot.BrowserID, u.Query().Get("ticket"), clockOf(m).Now()); !ok || cl.Session != bot.ID {
		t.Errorf("the ticket does not check with the workers' key: %+v %v", cl, ok)
	}

	open("bottok", "alices", http.StatusForbidden) // an author's app: not granted
	open(alice, "multi", http.StatusForbidden)     // the admin's app: alice not granted
	if st, body := call(t, srv, alice, "PUT", "/api/v1/apps/alices/job-users/automation", nil); st != http.StatusOK {
		t.Fatalf("alice grants the automation token: %d %s", st, body)
	}
	botOnAlices := open("bottok", "alices", http.StatusCreated)
	mine := open(alice, "alices", http.StatusCreated)
	open("bottok", "nope", http.StatusNotFound)
	if st, body := call(t, srv, "admintok", "POST", "/api/v1/apps/alices/disable", nil); st != http.StatusOK {
		t.Fatalf("disable: %d %s", st, body)
	}
	open(alice, "alices", http.StatusConflict)

	if st, body := call(t, srv, "bottok", "DELETE", "/api/v1/sessions/"+bot.ID, nil); st != http.StatusNoContent {
		t.Fatalf("delete: %d %s", st, body)
	}
	w.mu.Lock()
	closed := slices.Clone(w.closeAsks)
	w.mu.Unlock()
	if !slices.Equal(closed, []string{bot.InstanceID}) {
		t.Errorf("instances closed on the worker: %v, want %s", closed, bot.InstanceID)
	}

	// The worker closes alice's instance (its user closed it) and says so.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = contract.WorkerManagerClient{C: w.conn}.InstanceClosed(ctx, wire.ClosedInstance{ID: mine.InstanceID, Epoch: w.epoch(mine.InstanceID)})
	if err != nil {
		t.Fatal(err)
	}
	if st, body := call(t, srv, alice, "GET", "/api/v1/sessions/"+mine.ID, nil); st != http.StatusNotFound {
		t.Errorf("alice's session after its instance closed: %d %s", st, body)
	}
	if m.state.Has(sessions.Bucket, mine.ID) {
		t.Error("its record is still stored")
	}
	st, body := call(t, srv, "admintok", "GET", "/api/v1/sessions", nil)
	if st != http.StatusOK || !strings.Contains(body, botOnAlices.ID) || strings.Contains(body, bot.ID) {
		t.Errorf("the admin's list: %d %s", st, body)
	}

	// At its time the master closes the instance on its worker.
	clockOf(m).Advance(10 * time.Minute)
	w.mu.Lock()
	closed = slices.Clone(w.closeAsks)
	w.mu.Unlock()
	if !slices.Contains(closed, botOnAlices.InstanceID) {
		t.Errorf("an expired session's instance was not closed: %v", closed)
	}
	if st, body := call(t, srv, "admintok", "GET", "/metrics", nil); st != http.StatusOK ||
		!strings.Contains(body, `cloudbrowser_master_automation_sessions_ended_total{reason="timeout"} 1`) ||
		!strings.Contains(body, `cloudbrowser_master_automation_sessions_ended_total{reason="instance-closed"} 1`) ||
		!strings.Contains(body, "cloudbrowser_master_automation_sessions_created_total 3") {
		t.Errorf("metrics: %d\n%s", st, grepLines(body, "automation"))
	}
}

// TestSessionQuota: without a worker a session is refused 503 with
// Retry-After; the instance quotas apply to sessions (429 with the quota's
// words).
func TestSessionQuota(t *testing.T) {
	m, srv := sessionsMaster(t, func(c *Config) {
		q := wire.DefaultQuotas()
		q.InstancesPerUser = 1
		c.Quotas = &q
		c.AutomationQueueWait = -1 // answer at once (master/sessions tests the queue)
	})
	req := func() (int, http.Header, string) {
		return apiCall(t, srv, "bottok", "POST", "/api/v1/sessions", `{"app":"multi"}`)
	}
	if st, hdr, body := req(); st != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" || !strings.Contains(body, "starting") {
		t.Fatalf("no worker yet: %d %s", st, body)
	}
	addWorker(t, m, "w1")
	if st, _, body := req(); st != http.StatusCreated {
		t.Fatalf("first session: %d %s", st, body)
	}
	if st, _, body := req(); st != http.StatusTooManyRequests || !strings.Contains(body, "instances") {
		t.Fatalf("over the instance quota: %d %s", st, body)
	}
}

// grepLines keeps the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestSessionPublicBase: the host of a session's URLs: --public-url when
// set; else the request's, with the public port when the request came to
// the admin listener; https as the master judges it.
func TestSessionPublicBase(t *testing.T) {
	for _, tc := range []struct {
		name       string
		publicURL  string
		trust      bool
		publicAddr string
		host       string
		proto      string // X-Forwarded-Proto
		public     bool
		want       string
	}{
		{"public URL", "https://cb.example.com/", false, "0.0.0.0:8080", "10.0.0.1:9090", "", false, "https://cb.example.com"},
		{"on the public port", "", false, ":8080", "cb.test:8080", "", true, "http://cb.test:8080"},
		{"on the admin listener", "", false, "[::]:8443", "cb.test:9090", "", false, "http://cb.test:8443"},
		{"admin listener, IPv6", "", false, ":8080", "[::1]:9090", "", false, "http://[::1]:8080"},
		{"no public address", "", false, "", "127.0.0.1:9090", "", false, "http://127.0.0.1:9090"},
		{"forwarded https, trusted", "", true, ":8080", "cb.test", "https", true, "https://cb.test"},
		{"forwarded https, not trusted", "", false, ":8080", "cb.test", "https", true, "http://cb.test"},
	} {
		m := &Master{cfg: Config{PublicURL: tc.publicURL}, publicAddr: tc.publicAddr,
			scheme: httpsec.Scheme{TrustForwardedProto: tc.trust}}
		r := httptest.NewRequest("GET", "/api/v1/sessions", nil)
		r.Host = tc.host
		if tc.proto != "" {
			r.Header.Set("X-Forwarded-Proto", tc.proto)
		}
		if got := (sessionsHost{m}).PublicBase(r, tc.public); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
