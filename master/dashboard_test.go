package master

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/master/auth"
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
