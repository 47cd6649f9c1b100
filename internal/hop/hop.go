// Package hop authenticates the HTTP hop from a cluster proxy to a worker.
//
// Workers must not believe X-Forwarded-For or X-Forwarded-Proto from just
// anyone who can reach their port: the login limits key on the client
// address. So every request a proxy relays carries
//
//	X-CB-Hop: v1.<unix seconds>.<base64url HMAC-SHA256>
//
// over the timestamp, method, Host, request-URI and the X-Forwarded-For and
// X-Forwarded-Proto values the proxy set. The key comes from the master over
// the authenticated RMI session (never read from a local file), and the
// worker refuses requests without a valid hop.
package hop

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Header carries the hop signature.
const Header = "X-CB-Hop"

// Window is how far a hop's timestamp may be from the worker's clock, either
// way: it absorbs clock skew between hosts and bounds replays.
const Window = 60 * time.Second

// KeyLen is the length of hop keys.
const KeyLen = 32

const version = "v1"

var (
	ErrMissing   = errors.New("no hop signature")
	ErrMalformed = errors.New("malformed hop signature")
	ErrStale     = errors.New("hop signature outside the time window")
	ErrBadMAC    = errors.New("hop signature does not match")
	ErrNoKey     = errors.New("no hop key yet")
)

// Fields are the signed parts of a relayed request, as written on the wire.
type Fields struct {
	Method, Host, URI string
	// ForwardedFor and Proto are the X-Forwarded-For and X-Forwarded-Proto
	// values (several header lines joined with ", ").
	ForwardedFor, Proto string
}

// FieldsOf reads the signed parts of a request received by a worker.
func FieldsOf(r *http.Request) Fields {
	return Fields{Method: r.Method, Host: r.Host, URI: r.RequestURI,
		ForwardedFor: strings.Join(r.Header.Values("X-Forwarded-For"), ", "),
		Proto:        strings.Join(r.Header.Values("X-Forwarded-Proto"), ", ")}
}

// mac appends the MAC of ts and f under key to dst. ts is the timestamp
// as written on the wire: a string when verifying, the signer's own bytes
// when signing (no string made per request).
func mac[T string | []byte](dst, key []byte, ts T, f Fields) []byte {
	m := macs.get(key)
	defer macs.put(m)
	// Header values cannot contain '\n', so the encoding is unambiguous.
	msg := append(append(m.buf[:0], version...), '\n')
	msg = append(append(msg, ts...), '\n')
	for _, s := range [...]string{f.Method, f.Host, f.URI, f.ForwardedFor, f.Proto} {
		msg = append(append(msg, s...), '\n')
	}
	m.buf = msg
	m.h.Reset()
	m.h.Write(msg)
	return append(dst, m.h.Sum(m.sum[:0])...)
}

// A process signs or verifies with one key at a time (the cluster's), on
// every relayed request: its HMAC states are reused instead of keyed anew.
type macState struct {
	h    hash.Hash
	buf  []byte
	sum  [sha256.Size]byte
	pool *macPool // keyed with pool.key
}

type macPool struct {
	key  []byte
	pool sync.Pool
}

type macCache struct{ cur atomic.Pointer[macPool] }

var macs macCache

func (c *macCache) get(key []byte) *macState {
	p := c.cur.Load()
	if p == nil || !bytes.Equal(p.key, key) {
		p = &macPool{key: append([]byte(nil), key...)}
		c.cur.Store(p) // a replaced key's states are left to the collector
	}
	if m, ok := p.pool.Get().(*macState); ok {
		return m
	}
	return &macState{h: hmac.New(sha256.New, p.key), buf: make([]byte, 0, 256), pool: p}
}

func (c *macCache) put(m *macState) {
	m.pool.pool.Put(m) // a replaced pool is unreachable soon, with its states
}

// Sign returns the X-CB-Hop value for a request relayed at now.
func Sign(key []byte, now time.Time, f Fields) string {
	return string(AppendSign(nil, key, now, f))
}

// AppendSign appends Sign's value to dst; a proxy writes it straight into
// the request head, allocating nothing per request.
func AppendSign(dst, key []byte, now time.Time, f Fields) []byte {
	dst = append(dst, version+"."...)
	n := len(dst)
	dst = strconv.AppendInt(dst, now.Unix(), 10)
	var raw [sha256.Size]byte
	sum := mac(raw[:0], key, dst[n:], f)
	return base64.RawURLEncoding.AppendEncode(append(dst, '.'), sum)
}

// Verify checks an X-CB-Hop value against the request's fields.
func Verify(key []byte, now time.Time, value string, f Fields) error {
	if len(key) == 0 {
		return ErrNoKey
	}
	if value == "" {
		return ErrMissing
	}
	v, rest, ok1 := strings.Cut(value, ".")
	ts, sig, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || v != version {
		return ErrMalformed
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return ErrMalformed
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || len(got) != sha256.Size {
		return ErrMalformed
	}
	if d := now.Sub(time.Unix(sec, 0)); d > Window || d < -Window {
		return ErrStale
	}
	var raw [sha256.Size]byte
	if !hmac.Equal(got, mac(raw[:0], key, ts, f)) {
		return ErrBadMAC
	}
	return nil
}

// Key holds a hop key that arrives (and may be replaced) at run time, from
// the master. The zero value holds no key.
type Key struct {
	p     atomic.Pointer[[]byte]
	once  sync.Once // makes ready
	ready chan struct{}
	set   sync.Once // closes ready
}

func (k *Key) readyCh() chan struct{} {
	k.once.Do(func() { k.ready = make(chan struct{}) })
	return k.ready
}

// Set replaces the key; an empty key is ignored (an old master sent none).
func (k *Key) Set(b []byte) {
	if len(b) == 0 {
		return
	}
	c := append([]byte(nil), b...)
	k.p.Store(&c)
	ch := k.readyCh()
	k.set.Do(func() { close(ch) })
}

// Wait returns the key once there is one, or nil if ctx ends first. A
// worker's first relayed request can come before the master's reply that
// carries the key has been read: the master routes to a worker as soon as
// it registered it.
func (k *Key) Wait(ctx context.Context) []byte {
	if b := k.Get(); b != nil {
		return b
	}
	select {
	case <-k.readyCh():
		return k.Get()
	case <-ctx.Done():
		return nil
	}
}

// Get returns the key, or nil if none arrived yet.
func (k *Key) Get() []byte {
	if p := k.p.Load(); p != nil {
		return *p
	}
	return nil
}
