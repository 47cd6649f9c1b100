// Package session signs and checks login session cookies. A session is
// stateless: any worker holding the cluster secret can check it, so no
// shared session store is needed. It carries the user, when it was issued,
// when it expires and the session's id, under an HMAC-SHA256 of a key
// derived from the cluster secret.
//
// The id stays the same when a session is re-issued (rotation), so ending a
// session (logout) refuses every value it ever had: the cluster keeps a
// list of ended ids for one session lifetime.
package session

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/ids"
	"github.com/cloudbrowser-go/cloudbrowser/internal/secret"
)

// TTL is how long a login session lasts without being renewed; a
// revocation older than this has nothing left to refuse.
const TTL = 12 * time.Hour

// Codec issues and checks session values.
type Codec struct {
	key atomic.Pointer[[]byte] // replaced by SetKey while in use
	// TTL is how long a session lasts without being renewed.
	TTL time.Duration
	// RotateAfter: a session older than this is re-issued on use, so an
	// active user stays logged in and a stolen old value expires sooner.
	RotateAfter time.Duration
}

// Claims is what a valid session value says.
type Claims struct {
	User   string
	Issued time.Time // to the second
	// ID names the session across re-issues (32 url-safe characters).
	ID string
}

// New returns a codec keyed from the cluster secret.
func New(clusterSecret string) *Codec { return NewFor(clusterSecret, "session") }

// NewFor returns a codec for another kind of session (e.g. the admin
// dashboard's), whose values are not valid as user sessions.
func NewFor(clusterSecret, purpose string) *Codec {
	return WithKey(Key(clusterSecret, purpose))
}

// Key is the key NewFor derives for purpose, for handing to a process that
// does not hold the cluster secret (a worker with its role key).
func Key(clusterSecret, purpose string) []byte { return secret.Derive(clusterSecret, purpose, 32) }

// WithKey returns a codec with a key from Key.
func WithKey(key []byte) *Codec {
	c := &Codec{TTL: TTL, RotateAfter: time.Hour}
	c.SetKey(key)
	return c
}

// SetKey replaces the key: a worker gets the real one from the master once
// connected. Safe while other goroutines issue and check.
func (c *Codec) SetKey(key []byte) {
	k := append([]byte(nil), key...)
	c.key.Store(&k)
}

// Bound returns a codec whose values are valid only under the same
// binding: the dashboard binds its sessions to the admin token's tag, so a
// new token ends every dashboard session.
func (c *Codec) Bound(binding string) *Codec {
	m := hmac.New(sha256.New, *c.key.Load())
	m.Write([]byte("binding\x00" + binding))
	b := &Codec{TTL: c.TTL, RotateAfter: c.RotateAfter}
	b.SetKey(m.Sum(nil))
	return b
}

// TokenTag names a token without revealing it (HMAC under a key derived
// from the cluster secret), so workers can check which admin token a
// dashboard session was bound to without ever holding the token.
func TokenTag(clusterSecret, token string) string {
	m := hmac.New(sha256.New, secret.Derive(clusterSecret, "admin-token-tag", 32))
	m.Write([]byte(token))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (c *Codec) mac(payload string) string {
	m := hmac.New(sha256.New, *c.key.Load())
	m.Write([]byte(payload))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// NewID returns a fresh session id.
func NewID() string { return ids.Random(idLen) }

const idLen = 32

// ValidID reports whether s has the form of a session id.
func ValidID(s string) bool {
	if len(s) != idLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}

// Issue returns a value for a new session of user.
func (c *Codec) Issue(user string, now time.Time) string { return c.IssueID(user, NewID(), now) }

// IssueID returns a value for the session id of user (re-issue keeps the
// id).
func (c *Codec) IssueID(user, id string, now time.Time) string {
	p := base64.RawURLEncoding.EncodeToString([]byte(user)) + "." +
		strconv.FormatInt(now.Unix(), 10) + "." + strconv.FormatInt(now.Add(c.TTL).Unix(), 10) + "." + id
	return p + "." + c.mac(p)
}

// Check returns the user of a valid, unexpired value and whether it should
// be re-issued.
func (c *Codec) Check(v string, now time.Time) (user string, rotate, ok bool) {
	cl, ok := c.Claims(v, now)
	if !ok {
		return "", false, false
	}
	return cl.User, now.Sub(cl.Issued) > c.RotateAfter, true
}

// Parse returns the user of a valid, unexpired value and when it was
// issued (to the second), so sessions issued before a revocation can be
// refused.
func (c *Codec) Parse(v string, now time.Time) (user string, issued time.Time, ok bool) {
	cl, ok := c.Claims(v, now)
	return cl.User, cl.Issued, ok
}

// Claims checks a value and returns what it says. Values without a session
// id (issued before ids existed) are refused: they could not be ended by a
// logout.
func (c *Codec) Claims(v string, now time.Time) (Claims, bool) {
	i := strings.LastIndexByte(v, '.')
	if i < 0 || len(v) > 1024 {
		return Claims{}, false
	}
	p, sig := v[:i], v[i+1:]
	if !hmac.Equal([]byte(c.mac(p)), []byte(sig)) {
		return Claims{}, false
	}
	parts := strings.Split(p, ".")
	if len(parts) != 4 || !ValidID(parts[3]) {
		return Claims{}, false
	}
	u, err := base64.RawURLEncoding.DecodeString(parts[0])
	iat, err2 := strconv.ParseInt(parts[1], 10, 64)
	exp, err3 := strconv.ParseInt(parts[2], 10, 64)
	if err != nil || err2 != nil || err3 != nil || len(u) == 0 || now.Unix() >= exp {
		return Claims{}, false
	}
	return Claims{User: string(u), Issued: time.Unix(iat, 0), ID: parts[3]}, true
}
