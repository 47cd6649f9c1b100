// Package session signs and checks login session cookies. A session is
// stateless: any worker holding the cluster secret can check it, so no
// shared session store is needed. It carries the user, when it was issued
// and when it expires, under an HMAC-SHA256 of a key derived from the
// cluster secret.
package session

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

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

func (c *Codec) mac(payload string) string {
	m := hmac.New(sha256.New, *c.key.Load())
	m.Write([]byte(payload))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Issue returns a session value for user.
func (c *Codec) Issue(user string, now time.Time) string {
	p := base64.RawURLEncoding.EncodeToString([]byte(user)) + "." +
		strconv.FormatInt(now.Unix(), 10) + "." + strconv.FormatInt(now.Add(c.TTL).Unix(), 10)
	return p + "." + c.mac(p)
}

// Check returns the user of a valid, unexpired value and whether it should
// be re-issued.
func (c *Codec) Check(v string, now time.Time) (user string, rotate, ok bool) {
	user, issued, ok := c.Parse(v, now)
	if !ok {
		return "", false, false
	}
	return user, now.Sub(issued) > c.RotateAfter, true
}

// Parse returns the user of a valid, unexpired value and when it was
// issued (to the second), so sessions issued before a revocation can be
// refused.
func (c *Codec) Parse(v string, now time.Time) (user string, issued time.Time, ok bool) {
	i := strings.LastIndexByte(v, '.')
	if i < 0 || len(v) > 1024 {
		return "", time.Time{}, false
	}
	p, sig := v[:i], v[i+1:]
	if !hmac.Equal([]byte(c.mac(p)), []byte(sig)) {
		return "", time.Time{}, false
	}
	parts := strings.Split(p, ".")
	if len(parts) != 3 {
		return "", time.Time{}, false
	}
	u, err := base64.RawURLEncoding.DecodeString(parts[0])
	iat, err2 := strconv.ParseInt(parts[1], 10, 64)
	exp, err3 := strconv.ParseInt(parts[2], 10, 64)
	if err != nil || err2 != nil || err3 != nil || len(u) == 0 || now.Unix() >= exp {
		return "", time.Time{}, false
	}
	return string(u), time.Unix(iat, 0), true
}
