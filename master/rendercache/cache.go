// Package rendercache is the master's cache of render results, after the
// parametric-page-cache document: a request is known by
// the signature of its identity-bearing parameters (Key); a durable
// signature record with a reservation makes N identical concurrent
// requests cause one render (Reserve, Wait, Get); results are versioned so
// a reader never sees half of one (Complete); staleness comes from age,
// Purge and MarkStale; a sweep removes stale, unused and abandoned records
// and keeps the total size bounded (Sweep, Run). Everything lives in the
// master's state.db (master/state), so it survives restarts.
//
// It is a library: the master's HTTP API and job queue call it. See the
// "Result cache" section of docs/jobs.md.
package rendercache

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/master/state"
)

// Buckets of state.db the cache owns.
const (
	// BucketIndex: signature → its record (current version, content type,
	// size, hash, created, last used, canonical URL), JSON.
	BucketIndex = "cache-index"
	// BucketBlobs: "<sig>/<version>" → the body of that version.
	BucketBlobs = "cache-blobs"
	// BucketReservations: signature → who is rendering it since when, JSON.
	BucketReservations = "cache-reservations"
	// BucketURLs: hash of a canonical URL → the signatures made from it,
	// JSON (Purge and MarkStale by URL).
	BucketURLs = "cache-urls"
)

// NoCache as a max age means "render even if a fresh result is cached"
// (JobSpec.NoCache).
const NoCache time.Duration = -1

// Errors.
var (
	// ErrNotHolder: Complete or Fail by someone who does not hold the
	// signature's reservation (it ended, was taken over, or never was).
	ErrNotHolder = errors.New("rendercache: not the reservation holder")
	// ErrAbandoned: the reservation waited on was older than
	// Config.ReservationTimeout and was given up; Get then reserves again.
	ErrAbandoned = errors.New("rendercache: reservation abandoned")
	// ErrNotCached: Wait found neither a reservation nor an entry.
	ErrNotCached = errors.New("rendercache: not cached")
	// ErrCorrupt: an index record without its body (should never happen:
	// both are written in one transaction).
	ErrCorrupt = errors.New("rendercache: index record without its body")
)

// RenderError is what waiters get when the render they waited for failed
// (Fail): the reserving render's error, not a render of their own.
type RenderError struct {
	Holder string
	Err    error
}

func (e *RenderError) Error() string {
	return fmt.Sprintf("render %s failed: %v", e.Holder, e.Err)
}

func (e *RenderError) Unwrap() error { return e.Err }

// Config configures a Cache. Zero values take the defaults.
type Config struct {
	Store *state.Store // required
	// Clock is the time source (tests pass a fake one). Default clock.Real.
	Clock clock.Clock
	// DefaultMaxAge: an entry older than this is stale unless the request
	// says otherwise. Default 1h.
	DefaultMaxAge time.Duration
	// MaxKeep: the sweep removes entries older than this however much
	// they are used: the longest max age a request can get. Default 30
	// days, at least DefaultMaxAge. Entries stale under DefaultMaxAge but
	// younger than MaxKeep stay for requests with a longer max age and
	// for stale-while-revalidate, until unused or evicted.
	MaxKeep time.Duration
	// UnusedAfter: the sweep removes entries not read for this long.
	// Default 7 days.
	UnusedAfter time.Duration
	// ReservationTimeout: a reservation older than this is abandoned (its
	// render is presumed lost) and may be taken over. Default 10 min.
	ReservationTimeout time.Duration
	// MaxBytes bounds the bodies' total size; least recently used entries
	// are evicted to stay under it. Default 256 MiB.
	MaxBytes int64
	// MaxEntryBytes: a larger result is handed to its waiters but not
	// cached. Default 32 MiB, at most MaxBytes.
	MaxEntryBytes int64
	// IgnoreParams are query parameter globs left out of the canonical
	// URL. Default DefaultIgnoreParams; an empty non-nil slice ignores none.
	IgnoreParams []string
	Logger       zerolog.Logger
}

// DefaultConfig is the configuration a zero field falls back to (Store
// and Logger aside).
func DefaultConfig() Config {
	return Config{Clock: clock.Real, DefaultMaxAge: time.Hour, MaxKeep: 30 * 24 * time.Hour, UnusedAfter: 7 * 24 * time.Hour,
		ReservationTimeout: 10 * time.Minute, MaxBytes: 256 << 20, MaxEntryBytes: 32 << 20, IgnoreParams: DefaultIgnoreParams}
}

func (c *Config) defaults() {
	d := DefaultConfig()
	if c.Clock == nil {
		c.Clock = d.Clock
	}
	config.OrDefault(&c.DefaultMaxAge, d.DefaultMaxAge)
	config.OrDefault(&c.MaxKeep, d.MaxKeep)
	c.MaxKeep = max(c.MaxKeep, c.DefaultMaxAge)
	config.OrDefault(&c.UnusedAfter, d.UnusedAfter)
	config.OrDefault(&c.ReservationTimeout, d.ReservationTimeout)
	config.OrDefault(&c.MaxBytes, d.MaxBytes)
	config.OrDefault(&c.MaxEntryBytes, d.MaxEntryBytes)
	c.MaxEntryBytes = min(c.MaxEntryBytes, c.MaxBytes)
	if c.IgnoreParams == nil {
		c.IgnoreParams = d.IgnoreParams
	}
}

// Status is what a lookup found, or how Get got its entry.
type Status int

const (
	// Miss: nothing cached (Get: this call reserved and rendered).
	Miss Status = iota
	// Hit: a fresh entry.
	Hit
	// Stale: an entry too old or marked stale (Get: served while a new
	// version is generated, with StaleWhileRevalidate).
	Stale
	// Generating: someone holds the reservation since Result.Since (Get:
	// this call waited for another's render).
	Generating
	// Reserved: Reserve granted the reservation to the caller.
	Reserved
)

func (s Status) String() string {
	switch s {
	case Miss:
		return "miss"
	case Hit:
		return "hit"
	case Stale:
		return "stale"
	case Generating:
		return "generating"
	case Reserved:
		return "reserved"
	}
	return fmt.Sprintf("status(%d)", int(s))
}

// Entry is one cached render, with what an HTTP answer needs.
type Entry struct {
	Sig         string
	URL         string // canonical
	ContentType string
	// Body may be shared by every waiter of one render: read only.
	Body []byte
	Hash string // hex SHA-256 of Body (an ETag)
	// Created is when the render that made it was reserved (the
	// document's requestDatetime): the page is at least this old.
	Created time.Time
	// Version numbers a signature's successive renders; 0 = not stored
	// (larger than MaxEntryBytes).
	Version uint64
	// Stale: marked stale (Purge while rendering, MarkStale).
	Stale bool
	// Owner is the principal whose partition holds it ("" = recorded
	// before owners were).
	Owner string
}

// Age is the entry's age at now (HTTP Age).
func (e Entry) Age(now time.Time) time.Duration { return max(0, now.Sub(e.Created)) }

// Result is what Lookup and Reserve found.
type Result struct {
	Status Status
	// Entry: the cached version for Hit and Stale; for Generating the
	// previous version if there is one (stale-while-revalidate).
	Entry *Entry
	// Since and Holder: the reservation (Generating, Reserved).
	Since  time.Time
	Holder string
}

// Render is a finished render handed to Complete.
type Render struct {
	ContentType string
	Body        []byte
}

// Reservation is a durable reservation (Reservations).
type Reservation struct {
	Sig, URL, Holder, Owner string
	Since                   time.Time
}

// Stats are the cache's counters and sizes.
type Stats struct {
	Hits, Misses, Stale, GeneratingWaits, Evictions int64
	Bytes, Entries                                  int64
}

type indexRec struct {
	Version     uint64    `json:"v"`
	URL         string    `json:"url"`
	ContentType string    `json:"ctype"`
	Size        int64     `json:"size"`
	Hash        string    `json:"hash"`
	Created     time.Time `json:"created"`
	LastUsed    time.Time `json:"used"`
	Stale       bool      `json:"stale,omitempty"`
	// Owner: the principal whose render it is (PurgeFor, MarkStaleFor).
	Owner string `json:"owner,omitempty"`
}

type resRec struct {
	Holder string    `json:"holder"`
	Since  time.Time `json:"since"`
	URL    string    `json:"url"`
	// Stale: the URL was purged or marked stale after this render began,
	// so its result may predate the change and is stored stale.
	Stale bool `json:"stale,omitempty"`
	// Owner: the principal rendering it; Complete stores it in the index.
	Owner string `json:"owner,omitempty"`
}

type urlRec struct {
	URL  string   `json:"url"`
	Sigs []string `json:"sigs"`
}

// flight is the in-memory side of a reservation: waiters block on done;
// the end sets entry or err first.
type flight struct {
	done  chan struct{}
	entry *Entry
	err   error
}

type failure struct {
	err error
	at  time.Time
}

// Cache is the render result cache. Safe for concurrent use.
type Cache struct {
	cfg Config
	st  *state.Store
	log zerolog.Logger

	// mu serializes the cache's writes (so sizes and eviction plans made
	// from a scan stay true until the transaction) and guards flights and
	// failed.
	mu      sync.Mutex
	flights map[string]*flight
	// failed keeps a failed render's error for a Wait that starts after
	// the failure, until the signature is reserved again or swept.
	failed map[string]failure

	// used holds read times not yet written to the index (a hit does not
	// cost a disk write; Sweep and Complete write them).
	umu  sync.Mutex
	used map[string]time.Time

	bytes, entries                           atomic.Int64
	hits, misses, stale, waits, evictionsCnt atomic.Int64
	m                                        metrics

	bg sync.WaitGroup
	// waiting counts callers blocked on a flight (tests wait for it).
	waiting atomic.Int64
}

// New opens the cache on cfg.Store, counting what it already holds.
func New(cfg Config) (*Cache, error) {
	if cfg.Store == nil {
		return nil, errors.New("rendercache: Config.Store is required")
	}
	cfg.defaults()
	c := &Cache{
		cfg: cfg, st: cfg.Store, log: cfg.Logger.With().Str("component", "rendercache").Logger(),
		flights: map[string]*flight{}, failed: map[string]failure{}, used: map[string]time.Time{},
	}
	c.m = newMetrics(c)
	metas, err := c.scanIndex()
	if err != nil {
		return nil, err
	}
	for _, m := range metas {
		c.bytes.Add(m.Size)
	}
	c.entries.Store(int64(len(metas)))
	return c, nil
}

// Close waits for background revalidations started by Get to return.
func (c *Cache) Close() { c.bg.Wait() }

func (c *Cache) now() time.Time { return c.cfg.Clock.Now() }

func (c *Cache) maxAge(d time.Duration) time.Duration {
	if d == 0 {
		return c.cfg.DefaultMaxAge
	}
	return d
}

func (c *Cache) fresh(ix indexRec, maxAge time.Duration, now time.Time) bool {
	return maxAge != NoCache && !ix.Stale && now.Sub(ix.Created) <= c.maxAge(maxAge)
}

func (c *Cache) abandoned(r resRec, now time.Time) bool {
	return now.Sub(r.Since) >= c.cfg.ReservationTimeout
}

func blobKey(sig string, v uint64) string { return fmt.Sprintf("%s/%016x", sig, v) }

func urlKey(u string) string {
	h := sha256.Sum256([]byte(u))
	return hex.EncodeToString(h[:16])
}

func getJSON(tx state.ReadTx, bucket, key string, v any) (bool, error) {
	raw := tx.GetRaw(bucket, key)
	if raw == nil {
		return false, nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return true, fmt.Errorf("rendercache: %s/%s: %w", bucket, key, err)
	}
	return true, nil
}

// scanJSON decodes every record of bucket as a T; records that do not
// decode are skipped and named in the error.
func scanJSON[T any](st *state.Store, bucket string, each func(key string, rec T)) error {
	var errs []error
	st.Scan(bucket, "", func(key string, raw []byte) bool {
		var rec T
		if err := json.Unmarshal(raw, &rec); err != nil {
			errs = append(errs, fmt.Errorf("rendercache: %s/%s: %w", bucket, key, err))
			return true
		}
		each(key, rec)
		return true
	})
	return errors.Join(errs...)
}

// readEntry reads sig's current version: index and body from the same
// snapshot, so never a mix of versions.
func readEntry(tx state.ReadTx, sig string) (*Entry, *indexRec, error) {
	var ix indexRec
	ok, err := getJSON(tx, BucketIndex, sig, &ix)
	if !ok || err != nil {
		return nil, nil, err
	}
	body := tx.GetRaw(BucketBlobs, blobKey(sig, ix.Version))
	if body == nil || int64(len(body)) != ix.Size {
		return nil, nil, fmt.Errorf("%w: %s v%d", ErrCorrupt, sig, ix.Version)
	}
	return &Entry{
		Sig: sig, URL: ix.URL, ContentType: ix.ContentType, Body: slices.Clone(body),
		Hash: ix.Hash, Created: ix.Created, Version: ix.Version, Stale: ix.Stale, Owner: ix.Owner,
	}, &ix, nil
}

func (c *Cache) touch(sig string, at time.Time) {
	c.umu.Lock()
	c.used[sig] = at
	c.umu.Unlock()
}

// Lookup says what the cache holds for sig under maxAge (0 = the
// default, NoCache = nothing is fresh) and counts it:
// Hit(entry) | Stale(entry) | Generating(since, holder[, previous entry]) | Miss.
// A fresh entry is a Hit even while a forced re-render is under way.
func (c *Cache) Lookup(sig string, maxAge time.Duration) (Result, error) {
	res, err := c.lookup(sig, maxAge)
	if err == nil {
		c.count(res.Status)
	}
	return res, err
}

func (c *Cache) lookup(sig string, maxAge time.Duration) (Result, error) {
	now := c.now()
	var res Result
	err := c.st.View(func(tx state.ReadTx) error {
		res = Result{}
		var r resRec
		hasRes, err := getJSON(tx, BucketReservations, sig, &r)
		if err != nil {
			return err
		}
		e, ix, err := readEntry(tx, sig)
		if err != nil {
			return err
		}
		res.Entry = e
		switch {
		case e != nil && c.fresh(*ix, maxAge, now):
			res.Status = Hit
		case hasRes && !c.abandoned(r, now):
			res.Status, res.Since, res.Holder = Generating, r.Since, r.Holder
		case e != nil:
			res.Status = Stale
		default:
			res.Status = Miss
		}
		return nil
	})
	if err != nil {
		return Result{}, err
	}
	if res.Status == Hit {
		c.touch(sig, now)
	}
	return res, nil
}

// Reserve races for sig's reservation (the document's "grabbing the
// reservation"): in one transaction, if someone holds a live reservation
// the answer is Generating since T by them; if a fresh entry exists under
// maxAge it is a Hit; else holder gets it (Reserved) and must end it with
// Complete or Fail. A reservation older than ReservationTimeout is taken
// over. canonicalURL links the signature to its URL (Purge, MarkStale).
// The render is recorded without an owner: see ReserveFor.
func (c *Cache) Reserve(sig, canonicalURL, holder string, maxAge time.Duration) (Result, error) {
	return c.ReserveFor("", sig, canonicalURL, holder, maxAge)
}

// ReserveFor is Reserve on behalf of owner, the principal whose partition
// the render goes to (its signature is expected to include the owner, as
// Key's does); PurgeFor and MarkStaleFor of another owner leave it alone.
func (c *Cache) ReserveFor(owner, sig, canonicalURL, holder string, maxAge time.Duration) (Result, error) {
	res, _, err := c.reserve(sig, canonicalURL, owner, holder, maxAge)
	return res, err
}

// reserve also returns the flight to wait on when the answer is
// Generating or Reserved, taken under the same lock as the decision so a
// quick Fail or Complete cannot slip between them.
func (c *Cache) reserve(sig, canonicalURL, owner, holder string, maxAge time.Duration) (Result, *flight, error) {
	if holder == "" {
		return Result{}, nil, errors.New("rendercache: empty reservation holder")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	var res Result
	takeover := false
	err := c.st.Update(func(tx state.Tx) error {
		res, takeover = Result{}, false
		var r resRec
		hasRes, err := getJSON(tx, BucketReservations, sig, &r)
		if err != nil {
			return err
		}
		if hasRes && !c.abandoned(r, now) {
			res.Status, res.Since, res.Holder = Generating, r.Since, r.Holder
			return nil
		}
		e, ix, err := readEntry(tx, sig)
		if err != nil {
			return err
		}
		if e != nil && c.fresh(*ix, maxAge, now) {
			res.Status, res.Entry = Hit, e
			return nil
		}
		takeover = hasRes
		if err := tx.Put(BucketReservations, sig, resRec{Holder: holder, Since: now, URL: canonicalURL, Owner: owner}); err != nil {
			return err
		}
		if err := link(tx, canonicalURL, sig); err != nil {
			return err
		}
		res.Status, res.Since, res.Holder = Reserved, now, holder
		return nil
	})
	if err != nil {
		return Result{}, nil, fmt.Errorf("rendercache: reserve: %w", err)
	}
	switch res.Status {
	case Hit:
		c.touch(sig, now)
		return res, nil, nil
	case Reserved:
		delete(c.failed, sig)
		if takeover {
			c.log.Warn().Str("sig", sig).Str("holder", holder).Msg("abandoned reservation taken over")
		}
	}
	// Waiters of an abandoned reservation keep waiting, now for the new
	// holder's render.
	f := c.flights[sig]
	if f == nil {
		f = &flight{done: make(chan struct{})}
		c.flights[sig] = f
	}
	return res, f, nil
}

// endFlight wakes sig's waiters with entry or err (c.mu held).
func (c *Cache) endFlight(sig string, e *Entry, err error) {
	if f := c.flights[sig]; f != nil {
		delete(c.flights, sig)
		f.entry, f.err = e, err
		close(f.done)
	}
}

// Complete stores holder's finished render of sig as its new version and
// ends the reservation, waking the waiters with it. The new body and the
// index switch to it are one transaction, which also deletes the previous
// version's body: a reader sees the old version or the new one, whole.
// If the total would exceed MaxBytes, least recently used entries are
// evicted first. A render larger than MaxEntryBytes is handed to the
// waiters but not stored (stored=false; the job still succeeds).
func (c *Cache) Complete(sig, holder string, r Render) (entry Entry, stored bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	size := int64(len(r.Body))
	sum := sha256.Sum256(r.Body)
	entry = Entry{Sig: sig, ContentType: r.ContentType, Body: slices.Clone(r.Body), Hash: hex.EncodeToString(sum[:])}
	stored = size <= c.cfg.MaxEntryBytes

	var victims []meta
	var oldSize int64
	if stored {
		metas, err := c.scanIndex()
		if err != nil {
			return Entry{}, false, err
		}
		metas = slices.DeleteFunc(metas, func(m meta) bool {
			if m.Sig == sig {
				oldSize = m.Size
				return true
			}
			return false
		})
		victims = lruVictims(metas, c.bytes.Load()-oldSize+size-c.cfg.MaxBytes)
	}

	var had bool
	var freed int64
	err = c.st.Update(func(tx state.Tx) error {
		had, freed = false, 0
		res, err := takeReservation(tx, sig, holder)
		if err != nil {
			return err
		}
		entry.URL, entry.Created, entry.Stale, entry.Owner = res.URL, res.Since, res.Stale, res.Owner
		var old indexRec
		had, err = getJSON(tx, BucketIndex, sig, &old)
		if err != nil {
			return err
		}
		if !stored {
			if !had {
				return unlink(tx, res.URL, sig)
			}
			return nil
		}
		for _, v := range victims {
			if err := dropEntry(tx, v.Sig); err != nil {
				return err
			}
			freed += v.Size
		}
		entry.Version = old.Version + 1
		if err := tx.PutRaw(BucketBlobs, blobKey(sig, entry.Version), r.Body); err != nil {
			return err
		}
		if err := tx.Put(BucketIndex, sig, indexRec{
			Version: entry.Version, URL: res.URL, ContentType: r.ContentType, Size: size,
			Hash: entry.Hash, Created: res.Since, LastUsed: now, Stale: res.Stale, Owner: res.Owner,
		}); err != nil {
			return err
		}
		if had {
			return tx.Delete(BucketBlobs, blobKey(sig, old.Version))
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrNotHolder) {
			return Entry{}, false, err
		}
		return Entry{}, false, fmt.Errorf("rendercache: complete: %w", err)
	}
	if stored {
		c.bytes.Add(size - oldSize - freed)
		if !had {
			c.entries.Add(1)
		}
		c.evicted(victims)
		c.touch(sig, now)
	} else {
		c.log.Warn().Str("sig", sig).Int64("bytes", size).Int64("max", c.cfg.MaxEntryBytes).
			Msg("render larger than the cache's entry limit: not cached")
	}
	delete(c.failed, sig)
	c.endFlight(sig, &entry, nil)
	return entry, stored, nil
}

// evicted accounts for entries dropped to make room (c.mu held).
func (c *Cache) evicted(victims []meta) {
	if len(victims) == 0 {
		return
	}
	c.entries.Add(-int64(len(victims)))
	c.evictionsCnt.Add(int64(len(victims)))
	c.m.evictions.Add(float64(len(victims)))
	c.umu.Lock()
	for _, v := range victims {
		delete(c.used, v.Sig)
	}
	c.umu.Unlock()
	c.log.Debug().Int("entries", len(victims)).Msg("evicted least recently used")
}

// takeReservation removes holder's reservation of sig and returns it
// (ErrNotHolder if holder does not hold it).
func takeReservation(tx state.Tx, sig, holder string) (resRec, error) {
	var res resRec
	ok, err := getJSON(tx, BucketReservations, sig, &res)
	if err != nil {
		return res, err
	}
	if !ok || res.Holder != holder {
		return res, ErrNotHolder
	}
	return res, tx.Delete(BucketReservations, sig)
}

// Fail ends holder's reservation of sig without a result. Its waiters get
// a *RenderError with cause (they do not render themselves: a page that
// just failed is not fetched again N times at once); the next request
// after the failure reserves and renders anew. The previous version, if
// any, stays.
func (c *Cache) Fail(sig, holder string, cause error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.st.Update(func(tx state.Tx) error {
		res, err := takeReservation(tx, sig, holder)
		if err != nil {
			return err
		}
		if tx.GetRaw(BucketIndex, sig) == nil {
			return unlink(tx, res.URL, sig)
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrNotHolder) {
			return err
		}
		return fmt.Errorf("rendercache: fail: %w", err)
	}
	rerr := &RenderError{Holder: holder, Err: cause}
	c.failed[sig] = failure{err: rerr, at: c.now()}
	c.endFlight(sig, nil, rerr)
	return nil
}

// Wait blocks until sig's current reservation ends and returns the entry
// it produced, or the reserving render's *RenderError, ErrAbandoned if
// the reservation was given up, or ctx's error. Without a reservation it
// returns the last failure (if the signature failed and was not reserved
// since), else the cached entry whatever its age, else ErrNotCached.
func (c *Cache) Wait(ctx context.Context, sig string) (Entry, error) {
	c.mu.Lock()
	var r resRec
	var ok bool
	err := c.st.View(func(tx state.ReadTx) error {
		var err error
		ok, err = getJSON(tx, BucketReservations, sig, &r)
		return err
	})
	if err != nil {
		c.mu.Unlock()
		return Entry{}, err
	}
	if ok && c.abandoned(r, c.now()) {
		c.mu.Unlock()
		return Entry{}, ErrAbandoned
	}
	if ok {
		f := c.flights[sig]
		if f == nil { // reserved before a restart
			f = &flight{done: make(chan struct{})}
			c.flights[sig] = f
		}
		c.mu.Unlock()
		return c.waitFlight(ctx, f)
	}
	fail, failed := c.failed[sig]
	c.mu.Unlock()
	if failed {
		return Entry{}, fail.err
	}
	var e *Entry
	err = c.st.View(func(tx state.ReadTx) error {
		var err error
		e, _, err = readEntry(tx, sig)
		return err
	})
	if err != nil {
		return Entry{}, err
	}
	if e == nil {
		return Entry{}, ErrNotCached
	}
	return *e, nil
}

func (c *Cache) waitFlight(ctx context.Context, f *flight) (Entry, error) {
	c.waiting.Add(1)
	defer c.waiting.Add(-1)
	select {
	case <-ctx.Done():
		return Entry{}, ctx.Err()
	case <-f.done:
	}
	if f.err != nil {
		return Entry{}, f.err
	}
	return *f.entry, nil
}

// StartFunc starts the render of a reserved signature. holder is the
// reservation's holder: whoever finishes the render passes it to Complete
// (or Fail). It may render synchronously and call Complete itself, or
// submit a job whose end calls Complete/Fail; either way it returns once
// the render is under way. An error ends the reservation as failed.
type StartFunc func(ctx context.Context, holder string) error

// GetOptions tune Get.
type GetOptions struct {
	// MaxAge: 0 = DefaultMaxAge; NoCache = render even if fresh.
	MaxAge time.Duration
	// StaleWhileRevalidate answers with a stale entry at once (Outcome
	// Stale) and starts its regeneration in the background, instead of
	// waiting for the fresh one (the default).
	StaleWhileRevalidate bool
	// Holder names the reservation if this call gets it (e.g. a job id
	// minted beforehand); "" = a random one.
	Holder string
	// Owner is the principal a render this call starts is recorded for
	// (ReserveFor).
	Owner string
}

// Get is the synchronous read: a fresh entry is returned at once (Hit);
// otherwise the caller races for the reservation: the winner calls start
// and waits for its render (Miss); the losers wait for the same render
// (Generating). N identical concurrent calls cause one start and get the
// same result. If the render fails, every waiter gets its *RenderError.
func (c *Cache) Get(ctx context.Context, sig, canonicalURL string, o GetOptions, start StartFunc) (Entry, Status, error) {
	if o.MaxAge != NoCache {
		res, err := c.lookup(sig, o.MaxAge)
		if err != nil {
			return Entry{}, Miss, err
		}
		if res.Status == Hit {
			c.count(Hit)
			return *res.Entry, Hit, nil
		}
		if o.StaleWhileRevalidate && res.Entry != nil {
			if res.Status == Stale {
				c.revalidate(ctx, sig, canonicalURL, o, start)
			}
			c.count(Stale)
			return *res.Entry, Stale, nil
		}
	}
	for {
		holder := o.Holder
		if holder == "" {
			holder = NewHolder()
		}
		res, f, err := c.reserve(sig, canonicalURL, o.Owner, holder, o.MaxAge)
		if err != nil {
			return Entry{}, Miss, err
		}
		outcome := Generating
		switch res.Status {
		case Hit:
			c.count(Hit)
			return *res.Entry, Hit, nil
		case Reserved:
			outcome = Miss
			if err := start(ctx, holder); err != nil {
				// Fail wakes anyone already waiting with this error.
				if ferr := c.Fail(sig, holder, err); ferr != nil && !errors.Is(ferr, ErrNotHolder) {
					c.log.Error().Err(ferr).Str("sig", sig).Msg("ending a reservation whose render did not start")
				}
				c.count(Miss)
				return Entry{}, Miss, &RenderError{Holder: holder, Err: err}
			}
		}
		e, err := c.waitFlight(ctx, f)
		if errors.Is(err, ErrAbandoned) {
			continue // race for a new reservation
		}
		c.count(outcome)
		return e, outcome, err
	}
}

// revalidate starts sig's regeneration in the background if nobody is
// generating it (stale-while-revalidate).
func (c *Cache) revalidate(ctx context.Context, sig, canonicalURL string, o GetOptions, start StartFunc) {
	holder := o.Holder
	if holder == "" {
		holder = NewHolder()
	}
	res, _, err := c.reserve(sig, canonicalURL, o.Owner, holder, o.MaxAge)
	if err != nil || res.Status != Reserved {
		return
	}
	bctx := context.WithoutCancel(ctx) // the caller is answered before the render ends
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		if err := start(bctx, holder); err != nil {
			_ = c.Fail(sig, holder, err)
		}
	}()
}

// NewHolder returns a random reservation holder name.
func NewHolder() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "r-" + hex.EncodeToString(b[:])
}

// Reservations lists the durable reservations (the lead reconciles them
// with its jobs after a restart: Fail those whose job is gone).
func (c *Cache) Reservations() ([]Reservation, error) {
	var out []Reservation
	err := scanJSON(c.st, BucketReservations, func(sig string, r resRec) {
		out = append(out, Reservation{Sig: sig, URL: r.URL, Holder: r.Holder, Owner: r.Owner, Since: r.Since})
	})
	return out, err
}

// Stats returns the counters and sizes.
func (c *Cache) Stats() Stats {
	return Stats{
		Hits: c.hits.Load(), Misses: c.misses.Load(), Stale: c.stale.Load(),
		GeneratingWaits: c.waits.Load(), Evictions: c.evictionsCnt.Load(),
		Bytes: c.bytes.Load(), Entries: c.entries.Load(),
	}
}

func (c *Cache) count(s Status) {
	switch s {
	case Hit:
		c.hits.Add(1)
	case Miss:
		c.misses.Add(1)
	case Stale:
		c.stale.Add(1)
	case Generating:
		c.waits.Add(1)
	default:
		return
	}
	c.m.requests.WithLabelValues(s.String()).Inc()
}
