package rendercache

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/master/state"
)

// meta is an index record as the sweep and eviction see it.
type meta struct {
	Sig      string
	URL      string
	Size     int64
	Created  time.Time
	LastUsed time.Time // the later of the stored one and an unwritten hit
	Stale    bool
}

// scanIndex reads every index record (c.mu held by writers, so the list
// stays true until their transaction).
func (c *Cache) scanIndex() ([]meta, error) {
	c.umu.Lock()
	used := make(map[string]time.Time, len(c.used))
	for k, v := range c.used {
		used[k] = v
	}
	c.umu.Unlock()
	var out []meta
	err := scanJSON(c.st, BucketIndex, func(sig string, ix indexRec) {
		last := ix.LastUsed
		if u, ok := used[sig]; ok && u.After(last) {
			last = u
		}
		out = append(out, meta{Sig: sig, URL: ix.URL, Size: ix.Size, Created: ix.Created, LastUsed: last, Stale: ix.Stale})
	})
	return out, err
}

// lruVictims picks the least recently used entries whose sizes add up to
// at least need bytes (none if need <= 0).
func lruVictims(metas []meta, need int64) []meta {
	if need <= 0 {
		return nil
	}
	metas = slices.Clone(metas)
	slices.SortFunc(metas, func(a, b meta) int {
		if c := a.LastUsed.Compare(b.LastUsed); c != 0 {
			return c
		}
		return strings.Compare(a.Sig, b.Sig)
	})
	var out []meta
	for _, m := range metas {
		if need <= 0 {
			break
		}
		out = append(out, m)
		need -= m.Size
	}
	return out
}

// link records that sig was made from canonical URL u.
func link(tx state.Tx, u, sig string) error {
	var rec urlRec
	if _, err := getJSON(tx, BucketURLs, urlKey(u), &rec); err != nil {
		return err
	}
	if slices.Contains(rec.Sigs, sig) {
		return nil
	}
	rec.URL = u
	rec.Sigs = append(rec.Sigs, sig)
	slices.Sort(rec.Sigs)
	return tx.Put(BucketURLs, urlKey(u), rec)
}

// unlink forgets that sig was made from u (when neither its entry nor a
// reservation remains).
func unlink(tx state.Tx, u, sig string) error {
	var rec urlRec
	ok, err := getJSON(tx, BucketURLs, urlKey(u), &rec)
	if !ok || err != nil {
		return err
	}
	rec.Sigs = slices.DeleteFunc(rec.Sigs, func(s string) bool { return s == sig })
	if len(rec.Sigs) == 0 {
		return tx.Delete(BucketURLs, urlKey(u))
	}
	return tx.Put(BucketURLs, urlKey(u), rec)
}

// dropEntry deletes sig's index record and body, and its URL link unless
// a reservation still needs it.
func dropEntry(tx state.Tx, sig string) error {
	var ix indexRec
	ok, err := getJSON(tx, BucketIndex, sig, &ix)
	if !ok || err != nil {
		return err
	}
	if err := tx.Delete(BucketBlobs, blobKey(sig, ix.Version)); err != nil {
		return err
	}
	if err := tx.Delete(BucketIndex, sig); err != nil {
		return err
	}
	if tx.GetRaw(BucketReservations, sig) == nil {
		return unlink(tx, ix.URL, sig)
	}
	return nil
}

// sigsFor resolves a Purge/MarkStale argument: a signature, or a URL
// (canonicalized) standing for every signature made from it.
func (c *Cache) sigsFor(urlOrSig string) ([]string, error) {
	if isSig(urlOrSig) {
		return []string{urlOrSig}, nil
	}
	u, err := CanonicalURL(urlOrSig, c.cfg.IgnoreParams)
	if err != nil {
		return nil, err
	}
	var rec urlRec
	if _, err := c.st.Get(BucketURLs, urlKey(u), &rec); err != nil {
		return nil, err
	}
	return rec.Sigs, nil
}

// Purge removes the cached entries of a signature, or of every signature
// made from a URL (any spelling of it: it is canonicalized), and returns
// how many it removed. A render under way for one of them is not stopped,
// but its result will be stored stale (it may predate whatever the purge
// was for). It purges every owner's entries: see PurgeFor.
func (c *Cache) Purge(urlOrSig string) (int, error) {
	return c.invalidate(urlOrSig, true, "")
}

// PurgeFor is Purge limited to owner's partition (ReserveFor): other
// principals' entries and renders of the URL are left as they are. An
// empty owner purges every partition.
func (c *Cache) PurgeFor(urlOrSig, owner string) (int, error) {
	return c.invalidate(urlOrSig, true, owner)
}

// MarkStale marks the entries made from a URL stale (a monitor saw its
// content change): the next request renders anew; a stale-while-
// revalidate caller may still get the old bytes meanwhile. Renders under
// way are marked too. It returns how many entries it marked.
func (c *Cache) MarkStale(urlOrSig string) (int, error) {
	return c.invalidate(urlOrSig, false, "")
}

// MarkStaleFor is MarkStale limited to owner's partition ("" = all),
// leaving the signatures in keep alone (a render monitor's own render,
// which saw the change).
func (c *Cache) MarkStaleFor(urlOrSig, owner string, keep ...string) (int, error) {
	return c.invalidate(urlOrSig, false, owner, keep...)
}

func (c *Cache) invalidate(urlOrSig string, purge bool, owner string, keep ...string) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sigs, err := c.sigsFor(urlOrSig)
	if err != nil || len(sigs) == 0 {
		return 0, err
	}
	var n int
	var freed int64
	var done []string
	err = c.st.Update(func(tx state.Tx) error {
		n, freed, done = 0, 0, done[:0]
		for _, sig := range sigs {
			var r resRec
			hasRes, err := getJSON(tx, BucketReservations, sig, &r)
			if err != nil {
				return err
			}
			var ix indexRec
			ok, err := getJSON(tx, BucketIndex, sig, &ix)
			if err != nil {
				return err
			}
			if owner != "" && !(ok && ix.Owner == owner) && !(!ok && hasRes && r.Owner == owner) {
				continue // another principal's partition
			}
			if slices.Contains(keep, sig) {
				continue
			}
			done = append(done, sig)
			if hasRes && !r.Stale {
				r.Stale = true
				if err := tx.Put(BucketReservations, sig, r); err != nil {
					return err
				}
			}
			if !ok {
				continue
			}
			n++
			if purge {
				freed += ix.Size
				if err := dropEntry(tx, sig); err != nil {
					return err
				}
				continue
			}
			ix.Stale = true
			if err := tx.Put(BucketIndex, sig, ix); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("rendercache: invalidate: %w", err)
	}
	if purge {
		c.bytes.Add(-freed)
		c.entries.Add(-int64(n))
		c.umu.Lock()
		for _, s := range done {
			delete(c.used, s)
		}
		c.umu.Unlock()
	}
	c.log.Info().Str("target", urlOrSig).Bool("purge", purge).Str("owner", owner).Int("entries", n).Msg("cache invalidated")
	return n, nil
}

// SweepStats says what one Sweep removed.
type SweepStats struct {
	Stale     int // marked stale, or older than MaxKeep
	Unused    int // not read for UnusedAfter
	Abandoned int // reservations older than ReservationTimeout
	Evicted   int // least recently used, to get under MaxBytes
}

// Sweep is the document's scheduled clean-up (minutia 3): it removes
// entries that are stale (marked, or older than MaxKeep), entries not
// used for UnusedAfter, and abandoned reservations (their waiters get
// ErrAbandoned; Get callers then race again); then it evicts the least
// recently used entries until the total is under MaxBytes. It also writes
// pending last-used times into the index.
func (c *Cache) Sweep(now time.Time) (SweepStats, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	metas, err := c.scanIndex()
	if err != nil {
		return SweepStats{}, err
	}
	var st SweepStats
	var drop, keep []meta
	for _, m := range metas {
		switch {
		case m.Stale || now.Sub(m.Created) > c.cfg.MaxKeep:
			st.Stale++
			drop = append(drop, m)
		case now.Sub(m.LastUsed) > c.cfg.UnusedAfter:
			st.Unused++
			drop = append(drop, m)
		default:
			keep = append(keep, m)
		}
	}
	var total int64
	for _, m := range keep {
		total += m.Size
	}
	evict := lruVictims(keep, total-c.cfg.MaxBytes)
	st.Evicted = len(evict)
	evictSet := map[string]bool{}
	for _, m := range evict {
		evictSet[m.Sig] = true
	}

	var abandoned []string
	c.st.Scan(BucketReservations, "", func(sig string, raw []byte) bool {
		var r resRec
		if json.Unmarshal(raw, &r) != nil || c.abandoned(r, now) {
			abandoned = append(abandoned, sig)
		}
		return true
	})
	st.Abandoned = len(abandoned)

	err = c.st.Update(func(tx state.Tx) error {
		for _, sig := range abandoned {
			var r resRec
			_, _ = getJSON(tx, BucketReservations, sig, &r) // undecodable: dropped all the same
			if err := tx.Delete(BucketReservations, sig); err != nil {
				return err
			}
			if tx.GetRaw(BucketIndex, sig) == nil && r.URL != "" {
				if err := unlink(tx, r.URL, sig); err != nil {
					return err
				}
			}
		}
		for _, m := range slices.Concat(drop, evict) {
			if err := dropEntry(tx, m.Sig); err != nil {
				return err
			}
		}
		// Persist last-used times of the survivors that moved.
		for _, m := range keep {
			if evictSet[m.Sig] {
				continue
			}
			var ix indexRec
			if ok, err := getJSON(tx, BucketIndex, m.Sig, &ix); err != nil || !ok {
				continue
			}
			if m.LastUsed.After(ix.LastUsed) {
				ix.LastUsed = m.LastUsed
				if err := tx.Put(BucketIndex, m.Sig, ix); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return SweepStats{}, fmt.Errorf("rendercache: sweep: %w", err)
	}
	var freed int64
	c.umu.Lock()
	for _, m := range slices.Concat(drop, evict) {
		freed += m.Size
		delete(c.used, m.Sig)
	}
	for _, m := range keep {
		if u, ok := c.used[m.Sig]; ok && !u.After(m.LastUsed) {
			delete(c.used, m.Sig) // written above
		}
	}
	c.umu.Unlock()
	c.bytes.Add(-freed)
	c.entries.Add(-int64(len(drop) + len(evict)))
	c.evictionsCnt.Add(int64(len(evict)))
	c.m.evictions.Add(float64(len(evict)))
	for _, sig := range abandoned {
		c.endFlight(sig, nil, ErrAbandoned)
	}
	for sig, f := range c.failed {
		if now.Sub(f.at) > c.cfg.ReservationTimeout {
			delete(c.failed, sig)
		}
	}
	if st != (SweepStats{}) {
		c.log.Info().Int("stale", st.Stale).Int("unused", st.Unused).Int("abandoned", st.Abandoned).
			Int("evicted", st.Evicted).Int64("bytes", c.bytes.Load()).Msg("cache swept")
	}
	return st, nil
}

// Run sweeps every interval until ctx ends.
func (c *Cache) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := c.Sweep(c.now()); err != nil {
				c.log.Error().Err(err).Msg("cache sweep")
			}
		}
	}
}
