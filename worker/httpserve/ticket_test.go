package httpserve

import (
	"errors"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/engine"
)

// TestTicketAfterLogout: a logout since the ticket was issued refuses it:
// the session it names has ended, or all the user's sessions were revoked.
func TestTicketAfterLogout(t *testing.T) {
	s := newTestServer(t, "https://sockets.example:8443")
	now := time.Now()
	const origin, browserID = "https://cluster.example", "babcdefghijk"
	ended := s.tickets.Issue(engine.TicketClaims{Browser: browserID, User: "bob", Sessions: []string{"sid-ended"}, Origin: origin}, now)
	s.users.End(wire.SessionRevocation{ID: "sid-ended", User: "bob", Expires: now.Add(time.Hour).Unix()})
	revoked := s.tickets.Issue(engine.TicketClaims{Browser: browserID, User: "carol", Sessions: []string{"sid-c"}, Issued: now.Unix() - 10, Origin: origin}, now)
	s.users.Revoke("carol", now.Unix())
	for name, tk := range map[string]string{"ended session": ended, "revoked user": revoked} {
		if _, err := s.redeemTicket(tk, browserID, origin); !errors.Is(err, engine.ErrTicketSession) {
			t.Errorf("%s: %v, want %v", name, err, engine.ErrTicketSession)
		}
	}
	fresh := s.tickets.Issue(engine.TicketClaims{Browser: browserID, User: "dave", Sessions: []string{"sid-d"}, Issued: now.Unix(), Origin: origin}, now)
	if c, err := s.redeemTicket(fresh, browserID, origin); err != nil || c.User != "dave" {
		t.Errorf("a valid ticket: %+v %v", c, err)
	}
}
