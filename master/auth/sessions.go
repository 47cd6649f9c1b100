package auth

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/session"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/state"
)

// endedBucket holds the sessions ended by a logout (user and dashboard
// ones), by session id, until every value they had has expired.
const endedBucket = "ended-sessions"

// EndedSessions is the cluster's list of logged-out sessions. Sessions are
// stateless signed cookies, so a logout only ends one if every worker
// refuses its id: the master records it in the state store (so a restarted
// master still knows it), pushes it to every worker and hands the whole
// list to registering workers.
type EndedSessions struct {
	st  *state.Store
	now func() time.Time
	log zerolog.Logger
	// push tells every worker (nil in tests).
	push func(context.Context, wire.SessionRevocation)

	mu sync.Mutex // orders prune against end
}

// NewEndedSessions keeps the list in st; push (may be nil) tells every
// worker of a new entry.
func NewEndedSessions(st *state.Store, now func() time.Time, log zerolog.Logger, push func(context.Context, wire.SessionRevocation)) *EndedSessions {
	return &EndedSessions{st: st, now: now, log: log, push: push}
}

// End records a logout and tells the workers. The expiry is capped at one
// session lifetime from now: no value of the session can outlive that.
func (e *EndedSessions) End(ctx context.Context, rev wire.SessionRevocation) error {
	if !session.ValidID(rev.ID) {
		return wire.Errorf(wire.CodeInvalid, "end session: invalid session id %q", rev.ID)
	}
	now := e.now()
	if limit := now.Add(session.TTL).Unix(); rev.Expires <= now.Unix() || rev.Expires > limit {
		rev.Expires = limit
	}
	e.mu.Lock()
	err := e.st.Put(endedBucket, rev.ID, rev)
	e.mu.Unlock()
	if err != nil {
		return fmt.Errorf("end session: %w", err)
	}
	e.prune()
	e.log.Info().Str("user", rev.User).Str("session", rev.ID[:8]).Msg("session ended")
	if e.push != nil {
		e.push(ctx, rev)
	}
	return nil
}

// IsEnded reports whether a session id was logged out.
func (e *EndedSessions) IsEnded(id string) bool {
	var rev wire.SessionRevocation
	ok, err := e.st.Get(endedBucket, id, &rev)
	return ok && (err != nil || rev.Expires > e.now().Unix()) // unreadable: stay refused
}

// List returns the ended sessions still in force.
func (e *EndedSessions) List() []wire.SessionRevocation {
	now := e.now().Unix()
	out := []wire.SessionRevocation{}
	err := state.Each(e.st, endedBucket, func(_ string, rev wire.SessionRevocation) {
		if rev.Expires > now {
			out = append(out, rev)
		}
	})
	if err != nil {
		e.log.Warn().Err(err).Msg("some ended sessions could not be read")
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// prune forgets the ended sessions that have expired, in one transaction.
func (e *EndedSessions) prune() {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now().Unix()
	var gone []string
	_ = state.Each(e.st, endedBucket, func(id string, rev wire.SessionRevocation) {
		if rev.Expires <= now {
			gone = append(gone, id)
		}
	})
	if len(gone) == 0 {
		return
	}
	err := e.st.Update(func(tx state.Tx) error {
		for _, id := range gone {
			if err := tx.Delete(endedBucket, id); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		e.log.Warn().Err(err).Msg("pruning ended sessions failed")
	}
}
