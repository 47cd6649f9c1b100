package httpserve

import (
	"crypto/hmac"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/cdpticket"
	"github.com/cloudbrowser-go/cloudbrowser/internal/httpsec"
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

// Users are the visitors as the worker knows them: anonymous identities,
// login sessions, the dashboard's admin sessions, and the master's
// revocations and logouts.
type Users struct {
	anons    *session.Codec // anonymous identities
	sessions *session.Codec
	// adminsBase checks the master's dashboard sessions once bound to the
	// admin token's tag the master gives at registration (admins).
	adminsBase *session.Codec
	admins     atomic.Pointer[session.Codec]
	// scheme says whether a request came over HTTPS (from the master).
	scheme atomic.Pointer[httpsec.Scheme]
	// cdpKey checks automation sessions' tickets (internal/cdpticket).
	cdpKey atomic.Pointer[[]byte]

	mu sync.Mutex
	// revoked: a user's sessions issued at or before this (Unix s) are
	// refused (password changed, account removed), from the master.
	revoked map[string]int64
	// ended: logged-out session ids (user and dashboard sessions) -> when
	// their last value expires (Unix s).
	ended map[string]int64
}

// SetCluster applies the master's settings from a registration.
func (u *Users) SetCluster(rep wire.RegisterReply) {
	u.scheme.Store(&httpsec.Scheme{AlwaysHTTPS: rep.PublicHTTPS, TrustForwardedProto: rep.TrustForwardedProto})
	if rep.AdminTag != "" {
		u.admins.Store(u.adminsBase.Bound(rep.AdminTag))
	} else {
		u.admins.Store(nil) // a master without tags: no dashboard viewers
	}
	u.setEnded(rep.EndedSessions)
}

// https reports whether the user's request came over HTTPS.
func (u *Users) https(r *http.Request) bool {
	if s := u.scheme.Load(); s != nil && s.AlwaysHTTPS {
		return true
	}
	if viaProxy(r) {
		// A proxy replaces X-Forwarded-Proto on every request it relays
		// with what it concluded itself (it serves TLS, a trusted load
		// balancer said so, the public URL is https) and signs it: on a
		// verified hop it is the proxy's word, not the client's, whatever
		// --trust-forwarded-proto the master was given.
		return strings.EqualFold(strings.TrimSpace(r.Header.Get("X-Forwarded-Proto")), "https")
	}
	return r.TLS != nil
}

// End refuses a session's values from now on (a logout).
func (u *Users) End(rev wire.SessionRevocation) {
	u.mu.Lock()
	defer u.mu.Unlock()
	now := time.Now().Unix()
	for id, exp := range u.ended {
		if exp <= now {
			delete(u.ended, id)
		}
	}
	u.ended[rev.ID] = max(u.ended[rev.ID], rev.Expires)
}

// setEnded replaces the ended sessions with the master's (at registration).
func (u *Users) setEnded(revs []wire.SessionRevocation) {
	m := latest(revs, func(r wire.SessionRevocation) (string, int64) { return r.ID, r.Expires })
	u.mu.Lock()
	defer u.mu.Unlock()
	u.ended = m
}

func (u *Users) isEnded(id string, now time.Time) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	exp, ok := u.ended[id]
	return ok && now.Unix() < exp
}

// Revoke refuses user's sessions issued at or before the given second.
func (u *Users) Revoke(user string, before int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.revoked[user] = max(u.revoked[user], before)
}

// SetRevoked replaces the revocations with the master's (at registration).
func (u *Users) SetRevoked(revs []wire.Revocation) {
	m := latest(revs, func(r wire.Revocation) (string, int64) { return r.User, r.Before })
	u.mu.Lock()
	defer u.mu.Unlock()
	u.revoked = m
}

func (u *Users) isRevoked(user string, issued time.Time) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	before, ok := u.revoked[user]
	return ok && issued.Unix() <= before
}

// adminViewer reports whether the request carries the admin dashboard's
// session: admins may watch any browser, read-only.
func (u *Users) adminViewer(r *http.Request) bool {
	_, ok := u.adminSession(r)
	return ok
}

// adminSession returns the id of the request's valid dashboard session:
// signed under the master's current admin token, not logged out.
func (u *Users) adminSession(r *http.Request) (string, bool) {
	c, err := r.Cookie("cb_admin")
	codec := u.admins.Load()
	if err != nil || codec == nil {
		return "", false
	}
	now := time.Now()
	cl, ok := codec.Claims(c.Value, now)
	if !ok || cl.User != "admin" || u.isEnded(cl.ID, now) {
		return "", false
	}
	return cl.ID, true
}

// anonTTL is how long an anonymous visitor keeps their identity (and so
// their instances) in one browser.
const anonTTL = 365 * 24 * time.Hour

func newUsers(clusterSecret string) *Users {
	anons := session.NewFor(clusterSecret, "anonymous-identity")
	anons.TTL = anonTTL
	u := &Users{anons: anons, sessions: session.New(clusterSecret), adminsBase: session.NewFor(clusterSecret, "admin-session"),
		revoked: map[string]int64{}, ended: map[string]int64{}}
	key := session.Key(clusterSecret, cdpticket.Purpose)
	u.cdpKey.Store(&key)
	return u
}

// session returns the request's valid login session: signed, unexpired,
// not revoked with its user's sessions, not logged out.
func (u *Users) session(r *http.Request) (session.Claims, bool) {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return session.Claims{}, false
	}
	now := time.Now()
	cl, ok := u.sessions.Claims(c.Value, now)
	if !ok || u.isRevoked(cl.User, cl.Issued) || u.isEnded(cl.ID, now) {
		return session.Claims{}, false
	}
	return cl, true
}

// SetKeys installs the session keys the master handed over (the worker's
// own secret may be only its role key, from which they cannot be derived).
func (u *Users) SetKeys(k wire.ClusterKeys) {
	for _, x := range []struct {
		c   *session.Codec
		key []byte
	}{{u.sessions, k.Session}, {u.adminsBase, k.AdminSession}, {u.anons, k.Anonymous}} {
		if len(x.key) > 0 {
			x.c.SetKey(x.key)
		}
	}
	if len(k.Automation) > 0 {
		key := append([]byte(nil), k.Automation...)
		u.cdpKey.Store(&key)
	}
}

// loggedIn returns the user of a valid session ("" if none) and whether the
// session should be re-issued.
func (u *Users) loggedIn(r *http.Request) (string, bool) {
	cl, ok := u.session(r)
	if !ok {
		return "", false
	}
	return cl.User, time.Since(cl.Issued) > u.sessions.RotateAfter
}

// login starts a new session for user.
func (u *Users) login(w http.ResponseWriter, r *http.Request, user string) {
	u.setSession(w, r, u.sessions.Issue(user, time.Now()))
}

// renew re-issues the request's session (same id, so a logout still ends
// the older values).
func (u *Users) renew(w http.ResponseWriter, r *http.Request) {
	if cl, ok := u.session(r); ok {
		u.setSession(w, r, u.sessions.IssueID(cl.User, cl.ID, time.Now()))
	}
}

func (u *Users) setSession(w http.ResponseWriter, r *http.Request, v string) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: v, Path: "/",
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: u.https(r), MaxAge: int(u.sessions.TTL.Seconds())})
}

// logout forgets the session in this browser (the caller ends it on the
// cluster).
func (u *Users) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: u.https(r), MaxAge: -1})
}

// current returns the logged-in user, else the anonymous visitor's id, or
// "" if there is neither.
func (u *Users) current(r *http.Request) string {
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
func (u *Users) identify(w http.ResponseWriter, r *http.Request) string {
	if user, rotate := u.loggedIn(r); user != "" {
		if rotate {
			u.renew(w, r)
		}
		return user
	}
	if id := u.current(r); id != "" {
		return id
	}
	id := "anon-" + ids.Random(16)
	u.setAnon(w, r, id)
	return id
}

// setAnon gives the visitor the anonymous identity id.
func (u *Users) setAnon(w http.ResponseWriter, r *http.Request, id string) {
	http.SetCookie(w, &http.Cookie{
		Name: userCookie, Value: u.anons.Issue(id, time.Now()), Path: "/", HttpOnly: true,
		SameSite: http.SameSiteLaxMode, MaxAge: int(anonTTL.Seconds()), Secure: u.https(r),
	})
}

// csrfCookie holds the double-submit token every form of the worker
// carries; a cross-site form cannot read it, so cannot echo it.
const csrfCookie = "cb_csrf"

// csrf returns the visitor's form token, issuing one if needed.
func (u *Users) csrf(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) == 32 {
		return c.Value
	}
	tok := ids.Random(32)
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: tok, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: u.https(r)})
	return tok
}

// checkCSRF verifies a form post's token against the cookie.
func (u *Users) checkCSRF(r *http.Request) bool {
	c, err := r.Cookie(csrfCookie)
	if err != nil || len(c.Value) != 32 {
		return false
	}
	return hmac.Equal([]byte(c.Value), []byte(r.PostFormValue("csrf")))
}

// latest maps each item's key to the largest of its values: the master may
// list one session or user more than once.
func latest[T any](items []T, kv func(T) (string, int64)) map[string]int64 {
	m := make(map[string]int64, len(items))
	for _, it := range items {
		k, v := kv(it)
		m[k] = max(m[k], v)
	}
	return m
}
