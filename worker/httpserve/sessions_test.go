package httpserve

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
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
// user's request came over HTTPS: the master's public URL says so, or the
// proxy's signed X-Forwarded-Proto does (the proxy decides it, serving
// TLS or trusting its load balancer; the client's own value never
// reaches a worker).
func TestCookieFlags(t *testing.T) {
	for _, tc := range []struct {
		name       string
		rep        wire.RegisterReply
		proto      string
		unsigned   bool // not relayed by a proxy (no valid hop)
		wantSecure bool
	}{
		{"plain http", wire.RegisterReply{}, "", false, false},
		{"signed proto, master not told to trust it", wire.RegisterReply{}, "https", false, true},
		{"unsigned proto", wire.RegisterReply{}, "https", true, false},
		{"forwarded proto trusted", wire.RegisterReply{TrustForwardedProto: true}, "https", false, true},
		{"trusted, but not from a proxy", wire.RegisterReply{TrustForwardedProto: true}, "https", true, false},
		{"trusted, but http", wire.RegisterReply{TrustForwardedProto: true}, "http", false, false},
		{"public https url", wire.RegisterReply{PublicHTTPS: true}, "", false, true},
		{"public https url, proto says http", wire.RegisterReply{PublicHTTPS: true}, "http", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := newUsers(testSecret)
			u.SetCluster(tc.rep)
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
	u.End(wire.SessionRevocation{ID: cl.ID, User: "alice", Expires: now.Add(session.TTL).Unix()})
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
	u.SetCluster(wire.RegisterReply{AdminTag: tag})
	if !u.adminViewer(req) {
		t.Fatal("refused under the right token")
	}
	u.End(wire.SessionRevocation{ID: cl.ID, Expires: time.Now().Add(time.Hour).Unix()})
	if u.adminViewer(req) {
		t.Fatal("accepted after logout")
	}
	u.SetCluster(wire.RegisterReply{AdminTag: session.TokenTag(testSecret, "admin-token-2")})
	if u.adminViewer(req) {
		t.Fatal("accepted under a new token")
	}
}

func TestUserCookies(t *testing.T) {
	u := newUsers(testSecret)
	other := newUsers("another-secret-another-secret!!")
	rec := httptest.NewRecorder()
	id := u.identify(rec, httptest.NewRequest("GET", "/", nil))
	cookie := rec.Result().Cookies()[0]
	if !cookie.HttpOnly || cookie.SameSite != http.SameSiteLaxMode {
		t.Fatalf("cookie flags: %+v", cookie)
	}
	for _, tc := range []struct {
		name  string
		value string
		u     *Users
		want  string
	}{
		{"valid", cookie.Value, u, id},
		{"other cluster", cookie.Value, other, ""},
		{"forged id", base64.RawURLEncoding.EncodeToString([]byte("anon-someoneelse1")) + "." + strings.SplitN(cookie.Value, ".", 2)[1], u, ""},
		{"a login session is not an identity", u.sessions.Issue("anon-someoneelse1", time.Now()), u, ""},
		{"no signature", id, u, ""},
		{"garbage", "%%%", u, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.AddCookie(&http.Cookie{Name: userCookie, Value: tc.value})
			if got := tc.u.current(r); got != tc.want {
				t.Fatalf("current = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestRevokedSessions: a session issued at or before a revocation of its
// user is refused; later sessions and other users' are not; the master's
// list at registration replaces what the worker had.
func TestRevokedSessions(t *testing.T) {
	u := newUsers(testSecret)
	now := time.Now()
	req := func(user string, issued time.Time) *http.Request {
		r := httptest.NewRequest("GET", "/", nil)
		r.AddCookie(&http.Cookie{Name: sessionCookie, Value: u.sessions.Issue(user, issued)})
		return r
	}
	u.Revoke("alice", now.Unix())
	u.Revoke("alice", now.Unix()-100) // an older revocation does not shorten it
	for _, tc := range []struct {
		name   string
		user   string
		issued time.Time
		want   string
	}{
		{"issued before", "alice", now.Add(-time.Minute), ""},
		{"issued the same second", "alice", now, ""},
		{"issued after", "alice", now.Add(2 * time.Second), "alice"},
		{"another user", "bob", now.Add(-time.Minute), "bob"},
	} {
		if got, _ := u.loggedIn(req(tc.user, tc.issued)); got != tc.want {
			t.Errorf("%s: loggedIn = %q, want %q", tc.name, got, tc.want)
		}
	}
	u.SetRevoked([]wire.Revocation{{User: "bob", Before: now.Unix()}})
	if got, _ := u.loggedIn(req("alice", now.Add(-time.Minute))); got != "alice" {
		t.Errorf("after setRevoked alice's revocation should be gone: %q", got)
	}
	if got, _ := u.loggedIn(req("bob", now.Add(-time.Minute))); got != "" {
		t.Errorf("after setRevoked bob's old session should be refused: %q", got)
	}
}
