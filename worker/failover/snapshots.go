package failover

import (
	"bytes"
	"context"
	"encoding/json"
	"iter"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// Browser snapshots: a browser is snapshotted right after it is made,
// after each top-level navigation, after each shared-state write of its
// page, and at most every interval (Run) while something happens in it
// (input, repaints). Snapshots run off the input
// path, one at a time per browser; one that equals the last one sent is
// not sent again.

// DefaultSnapshotInterval is the default interval of the periodic
// snapshots.
const DefaultSnapshotInterval = 5 * time.Second

// InputHoldMax bounds how long a migration holds a browser's input
// (HoldAndSave): a move that has not happened by then (the master gave
// up: no other worker, or the restore failed there) gives the input back
// to this copy.
const InputHoldMax = 20 * time.Second

// Bounds on what one snapshot takes, and on the time its steps take.
const (
	// maxStorage bounds the localStorage and sessionStorage entries (keys
	// and values, in characters) of one browser; entries beyond it are
	// left out, with a log line.
	maxStorage = 1 << 20
	// maxCookies bounds the cookies (names and values) kept.
	maxCookies = 512 << 10
	// maxForm bounds the form fields' keys and values (in characters)
	// kept of one page (browser.CaptureForm).
	maxForm = 256 << 10
	// saveTimeout bounds taking and sending one snapshot.
	saveTimeout = 10 * time.Second
	// restoreTimeout bounds recreating one browser.
	restoreTimeout = 45 * time.Second
	// restoreParallel browsers of an instance are recreated at a time.
	restoreParallel = 4
)

// SnapshotStore is where snapshots are kept: the master.
type SnapshotStore interface {
	SaveBrowser(ctx context.Context, req wire.SaveBrowser) error
	Browsers(ctx context.Context, iid, after string) (wire.BrowserSnapshots, error)
}

// The master's InstanceState object is the store.
var _ SnapshotStore = contract.InstanceStateClient{}

// Subject is a virtual browser as failover sees it; the worker's
// virtual browsers implement it.
type Subject interface {
	// Snap is the browser's snapshot bookkeeping and input gate.
	Snap() *BrowserState
	// Browser is the browser its page runs in.
	Browser() browser.Browser
	// Describe is what the worker knows of the browser now.
	Describe() Info
	// Clients are the browser's clients (its hub), nil while it has
	// none.
	Clients() Clients
}

// Info is what the worker knows of a virtual browser: the part of its
// snapshot that its page does not show.
type Info struct {
	// Instance is the browser's instance, Epoch the placement epoch the
	// instance is held under here: snapshots are saved under it.
	Instance string
	Epoch    uint64
	ID       string
	Owner    string
	Created  time.Time
	// Theirs: this is its owner's browser in the instance (the one the
	// strategy gives them).
	Theirs bool
	// Name is the name its owner gave it; Perms its grants (principal →
	// role; nil: none).
	Name  string
	Perms map[string]string
	// Released: the browser was given back to its pool without being
	// closed on its own (its instance closed or moved). Nothing is saved
	// of it then: its browser may serve someone else by now.
	Released bool
}

// Clients are a browser's clients (engine.Hub), told when a migration
// holds the browser's input and when a hold ends without a move.
type Clients interface {
	AnnounceHold()
	AnnounceResume()
	// Closed reports whether the clients' side ended (the browser closed,
	// was released or moved).
	Closed() bool
}

// BrowserState is one browser's snapshot bookkeeping and its input gate.
// Its zero value is ready; the worker keeps one in each virtual browser.
type BrowserState struct {
	// dirty: something happened since the last snapshot.
	dirty atomic.Bool
	// width and height are the viewport as last set (CSS pixels).
	width, height atomic.Int32

	// sendMu serializes taking and sending snapshots, so a periodic one
	// taken before a migration's cannot be stored after it.
	sendMu sync.Mutex

	// inMu orders the clients' input with a migration's hold: input is
	// dispatched under its read lock and a hold takes the write lock, so
	// once hold returns nothing more reaches the page. held and holdGen
	// are guarded by it.
	inMu    sync.RWMutex
	held    bool
	holdGen uint64

	mu      sync.Mutex
	running bool // a snapshot goroutine runs for this browser
	again   bool // asked again while running
	gone    bool // the browser closed: its snapshot is to be removed
	url     string
	last    []byte // the last snapshot sent (without its time)
}

// Touched marks the page for the next periodic snapshot: something
// happened in it.
func (s *BrowserState) Touched() { s.dirty.Store(true) }

// Resized keeps the viewport (CSS pixels) a snapshot restores.
func (s *BrowserState) Resized(width, height int) {
	s.width.Store(int32(width))
	s.height.Store(int32(height))
}

// SnapshotConfig configures Snapshots.
type SnapshotConfig struct {
	// Store keeps the snapshots (required).
	Store SnapshotStore
	// Clock runs the input holds' time limit (default clock.Real).
	Clock clock.Clock
	Log   zerolog.Logger
}

// Snapshots snapshots a worker's browsers into its store, restores
// browsers from their snapshots and holds their input during a migration.
// A nil *Snapshots keeps nothing (a worker without a master): Started,
// PageChanged, Forget, Run, HoldAndSave and Resume do nothing, and Load
// finds nothing to restore.
type Snapshots struct {
	ctx   context.Context
	store SnapshotStore
	clock clock.Clock
	log   zerolog.Logger
}

// NewSnapshots makes a Snapshots. ctx is its life: the snapshots it takes
// on its own stop when ctx ends.
func NewSnapshots(ctx context.Context, cfg SnapshotConfig) *Snapshots {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real
	}
	return &Snapshots{ctx: ctx, store: cfg.Store, clock: cfg.Clock, log: cfg.Log}
}

// Started snapshots b at once: it was just made (or restored) and added
// to its instance.
func (sn *Snapshots) Started(b Subject) {
	if sn == nil {
		return
	}
	s := b.Snap()
	s.mu.Lock()
	s.url = b.Browser().Page().URL
	s.mu.Unlock()
	sn.kick(b)
}

// PageChanged takes b's new page (browser.Browser.OnPageChange): a
// top-level navigation is snapshotted at once, anything else at the next
// periodic snapshot.
func (sn *Snapshots) PageChanged(b Subject, p browser.Page) {
	if sn == nil {
		return
	}
	s := b.Snap()
	s.mu.Lock()
	moved := p.URL != s.url
	s.url = p.URL
	s.mu.Unlock()
	s.dirty.Store(true)
	if moved {
		sn.kick(b)
	}
}

// Wrote snapshots b at once: its page's shared-state write was just
// acknowledged. The page changed itself for that write (a chat clears the
// draft it sent), and a failover must not bring that draft back next to
// the message it became, as a snapshot up to an interval old would.
func (sn *Snapshots) Wrote(b Subject) {
	if sn == nil {
		return
	}
	sn.kick(b)
}

// Forget removes a closed browser's snapshot (after any snapshot of it
// still in flight).
func (sn *Snapshots) Forget(b Subject) {
	if sn == nil {
		return
	}
	s := b.Snap()
	s.mu.Lock()
	s.gone = true
	s.mu.Unlock()
	sn.kick(b)
}

// kick snapshots b now, or right after the snapshot running.
func (sn *Snapshots) kick(b Subject) {
	s := b.Snap()
	s.mu.Lock()
	if s.running {
		s.again = true
		s.mu.Unlock()
		return
	}
	s.running = true
	s.mu.Unlock()
	go func() {
		for {
			s.dirty.Store(false)
			sn.save(b)
			s.mu.Lock()
			if !s.again || sn.ctx.Err() != nil {
				s.running = false
				s.mu.Unlock()
				return
			}
			s.again = false
			s.mu.Unlock()
		}
	}()
}

// Run snapshots the browsers something happened in, every interval, until
// ctx ends. browsers are the worker's browsers, listed again each time.
func (sn *Snapshots) Run(ctx context.Context, interval time.Duration, browsers iter.Seq[Subject]) {
	if sn == nil {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for b := range browsers {
			if b.Snap().dirty.Load() {
				sn.kick(b)
			}
		}
	}
}

// save takes and sends one snapshot of b (or removes it).
func (sn *Snapshots) save(b Subject) {
	ctx, cancel := context.WithTimeout(sn.ctx, saveTimeout)
	defer cancel()
	s := b.Snap()
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	info := b.Describe()
	req := wire.SaveBrowser{Instance: info.Instance, Epoch: info.Epoch}
	s.mu.Lock()
	gone, sent := s.gone, s.last != nil
	s.mu.Unlock()
	if gone {
		if !sent {
			return
		}
		req.Remove = info.ID
		if err := sn.store.SaveBrowser(ctx, req); err != nil {
			sn.log.Debug().Str("instance", info.Instance).Str("browser", info.ID).Err(err).Msg("browser snapshot not removed")
		}
		return
	}
	if info.Released {
		return
	}
	snap := sn.take(ctx, b, info)
	enc, _ := json.Marshal(snap)
	s.mu.Lock()
	same := bytes.Equal(enc, s.last)
	s.mu.Unlock()
	if same {
		return
	}
	snap.Taken = time.Now()
	req.Snapshot = &snap
	if err := sn.store.SaveBrowser(ctx, req); err != nil {
		sn.log.Debug().Str("instance", info.Instance).Str("browser", info.ID).Err(err).Msg("browser snapshot not saved")
		return
	}
	s.mu.Lock()
	s.last = enc
	s.mu.Unlock()
}
