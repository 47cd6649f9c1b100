package failover

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// Load reads an instance's browser snapshots from the store, every page.
func (sn *Snapshots) Load(ctx context.Context, iid string) ([]wire.BrowserSnapshot, error) {
	if sn == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, stateTimeout)
	defer cancel()
	var out []wire.BrowserSnapshot
	after := ""
	for {
		page, err := sn.store.Browsers(ctx, iid, after)
		if err != nil {
			return nil, fmt.Errorf("load the browser snapshots of %s: %w", iid, err)
		}
		out = append(out, page.Browsers...)
		if !page.More || len(page.Browsers) == 0 {
			return out, nil
		}
		after = page.Browsers[len(page.Browsers)-1].ID
	}
}

// RestoreAll recreates the browsers of instance iid from their
// snapshots in the background, with restore, a few at a time, each within
// a time bound (and ctx). Each is in r from now until it is back or has
// failed, so requests for it wait; one that fails is logged and left out:
// its users get a new browser through the strategy. done is closed when
// every one is done (nil: there are none).
func (sn *Snapshots) RestoreAll(ctx context.Context, r *Restoring, iid string, snaps []wire.BrowserSnapshot,
	restore func(ctx context.Context, s wire.BrowserSnapshot) error) (done <-chan struct{}) {
	if len(snaps) == 0 {
		return nil
	}
	r.Add(snaps)
	all := make(chan struct{})
	go func() {
		defer close(all)
		sem := make(chan struct{}, restoreParallel)
		var wg sync.WaitGroup
		for _, s := range snaps {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				defer r.Done(s.ID)
				ctx, cancel := context.WithTimeout(ctx, restoreTimeout)
				defer cancel()
				t0 := time.Now()
				if err := restore(ctx, s); err != nil {
					sn.log.Warn().Str("instance", iid).Str("browser", s.ID).Str("user", s.Owner).Err(err).Msg("browser not restored")
					return
				}
				sn.log.Info().Str("instance", iid).Str("browser", s.ID).Str("user", s.Owner).Str("url", s.URL).
					Dur("took", time.Since(t0)).Msg("browser restored from its snapshot")
			}()
		}
		wg.Wait()
	}()
	return all
}

// Restoring are the browsers of a re-placed instance being restored from
// their snapshots: requests for one of them wait until it is back (or
// failed to come back). Its zero value is ready.
type Restoring struct {
	mu      sync.Mutex
	pending map[string]chan struct{} // closed when done
	owner   map[string]string
}

// Add marks the browsers of snaps as being restored.
func (r *Restoring) Add(snaps []wire.BrowserSnapshot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range snaps {
		if _, dup := r.pending[s.ID]; dup {
			continue
		}
		if r.pending == nil {
			r.pending, r.owner = map[string]chan struct{}{}, map[string]string{}
		}
		r.pending[s.ID], r.owner[s.ID] = make(chan struct{}), s.Owner
	}
}

// Done marks browser bid as done, restored or not.
func (r *Restoring) Done(bid string) {
	r.mu.Lock()
	ch, ok := r.pending[bid]
	delete(r.pending, bid)
	delete(r.owner, bid)
	r.mu.Unlock()
	if ok {
		close(ch)
	}
}

// Await waits until bid, if it is being restored, is done, or ctx ends.
func (r *Restoring) Await(ctx context.Context, bid string) {
	r.mu.Lock()
	ch, ok := r.pending[bid]
	r.mu.Unlock()
	if !ok {
		return
	}
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

// AwaitOwner waits until the browsers of user being restored are done, or
// ctx ends, so the strategy finds their restored browser instead of making
// another.
func (r *Restoring) AwaitOwner(ctx context.Context, user string) {
	r.mu.Lock()
	var chs []chan struct{}
	for bid, ch := range r.pending {
		if r.owner[bid] == user {
			chs = append(chs, ch)
		}
	}
	r.mu.Unlock()
	for _, ch := range chs {
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}
