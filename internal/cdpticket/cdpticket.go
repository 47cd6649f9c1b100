// Package cdpticket signs and checks the tickets of automation sessions:
// the master puts one in each session's CDP URL, the worker that hosts the
// session's browser checks it before it lets a client speak CDP to it. A
// ticket names the browser it opens (bound to its instance and browser
// ids), the principal the session belongs to and the session's id, and
// ends with the session's time.
package cdpticket

import (
	"net/url"
	"strconv"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/session"
)

// Purpose derives the tickets' key from the cluster secret
// (session.Key); workers get it from the master (wire.ClusterKeys).
const Purpose = "automation-ticket"

// Claims is what a valid ticket says.
type Claims struct {
	// Owner is the principal that opened the session; Session its id.
	Owner, Session string
	// Idle ends the session after this long with no CDP traffic and no
	// viewer (0: never); KeepAlive keeps it this long after its last
	// client left, for a reconnect (0: it ends when the client leaves).
	Idle, KeepAlive time.Duration
	// Width and Height are the viewport the session asked for (0: the
	// browser's own).
	Width, Height int
	// Expires is when the session ends (the ticket's own end), to the
	// second.
	Expires time.Time
}

// subject packs the claims a session.Codec value carries as its user.
func (c Claims) subject() string {
	v := url.Values{"o": {c.Owner}}
	if c.Idle > 0 {
		v.Set("i", strconv.FormatInt(c.Idle.Milliseconds(), 10))
	}
	if c.KeepAlive > 0 {
		v.Set("k", strconv.FormatInt(c.KeepAlive.Milliseconds(), 10))
	}
	if !c.Expires.IsZero() {
		v.Set("e", strconv.FormatInt(c.Expires.Unix(), 10))
	}
	if c.Width > 0 && c.Height > 0 {
		v.Set("w", strconv.Itoa(c.Width))
		v.Set("h", strconv.Itoa(c.Height))
	}
	return v.Encode()
}

func parseSubject(s, id string) (Claims, bool) {
	v, err := url.ParseQuery(s)
	if err != nil || v.Get("o") == "" {
		return Claims{}, false
	}
	ms := func(k string) time.Duration {
		n, _ := strconv.ParseInt(v.Get(k), 10, 64)
		return time.Duration(max(n, 0)) * time.Millisecond
	}
	w, _ := strconv.Atoi(v.Get("w"))
	h, _ := strconv.Atoi(v.Get("h"))
	if w <= 0 || h <= 0 {
		w, h = 0, 0
	}
	cl := Claims{Owner: v.Get("o"), Session: id, Idle: ms("i"), KeepAlive: ms("k"), Width: w, Height: h}
	if e, err := strconv.ParseInt(v.Get("e"), 10, 64); err == nil && e > 0 {
		cl.Expires = time.Unix(e, 0)
	}
	return cl, true
}

func codec(key []byte, instance, browser string, ttl time.Duration) *session.Codec {
	c := session.WithKey(key).Bound("cdp\x00" + instance + "\x00" + browser)
	c.TTL = ttl
	return c
}

// Issue returns a ticket to browser (of instance) saying cl, valid until
// expires. cl.Session must be a session.NewID.
func Issue(key []byte, instance, browser string, cl Claims, now, expires time.Time) string {
	cl.Expires = expires
	return codec(key, instance, browser, expires.Sub(now)).IssueID(cl.subject(), cl.Session, now)
}

// Check returns the claims of a valid, unexpired ticket to browser.
func Check(key []byte, instance, browser, ticket string, now time.Time) (Claims, bool) {
	if len(key) == 0 {
		return Claims{}, false
	}
	cl, ok := codec(key, instance, browser, 0).Claims(ticket, now)
	if !ok {
		return Claims{}, false
	}
	return parseSubject(cl.User, cl.ID)
}
