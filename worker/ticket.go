package worker

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/internal/ids"
)

// Socket tickets let a client engine open its WebSocket at the worker's
// socket URL (Config.SocketURL: a proxy on the worker's own host, which
// hands the socket over) instead of through the proxy that served the page,
// which would relay every frame across hosts. The browser sends no cookie
// of the page's origin there, so the worker that served the engine page
// gives it a ticket naming who the socket is for: short-lived, usable once,
// bound to one browser and to the page's origin (checked against the
// handshake's Origin, so no other site can use one), and carried in
// Sec-WebSocket-Protocol rather than the URL, out of access logs.

// ticketTTL is how long a ticket may wait for its handshake: a page load
// and its assets, or one reconnect.
const ticketTTL = 60 * time.Second

// Subprotocols of a ticketed socket: the engine offers both, the worker
// answers with the first (a browser fails a handshake whose answer names
// none of those it offered).
const (
	socketProtocol = "cb.v1"
	ticketPrefix   = "cb-ticket."
)

var (
	errTicketMalformed = errors.New("malformed socket ticket")
	errTicketMAC       = errors.New("socket ticket not issued by this worker")
	errTicketExpired   = errors.New("socket ticket expired")
	errTicketUsed      = errors.New("socket ticket already used")
	errTicketBrowser   = errors.New("socket ticket is for another browser")
	errTicketOrigin    = errors.New("socket ticket is for another origin")
	errTicketSession   = errors.New("the session the socket ticket was issued for has ended")
)

// ticketClaims is who a socket is for, as the engine page's request showed.
type ticketClaims struct {
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

// tickets issues and redeems socket tickets with a key of this process:
// a restarted worker refuses its predecessor's, and the engine asks again.
type tickets struct {
	key []byte

	mu      sync.Mutex
	used    map[string]int64 // nonce → expiry, until then
	pruneAt int              // len(used) at which expired nonces are dropped
}

func newTickets() *tickets {
	key := make([]byte, 32)
	_, _ = rand.Read(key) // never fails (crypto/rand)
	return &tickets{key: key, used: map[string]int64{}, pruneAt: minPrune}
}

func (t *tickets) mac(payload string) []byte {
	m := hmac.New(sha256.New, t.key)
	m.Write([]byte(payload))
	return m.Sum(nil)
}

// issue returns a ticket for c, valid for ticketTTL from now.
func (t *tickets) issue(c ticketClaims, now time.Time) string {
	c.Expires = now.Add(ticketTTL).Unix()
	c.Nonce = ids.Random(16)
	js, _ := json.Marshal(c) // plain strings and numbers
	payload := base64.RawURLEncoding.EncodeToString(js)
	return payload + "." + base64.RawURLEncoding.EncodeToString(t.mac(payload))
}

// redeem checks a ticket for browser and the handshake's origin and uses
// it up.
func (t *tickets) redeem(ticket, browser, origin string, now time.Time) (ticketClaims, error) {
	var c ticketClaims
	payload, sig, ok := strings.Cut(ticket, ".")
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if !ok || err != nil {
		return c, errTicketMalformed
	}
	if !hmac.Equal(got, t.mac(payload)) {
		return c, errTicketMAC
	}
	js, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil || json.Unmarshal(js, &c) != nil || c.Nonce == "" {
		return ticketClaims{}, errTicketMalformed
	}
	switch {
	case now.Unix() > c.Expires:
		return ticketClaims{}, errTicketExpired
	case c.Browser != browser:
		return ticketClaims{}, errTicketBrowser
	case c.Origin != origin:
		return ticketClaims{}, errTicketOrigin
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, dup := t.used[c.Nonce]; dup {
		return ticketClaims{}, errTicketUsed
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

// ticketOf returns the ticket a handshake offers in Sec-WebSocket-Protocol.
func ticketOf(protocols []string) (string, bool) {
	for _, p := range protocols {
		if tk, ok := strings.CutPrefix(p, ticketPrefix); ok {
			return tk, true
		}
	}
	return "", false
}

// socketOrigin checks Config.SocketURL and returns it as scheme://host
// ("" stays "").
func socketOrigin(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "", config.Errorf("SocketURL", "%q is not a URL: %v", s, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return "", config.Errorf("SocketURL", "%q: want an http:// or https:// address (its WebSockets are ws:// or wss://)", s)
	case u.Host == "" || u.Hostname() == "":
		return "", config.Errorf("SocketURL", "%q has no host", s)
	case u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
		return "", config.Errorf("SocketURL", "%q: want only scheme, host and port, e.g. https://w2.example.com", s)
	}
	return u.Scheme + "://" + u.Host, nil
}

// wsOrigin is the ws:// or wss:// form of an http(s) origin.
func wsOrigin(httpOrigin string) string {
	if rest, ok := strings.CutPrefix(httpOrigin, "https://"); ok {
		return "wss://" + rest
	}
	return "ws://" + strings.TrimPrefix(httpOrigin, "http://")
}

// writeJSON answers v as an uncached JSON document.
func writeJSON(rw http.ResponseWriter, v any) {
	rw.Header().Set("Content-Type", "application/json")
	rw.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(rw).Encode(v)
}
