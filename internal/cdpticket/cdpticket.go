// Package cdpticket signs and checks the tickets of automation sessions:
// the master puts one in each session's CDP URL, the worker that hosts the
// session's browser checks it before it lets a client speak CDP to it. A
// ticket names the browser it opens (bound to its instance and browser
// ids), the principal the session belongs to and the session's id, and
// ends with the session's time.
package cdpticket

import (
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
}

func codec(key []byte, instance, browser string, ttl time.Duration) *session.Codec {
	c := session.WithKey(key).Bound("cdp\x00" + instance + "\x00" + browser)
	c.TTL = ttl
	return c
}

// Issue returns a ticket to browser (of instance) for the session id of
// owner, valid until expires. id must be a session.NewID.
func Issue(key []byte, instance, browser, owner, id string, now, expires time.Time) string {
	return codec(key, instance, browser, expires.Sub(now)).IssueID(owner, id, now)
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
	return Claims{Owner: cl.User, Session: cl.ID}, true
}
