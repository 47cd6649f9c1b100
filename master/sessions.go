package master

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

// endedSessions is the cluster's list of logged-out sessions. Sessions are
// stateless signed cookies, so a logout only ends one if every worker
// refuses its id: the master records it in the state store (so a restarted
// master still knows it), pushes it to every worker and hands the whole
// list to registering workers.
type endedSessions struct {
	st  *state.Store
	now func() time.Time
	log zerolog.Logger
	// push tells every worker (set by the master; nil in tests).
	push func(context.Context, wire.SessionRevocation)

	mu sync.Mutex // orders prune against end
}

// end records a logout and tells the workers. The expiry is capped at one
// session lifetime from now: no value of the session can outlive that.
func (e *endedSessions) end(ctx context.Context, rev wire.SessionRevocation) error {
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

// isEnded reports whether a session id was logged out.
func (e *endedSessions) isEnded(id string) bool {
	var rev wire.SessionRevocation
	ok, err := e.st.Get(endedBucket, id, &rev)
	return ok && (err != nil || rev.Expires > e.now().Unix()) // unreadable: stay refused
}

// list returns the ended sessions still in force.
func (e *endedSessions) list() []wire.SessionRevocation {
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
func (e *endedSessions) prune() {
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
