package worker

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/session"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// TestSafeNext: a post-login redirect never leaves the application.
func TestSafeNext(t *testing.T) {
	app := wire.App{MountPoint: "app"}
	for _, tc := range []struct{ next, want string }{
		{"/app", "/app"},
		{"/app/a/w-1.x/b/b1", "/app/a/w-1.x/b/b1"},
		{"/app/a/x/", "/app/a/x/"},
		{"/app/?q=1", "/app?q=1"},
		{"/app/x/../y", "/app/y"},
		{"", "/app"},
		{"/app/../admin", "/app"},
		{"/app/./../admin/", "/app"},
		{"/app/%2e%2e/admin", "/app"},
		{"/app/%2E%2E/admin", "/app"},
		{"/app/..%2fadmin", "/app"},
		{"/app%2f..%2fadmin", "/app"},
		{"/app/..%5cadmin", "/app"},
		{"/app/..\\admin", "/app"},
		{"/app\\..\\admin", "/app"},
		{"//evil.example/app/", "/app"},
		{"/\\evil.example/app/", "/app"},
		{"https://evil.example/app/", "/app"},
		{"javascript:alert(1)", "/app"},
		{"app/x", "/app"},
		{"/application", "/app"},
		{"/other/app", "/app"},
		{"/app/\x00x", "/app"},
		{"/app/%0d%0aSet-Cookie:x", "/app"},
		{"/admin", "/app"},
	} {
		t.Run(tc.next, func(t *testing.T) {
			if got := safeNext(app, tc.next); got != tc.want {
				t.Fatalf("safeNext(%q) = %q, want %q", tc.next, got, tc.want)
			}
		})
	}
}

// TestCookieFlags: every cookie of the worker is Secure exactly when the
// user's request came over HTTPS, as configured by the master.
func TestCookieFlags(t *testing.T) {
	for _, tc := range []struct {
		name       string
		rep        wire.RegisterReply
		proto      string
		unsigned   bool // not relayed by a proxy (no valid hop)
		wantSecure bool
	}{
		{"plain http", wire.RegisterReply{}, "", false, false},
		{"forwarded proto not trusted", wire.RegisterReply{}, "https", false, false},
		{"forwarded proto trusted", wire.RegisterReply{TrustForwardedProto: true}, "https", false, true},
		{"trusted, but not from a proxy", wire.RegisterReply{TrustForwardedProto: true}, "https", true, false},
		{"trusted, but http", wire.RegisterReply{TrustForwardedProto: true}, "http", false, false},
		{"public https url", wire.RegisterReply{PublicHTTPS: true}, "", false, true},
		{"public https url, proto says http", wire.RegisterReply{PublicHTTPS: true}, "http", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newUsers(testSecret)
			u.setCluster(tc.rep)
			r := httptest.NewRequest("GET", "/app", nil)
			if !tc.unsigned {
				r = r.WithContext(context.WithValue(r.Context(), viaProxyKey{}, true))
			}
			if tc.proto != "" {
				r.Header.Set("X-Forwarded-Proto", tc.proto)
			}
			rec := httptest.NewRecorder()
			u.identify(rec, r)
			u.csrf(rec, r)
			u.login(rec, r, "alice")
			u.logout(rec, r)
			cookies := rec.Result().Cookies()
			if len(cookies) != 4 {
				t.Fatalf("cookies: %v", cookies)
			}
			for _, c := range cookies {
				if c.Secure != tc.wantSecure || !c.HttpOnly {
					t.Errorf("%s: Secure=%v HttpOnly=%v, want Secure=%v", c.Name, c.Secure, c.HttpOnly, tc.wantSecure)
				}
			}
		})
	}
}

// TestEndedSessions: a logged-out session id is refused in every value it
// had (also re-issued ones), other sessions of the user are not, and the
// master's list at registration replaces the worker's.
func TestEndedSessions(t *testing.T) {
	u := newUsers(testSecret)
	now := time.Now()
	req := func(v string) *http.Request {
		r := httptest.NewRequest("GET", "/", nil)
		r.AddCookie(&http.Cookie{Name: sessionCookie, Value: v})
		return r
	}
	old := u.sessions.Issue("alice", now.Add(-2*time.Hour))
	cl, ok := u.sessions.Claims(old, now)
	if !ok {
		t.Fatal("claims")
	}
	// The session is renewed (same id), and alice logs in elsewhere.
	rec := httptest.NewRecorder()
	u.renew(rec, req(old))
	renewed := rec.Result().Cookies()[0].Value
	if c2, _ := u.sessions.Claims(renewed, now); c2.ID != cl.ID || renewed == old {
		t.Fatalf("renewal changed the id or not the value: %+v", c2)
	}
	other := u.sessions.Issue("alice", now)
	u.end(wire.SessionRevocation{ID: cl.ID, User: "alice", Expires: now.Add(session.TTL).Unix()})
	for _, tc := range []struct {
		name, value, want string
	}{
		{"old value", old, ""},
		{"renewed value", renewed, ""},
		{"another session of the user", other, "alice"},
	} {
		if got, _ := u.loggedIn(req(tc.value)); got != tc.want {
			t.Errorf("%s: loggedIn = %q, want %q", tc.name, got, tc.want)
		}
	}
	// An expired entry no longer refuses (nothing it could refuse is left).
	u.setEnded([]wire.SessionRevocation{{ID: cl.ID, Expires: now.Add(-time.Second).Unix()}})
	if got, _ := u.loggedIn(req(renewed)); got != "alice" {
		t.Errorf("expired entry still refuses: %q", got)
	}
	u.setEnded([]wire.SessionRevocation{{ID: cl.ID, Expires: now.Add(time.Hour).Unix()}})
	if got, _ := u.loggedIn(req(renewed)); got != "" {
		t.Errorf("master's list not applied: %q", got)
	}
}

// TestAdminViewerBinding: the worker accepts dashboard sessions bound to
// the admin token the master names, not logged-out ones.
func TestAdminViewerBinding(t *testing.T) {
	u := newUsers(testSecret)
	tag := session.TokenTag(testSecret, "admin-token-1")
	v := session.NewFor(testSecret, "admin-session").Bound(tag).Issue("admin", time.Now())
	cl, _ := session.NewFor(testSecret, "admin-session").Bound(tag).Claims(v, time.Now())
	req := httptest.NewRequest("GET", "/", nil)
	req.AddCookie(&http.Cookie{Name: "cb_admin", Value: v})
	if u.adminViewer(req) {
		t.Fatal("accepted before the master named the token")
	}
	u.setCluster(wire.RegisterReply{AdminTag: tag})
	if !u.adminViewer(req) {
		t.Fatal("refused under the right token")
	}
	u.end(wire.SessionRevocation{ID: cl.ID, Expires: time.Now().Add(time.Hour).Unix()})
	if u.adminViewer(req) {
		t.Fatal("accepted after logout")
	}
	u.setCluster(wire.RegisterReply{AdminTag: session.TokenTag(testSecret, "admin-token-2")})
	if u.adminViewer(req) {
		t.Fatal("accepted under a new token")
	}
}
