package worker

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strings"

	"github.com/cloudbrowser-go/cloudbrowser/internal/ids"
	"github.com/cloudbrowser-go/cloudbrowser/internal/secret"
)

// userCookie carries an anonymous visitor's identity, signed with a key
// derived from the cluster secret so every worker accepts it and nobody can
// forge another visitor's id.
const userCookie = "cb_user"

type users struct{ key []byte }

func newUsers(clusterSecret string) *users {
	return &users{key: secret.Derive(clusterSecret, "user-cookie", 32)}
}

func (u *users) sign(id string) string {
	m := hmac.New(sha256.New, u.key)
	m.Write([]byte(id))
	return id + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// current returns the visitor's id, or "" if there is no valid cookie.
func (u *users) current(r *http.Request) string {
	c, err := r.Cookie(userCookie)
	if err != nil {
		return ""
	}
	id, _, ok := strings.Cut(c.Value, ".")
	if !ok || !strings.HasPrefix(id, "anon-") || !hmac.Equal([]byte(u.sign(id)), []byte(c.Value)) {
		return ""
	}
	return id
}

// identify returns the visitor's id, issuing a new anonymous one if needed.
func (u *users) identify(w http.ResponseWriter, r *http.Request) string {
	if id := u.current(r); id != "" {
		return id
	}
	id := "anon-" + ids.Random(16)
	http.SetCookie(w, &http.Cookie{
		Name: userCookie, Value: u.sign(id), Path: "/", HttpOnly: true,
		SameSite: http.SameSiteLaxMode, MaxAge: 365 * 24 * 3600,
		Secure: r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https",
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
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https"})
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
