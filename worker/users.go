package worker

import (
	"crypto/hmac"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/ids"
	"github.com/cloudbrowser-go/cloudbrowser/internal/session"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// userCookie carries an anonymous visitor's identity, signed like a session
// (internal/session, with its own key) so every worker accepts it and
// nobody can forge another visitor's id.
const userCookie = "cb_user"

// sessionCookie carries a logged-in user's session (internal/session).
const sessionCookie = "cb_session"

type users struct {
	anons    *session.Codec // anonymous identities
	sessions *session.Codec
	admins   *session.Codec // the master's dashboard sessions

	mu sync.Mutex
	// revoked: a user's sessions issued at or before this (Unix s) are
	// refused (password changed, account removed), from the master.
	revoked map[string]int64
}

// revoke refuses user's sessions issued at or before the given second.
func (u *users) revoke(user string, before int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.revoked[user] = max(u.revoked[user], before)
}

// setRevoked replaces the revocations with the master's (at registration).
func (u *users) setRevoked(revs []wire.Revocation) {
	m := make(map[string]int64, len(revs))
	for _, r := range revs {
		m[r.User] = max(m[r.User], r.Before)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.revoked = m
}

func (u *users) isRevoked(user string, issued time.Time) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	before, ok := u.revoked[user]
	return ok && issued.Unix() <= before
}

// adminViewer reports whether the request carries the admin dashboard's
// session: admins may watch any browser, read-only.
func (u *users) adminViewer(r *http.Request) bool {
	c, err := r.Cookie("cb_admin")
	if err != nil {
		return false
	}
	user, _, ok := u.admins.Check(c.Value, time.Now())
	return ok && user == "admin"
}

// anonTTL is how long an anonymous visitor keeps their identity (and so
// their instances) in one browser.
const anonTTL = 365 * 24 * time.Hour

func newUsers(clusterSecret string) *users {
	anons := session.NewFor(clusterSecret, "anonymous-identity")
	anons.TTL = anonTTL
	return &users{anons: anons, sessions: session.New(clusterSecret), admins: session.NewFor(clusterSecret, "admin-session"),
		revoked: map[string]int64{}}
}

// setKeys installs the session keys the master handed over (the worker's
// own secret may be only its role key, from which they cannot be derived).
func (u *users) setKeys(k wire.ClusterKeys) {
	for _, x := range []struct {
		c   *session.Codec
		key []byte
	}{{u.sessions, k.Session}, {u.admins, k.AdminSession}, {u.anons, k.Anonymous}} {
		if len(x.key) > 0 {
			x.c.SetKey(x.key)
		}
	}
}

// loggedIn returns the user of a valid session ("" if none) and whether the
// session should be re-issued.
func (u *users) loggedIn(r *http.Request) (string, bool) {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return "", false
	}
	now := time.Now()
	user, issued, ok := u.sessions.Parse(c.Value, now)
	if !ok || u.isRevoked(user, issued) {
		return "", false
	}
	return user, now.Sub(issued) > u.sessions.RotateAfter
}

func secure(r *http.Request) bool {
	return r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https"
}

// login starts a session for user.
func (u *users) login(w http.ResponseWriter, r *http.Request, user string) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: u.sessions.Issue(user, time.Now()), Path: "/",
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: secure(r), MaxAge: int(u.sessions.TTL.Seconds())})
}

// logout ends the session in this browser.
func (u *users) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: secure(r), MaxAge: -1})
}

// current returns the logged-in user, else the anonymous visitor's id, or
// "" if there is neither.
func (u *users) current(r *http.Request) string {
	if user, _ := u.loggedIn(r); user != "" {
		return user
	}
	c, err := r.Cookie(userCookie)
	if err != nil {
		return ""
	}
	id, _, ok := u.anons.Check(c.Value, time.Now())
	if !ok || !strings.HasPrefix(id, "anon-") {
		return ""
	}
	return id
}

// identify returns the visitor's id, issuing a new anonymous one if needed
// and renewing an aging session.
func (u *users) identify(w http.ResponseWriter, r *http.Request) string {
	if user, rotate := u.loggedIn(r); user != "" {
		if rotate {
			u.login(w, r, user)
		}
		return user
	}
	if id := u.current(r); id != "" {
		return id
	}
	id := "anon-" + ids.Random(16)
	http.SetCookie(w, &http.Cookie{
		Name: userCookie, Value: u.anons.Issue(id, time.Now()), Path: "/", HttpOnly: true,
		SameSite: http.SameSiteLaxMode, MaxAge: int(anonTTL.Seconds()), Secure: secure(r),
	})
	return id
}

// csrfCookie holds the double-submit token every form of the worker
// carries; a cross-site form cannot read it, so cannot echo it.
const csrfCookie = "cb_csrf"

// csrf returns the visitor's form token, issuing one if needed.
func (u *users) csrf(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) == 32 {
		return c.Value
	}
	tok := ids.Random(32)
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: tok, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: secure(r)})
	return tok
}

// checkCSRF verifies a form post's token against the cookie.
func (u *users) checkCSRF(r *http.Request) bool {
	c, err := r.Cookie(csrfCookie)
	if err != nil || len(c.Value) != 32 {
		return false
	}
	return hmac.Equal([]byte(c.Value), []byte(r.PostFormValue("csrf")))
}
