package master

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/auth"
	"github.com/cloudbrowser-go/cloudbrowser/master/sessions"
)

// TestDashboardCookie: the dashboard cookie works until logout, and a
// master with another admin token refuses every cookie issued under the
// old one; the cookie is Secure exactly when the user came over HTTPS.
func TestDashboardCookie(t *testing.T) {
	dir := t.TempDir()
	newMaster := func(token, publicURL string) (*Master, http.Handler) {
		m, err := New(Config{Secret: testSecret, AdminToken: token, DataDir: dir, Logger: zerolog.Nop(), PublicURL: publicURL})
		if err != nil {
			t.Fatal(err)
		}
		return m, m.admin.handler(false)
	}
	do := func(h http.Handler, method, target string, form url.Values, cookies ...*http.Cookie) *http.Response {
		var r *http.Request
		if form != nil {
			r = httptest.NewRequest(method, target, strings.NewReader(form.Encode()))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		} else {
			r = httptest.NewRequest(method, target, nil)
		}
		for _, c := range cookies {
			r.AddCookie(c)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec.Result()
	}
	login := func(h http.Handler, token string) *http.Cookie {
		t.Helper()
		csrf := &http.Cookie{Name: "cb_csrf", Value: strings.Repeat("a", 32)}
		res := do(h, "POST", "/admin/login", url.Values{"csrf": {csrf.Value}, "token": {token}}, csrf)
		for _, c := range res.Cookies() {
			if c.Name == auth.AdminCookie && c.Value != "" {
				return c
			}
		}
		t.Fatalf("login: %d, no cookie", res.StatusCode)
		return nil
	}
	signedIn := func(h http.Handler, c *http.Cookie) bool {
		return do(h, "GET", "/api/v1/history", nil, c).StatusCode == http.StatusOK
	}

	m, h := newMaster("token-one", "")
	c1 := login(h, "token-one")
	if c1.Secure {
		t.Error("cookie Secure over plain http")
	}
	c2 := login(h, "token-one")
	if !signedIn(h, c1) || !signedIn(h, c2) {
		t.Fatal("fresh cookies refused")
	}
	if res := do(h, "POST", "/admin/logout", nil, c1); res.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %d", res.StatusCode)
	}
	if signedIn(h, c1) {
		t.Fatal("cookie still valid after logout")
	}
	if !signedIn(h, c2) {
		t.Fatal("logout ended another dashboard session")
	}
	m.Close()

	// Restarted with the same token: the logout is remembered.
	m, h = newMaster("token-one", "")
	if signedIn(h, c1) || !signedIn(h, c2) {
		t.Fatal("after restart: logged-out cookie accepted or live one refused")
	}
	m.Close()

	// Restarted with a new token: every old cookie is refused.
	m, h = newMaster("token-two", "https://cb.example.com")
	defer m.Close()
	if signedIn(h, c2) {
		t.Fatal("cookie of the old admin token accepted")
	}
	c3 := login(h, "token-two")
	if !c3.Secure || !signedIn(h, c3) {
		t.Fatalf("new token's cookie: Secure=%v", c3.Secure)
	}
}

// TestDashboardSessions: the admin API's cluster status (and the
// dashboard's event stream) lists every principal's automation sessions
// with their worker, settings, live URL and state as the worker reports
// it, the wait queue and the limits, and no CDP ticket; the dashboard's
// cookie ends a session with DELETE /api/v1/sessions/{id} (with its CSRF
// header, not without).
func TestDashboardSessions(t *testing.T) {
	m, srv := sessionsMaster(t, func(c *Config) {
		c.AutomationMaxSessions, c.AutomationQueueMax, c.AutomationQueueWait = 3, 4, 7*time.Second
	})
	w := addWorker(t, m, "w1")
	status := func() wire.SessionsStatus {
		t.Helper()
		st, body := call(t, srv, "admintok", "GET", "/api/v1/cluster", nil)
		if st != http.StatusOK || strings.Contains(body, "ticket") {
			t.Fatalf("cluster status: %d (a ticket in it?)\n%s", st, body)
		}
		var cs wire.ClusterStatus
		if err := json.Unmarshal([]byte(body), &cs); err != nil || cs.Sessions == nil {
			t.Fatalf("cluster status without sessions: %v\n%s", err, body)
		}
		return *cs.Sessions
	}
	if got := status(); len(got.Sessions) != 0 || got.Waiting != 0 || got.QueueMax != 4 || got.QueueWait != "7s" || got.MaxPerPrincipal != 3 {
		t.Fatalf("no sessions: %+v", got)
	}
	open := func(token, body string) sessions.View {
		t.Helper()
		st, out := call(t, srv, token, "POST", "/api/v1/sessions", []byte(body))
		if st != http.StatusCreated {
			t.Fatalf("open %s: %d %s", body, st, out)
		}
		var v sessions.View
		_ = json.Unmarshal([]byte(out), &v)
		return v
	}
	bot := open("bottok", `{"app":"multi","keepAlive":"1m","idleTimeout":"2m"}`)
	mine := open("admintok", `{"app":"multi"}`)

	byID := func(ss wire.SessionsStatus) map[string]wire.SessionStatus {
		out := map[string]wire.SessionStatus{}
		for _, s := range ss.Sessions {
			out[s.ID] = s
		}
		return out
	}
	got := byID(status())
	b, a := got[bot.ID], got[mine.ID]
	if len(got) != 2 || b.App != "multi" || b.Owner != "automation" || a.Owner != "admin" || b.Worker != "w1" ||
		b.InstanceID != bot.InstanceID || b.IdleTimeout != "2m0s" || b.KeepAlive != "1m0s" || a.KeepAlive != "0s" ||
		!b.ExpiresAt.Equal(bot.ExpiresAt) || b.LiveURL != bot.LiveURL || a.LiveURL != mine.LiveURL {
		t.Fatalf("sessions %+v, opened %+v and %+v", got, bot, mine)
	}
	if b.State != wire.SessionNoClient || a.State != wire.SessionNoClient {
		t.Fatalf("states before any client: %s, %s", b.State, a.State)
	}

	// The worker reports both browsers held by their sessions, one with
	// its client connected, the other's gone within its keep-alive.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l := wire.Load{Automated: []string{bot.InstanceID + "/" + bot.BrowserID, mine.InstanceID + "/" + mine.BrowserID},
		AutomationClients: []string{mine.InstanceID + "/" + mine.BrowserID}}
	if err := (contract.WorkerManagerClient{C: w.conn}).Report(ctx, l); err != nil {
		t.Fatal(err)
	}
	got = byID(status())
	if got[bot.ID].State != wire.SessionKeepAlive || got[mine.ID].State != wire.SessionConnected {
		t.Fatalf("states once held: %s (client gone, keep-alive), %s (client connected)", got[bot.ID].State, got[mine.ID].State)
	}

	// The dashboard's event stream carries them, live URLs and all.
	cookie := dashboardLogin(t, srv)
	ev := firstEvent(t, srv, cookie)
	if ev.Sessions == nil || len(ev.Sessions.Sessions) != 2 || byID(*ev.Sessions)[bot.ID].LiveURL != bot.LiveURL {
		t.Fatalf("event stream's sessions: %+v", ev.Sessions)
	}

	// The dashboard ends the bot's session (another principal's) with its
	// cookie: the CSRF header is required.
	del := func(header bool) int {
		req, _ := http.NewRequest("DELETE", srv.URL+"/api/v1/sessions/"+bot.ID, nil)
		req.AddCookie(cookie)
		if header {
			req.Header.Set("X-CloudBrowser-Dashboard", "1")
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := del(false); st != http.StatusForbidden {
		t.Fatalf("DELETE with the cookie, no CSRF header: %d", st)
	}
	if st := del(true); st != http.StatusNoContent {
		t.Fatalf("DELETE from the dashboard: %d", st)
	}
	w.mu.Lock()
	closed := slices.Clone(w.closeAsks)
	w.mu.Unlock()
	if !slices.Equal(closed, []string{bot.InstanceID}) {
		t.Errorf("instances closed: %v", closed)
	}
	if got := byID(status()); len(got) != 1 || got[mine.ID].ID == "" {
		t.Fatalf("sessions after the end: %+v", got)
	}

	// Its worker's connection drops: the session stays (until the worker
	// is declared dead), shown as unreachable.
	w.conn.Close()
	testutil.Eventually(t, 5*time.Second, func() error {
		if s := byID(status())[mine.ID]; s.State != wire.SessionWorkerDown {
			return fmt.Errorf("state with its worker disconnected: %q", s.State)
		}
		return nil
	})
}

// dashboardLogin signs in to the dashboard with the admin token admintok
// and returns its cookie.
func dashboardLogin(t *testing.T, srv *httptest.Server) *http.Cookie {
	t.Helper()
	csrf := &http.Cookie{Name: "cb_csrf", Value: strings.Repeat("b", 32)}
	form := url.Values{"csrf": {csrf.Value}, "token": {"admintok"}}
	req, _ := http.NewRequest("POST", srv.URL+"/admin/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(csrf)
	cl := *srv.Client()
	cl.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, c := range resp.Cookies() {
		if c.Name == auth.AdminCookie && c.Value != "" {
			return &http.Cookie{Name: c.Name, Value: c.Value}
		}
	}
	t.Fatalf("dashboard login: %d, no cookie", resp.StatusCode)
	return nil
}

// firstEvent reads the first status of the dashboard's event stream.
func firstEvent(t *testing.T, srv *httptest.Server, cookie *http.Cookie) wire.ClusterStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/v1/events", nil)
	req.AddCookie(cookie)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var st wire.ClusterStatus
			if err := json.Unmarshal([]byte(data), &st); err != nil {
				t.Fatal(err)
			}
			return st
		}
	}
	t.Fatalf("event stream: %d, no status (%v)", resp.StatusCode, sc.Err())
	return wire.ClusterStatus{}
}
