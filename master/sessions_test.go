package master

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/session"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/state"
)

// TestEndedSessionsExpire: logouts are kept in the state store (so a
// restarted master still hands them to workers) until every value of the
// session has expired, then pruned; bad input is refused.
func TestEndedSessionsExpire(t *testing.T) {
	path := filepath.Join(t.TempDir(), state.FileName)
	st, err := state.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	var pushed []wire.SessionRevocation
	e := &endedSessions{st: st, now: clock, log: zerolog.Nop(),
		push: func(_ context.Context, r wire.SessionRevocation) { pushed = append(pushed, r) }}
	a, b := session.NewID(), session.NewID()
	ctx := context.Background()
	steps := []struct {
		name    string
		advance time.Duration
		rev     wire.SessionRevocation
		wantErr bool
		want    []string // ids listed afterwards
	}{
		{"first logout", 0, wire.SessionRevocation{ID: a, User: "alice", Expires: now.Add(session.TTL).Unix()}, false, []string{a}},
		{"expiry beyond one lifetime is capped", time.Hour, wire.SessionRevocation{ID: b, User: "bob", Expires: now.Add(100 * session.TTL).Unix()}, false, []string{a, b}},
		{"invalid id", 0, wire.SessionRevocation{ID: "../x", Expires: now.Add(time.Hour).Unix()}, true, []string{a, b}},
		{"a's values have all expired", session.TTL - time.Hour, wire.SessionRevocation{}, true, []string{b}},
		{"b's too", time.Hour, wire.SessionRevocation{}, true, []string{}},
	}
	for _, s := range steps {
		now = now.Add(s.advance)
		err := e.end(ctx, s.rev)
		if (err != nil) != s.wantErr {
			t.Fatalf("%s: err %v", s.name, err)
		}
		var got []string
		for _, r := range e.list() {
			got = append(got, r.ID)
			if r.Expires > now.Add(session.TTL).Unix() {
				t.Fatalf("%s: expiry %d beyond one session lifetime", s.name, r.Expires)
			}
		}
		slices.Sort(got)
		want := slices.Clone(s.want)
		slices.Sort(want)
		if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("%s: listed %v, want %v", s.name, got, want)
		}
		if s.name == "first logout" {
			// A restarted master reads the same list.
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			if st, err = state.Open(path); err != nil {
				t.Fatal(err)
			}
			e.st = st
			if l := e.list(); len(l) != 1 || l[0] != s.rev {
				t.Fatalf("after reopening: %v", l)
			}
		}
	}
	e.prune()
	if n := len(st.All(endedBucket)); n != 0 {
		t.Fatalf("%d expired entries left in the store", n)
	}
	if len(pushed) != 2 {
		t.Fatalf("pushed %d revocations to workers, want 2", len(pushed))
	}
	_ = st.Close()
}

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
		return m, m.adminHandler(false)
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
			if c.Name == adminCookie && c.Value != "" {
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
