package engine

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/ids"
)

// Socket tickets let a client engine open its WebSocket at the worker's
// socket URL (the worker's Config.SocketURL: a proxy on the worker's own host, which
// hands the socket over) instead of through the proxy that served the page,
// which would relay every frame across hosts. The browser sends no cookie
// of the page's origin there, so the worker that served the engine page
// gives it a ticket naming who the socket is for: short-lived, usable once,
// bound to one browser and to the page's origin (checked against the
// handshake's Origin, so no other site can use one), and carried in
// Sec-WebSocket-Protocol rather than the URL, out of access logs.

// TicketTTL is how long a ticket may wait for its handshake: a page load
// and its assets, or one reconnect.
const TicketTTL = 60 * time.Second

// Subprotocols of a ticketed socket: the engine offers both, the worker
// answers with the first (a browser fails a handshake whose answer names
// none of those it offered).
const (
	SocketProtocol = "cb.v1"
	TicketPrefix   = "cb-ticket."
)

// Why a ticket is refused; the worker says ErrTicketSession of one whose
// sessions ended, and ErrTicketMAC when it issues none.
var (
	ErrTicketMalformed = errors.New("malformed socket ticket")
	ErrTicketMAC       = errors.New("socket ticket not issued by this worker")
	ErrTicketExpired   = errors.New("socket ticket expired")
	ErrTicketUsed      = errors.New("socket ticket already used")
	ErrTicketBrowser   = errors.New("socket ticket is for another browser")
	ErrTicketOrigin    = errors.New("socket ticket is for another origin")
	ErrTicketSession   = errors.New("the session the socket ticket was issued for has ended")
)

// TicketClaims is who a socket is for, as the engine page's request showed.
type TicketClaims struct {
	Browser string `json:"b"`
	User    string `json:"u"`
	// Sessions are the login and dashboard session ids (ended sessions
	// drop their sockets); Issued is the login session's start (unix s;
	// 0: none), so a revocation of the user's sessions refuses it.
	Sessions []string `json:"s,omitempty"`
	Issued   int64    `json:"i,omitempty"`
	Admin    bool     `json:"a,omitempty"`
	Origin   string   `json:"o"`
	Expires  int64    `json:"e"`
	Nonce    string   `json:"n"`
}

// minPrune is how many used nonces are kept before expired ones are looked
// for.
const minPrune = 1024

// Tickets issues and redeems socket tickets with a key of this process:
// a restarted worker refuses its predecessor's, and the engine asks again.
type Tickets struct {
	key []byte

	mu      sync.Mutex
	used    map[string]int64 // nonce → expiry, until then
	pruneAt int              // len(used) at which expired nonces are dropped
}

// NewTickets makes a ticket issuer with a new key.
func NewTickets() *Tickets {
	key := make([]byte, 32)
	_, _ = rand.Read(key) // never fails (crypto/rand)
	return &Tickets{key: key, used: map[string]int64{}, pruneAt: minPrune}
}

func (t *Tickets) mac(payload string) []byte {
	m := hmac.New(sha256.New, t.key)
	m.Write([]byte(payload))
	return m.Sum(nil)
}

// Issue returns a ticket for c, valid for TicketTTL from now.
func (t *Tickets) Issue(c TicketClaims, now time.Time) string {
	c.Expires = now.Add(TicketTTL).Unix()
	c.Nonce = ids.Random(16)
	js, _ := json.Marshal(c) // plain strings and numbers
	payload := base64.RawURLEncoding.EncodeToString(js)
	return payload + "." + base64.RawURLEncoding.EncodeToString(t.mac(payload))
}

// Redeem checks a ticket for browser and the handshake's origin and uses
// it up.
func (t *Tickets) Redeem(ticket, browser, origin string, now time.Time) (TicketClaims, error) {
	var c TicketClaims
	payload, sig, ok := strings.Cut(ticket, ".")
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if !ok || err != nil {
		return c, ErrTicketMalformed
	}
	if !hmac.Equal(got, t.mac(payload)) {
		return c, ErrTicketMAC
	}
	js, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil || json.Unmarshal(js, &c) != nil || c.Nonce == "" {
		return TicketClaims{}, ErrTicketMalformed
	}
	switch {
	case now.Unix() > c.Expires:
		return TicketClaims{}, ErrTicketExpired
	case c.Browser != browser:
		return TicketClaims{}, ErrTicketBrowser
	case c.Origin != origin:
		return TicketClaims{}, ErrTicketOrigin
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, dup := t.used[c.Nonce]; dup {
		return TicketClaims{}, ErrTicketUsed
	}
	if len(t.used) >= t.pruneAt { // amortized: a storm of reconnects stays linear
		for n, exp := range t.used {
			if now.Unix() > exp {
				delete(t.used, n)
			}
		}
		t.pruneAt = max(minPrune, 2*len(t.used))
	}
	t.used[c.Nonce] = c.Expires
	return c, nil
}

// TicketOf returns the ticket a handshake offers in Sec-WebSocket-Protocol.
func TicketOf(protocols []string) (string, bool) {
	for _, p := range protocols {
		if tk, ok := strings.CutPrefix(p, TicketPrefix); ok {
			return tk, true
		}
	}
	return "", false
}
