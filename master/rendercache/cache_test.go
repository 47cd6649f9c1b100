package rendercache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock/clocktest"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/state"
)

type fixture struct {
	c     *Cache
	clock *clocktest.Clock
	st    *state.Store
	path  string
}

// newFixture opens a cache on a bbolt file in t.TempDir() (path "" in
// mod's view means a fresh one) with a fake clock.
func newFixture(t testing.TB, mod func(*Config)) *fixture {
	t.Helper()
	f := &fixture{clock: clocktest.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)),
		path: filepath.Join(t.TempDir(), state.FileName)}
	f.open(t, mod)
	t.Cleanup(func() { f.c.Close(); f.st.Close() })
	return f
}

func (f *fixture) open(t testing.TB, mod func(*Config)) {
	t.Helper()
	st, err := state.Open(f.path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Store: st, Clock: f.clock, Logger: zerolog.Nop()}
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.c, f.st = c, st
}

// reopen closes the store as a stopped master would and opens it again.
func (f *fixture) reopen(t testing.TB, mod func(*Config)) {
	t.Helper()
	f.c.Close()
	if err := f.st.Close(); err != nil {
		t.Fatal(err)
	}
	f.open(t, mod)
}

func key(t testing.TB, c *Cache, u string, format string) (string, string) {
	t.Helper()
	sig, cu, err := c.Key(wire.JobSpec{Kind: wire.JobRender, URL: u, Format: format}, false)
	if err != nil {
		t.Fatal(err)
	}
	return sig, cu
}

// put renders sig at once with body.
func put(t testing.TB, c *Cache, sig, cu, body string) Entry {
	t.Helper()
	res, err := c.Reserve(sig, cu, "h-put", NoCache)
	if err != nil || res.Status != Reserved {
		t.Fatalf("reserve = %+v %v", res, err)
	}
	e, stored, err := c.Complete(sig, "h-put", Render{ContentType: "image/png", Body: []byte(body)})
	if err != nil || !stored {
		t.Fatalf("complete = %v %v", stored, err)
	}
	return e
}

// TestGetSingleFlight: 100 identical concurrent Gets cause exactly one
// start; the 99 others wait for that render and all get the same bytes.
func TestGetSingleFlight(t *testing.T) {
	f := newFixture(t, nil)
	sig, cu := key(t, f.c, "https://example.com/report?b=2&a=1", "png")
	var starts atomic.Int32
	release := make(chan struct{})
	rendered := make(chan error, 1)
	start := func(_ context.Context, holder string) error {
		starts.Add(1)
		go func() { // the "job": finishes when the test says so
			<-release
			_, _, err := f.c.Complete(sig, holder, Render{ContentType: "image/png", Body: []byte("the-render")})
			rendered <- err
		}()
		return nil
	}
	const n = 100
	type got struct {
		e   Entry
		out Status
		err error
	}
	results := make(chan got, n)
	for range n {
		go func() {
			e, out, err := f.c.Get(context.Background(), sig, cu, GetOptions{}, start)
			results <- got{e, out, err}
		}()
	}
	testutil.Eventually(t, 30*time.Second, testutil.Cond("99 waiters", func() bool { return f.c.waiting.Load() == n }))
	close(release)
	if err := <-rendered; err != nil {
		t.Fatal(err)
	}
	outcomes := map[Status]int{}
	for range n {
		g := <-results
		if g.err != nil {
			t.Fatal(g.err)
		}
		if string(g.e.Body) != "the-render" || g.e.Version != 1 {
			t.Fatalf("entry = %q v%d", g.e.Body, g.e.Version)
		}
		outcomes[g.out]++
	}
	if s := starts.Load(); s != 1 {
		t.Fatalf("starts = %d, want 1", s)
	}
	if outcomes[Miss] != 1 || outcomes[Generating] != n-1 {
		t.Fatalf("outcomes = %v", outcomes)
	}
	// Now it is cached: a Get is a hit and starts nothing.
	if _, out, err := f.c.Get(context.Background(), sig, cu, GetOptions{}, start); err != nil || out != Hit || starts.Load() != 1 {
		t.Fatalf("after: %v %v starts=%d", out, err, starts.Load())
	}
	st := f.c.Stats()
	if st.Misses != 1 || st.GeneratingWaits != n-1 || st.Hits != 1 || st.Entries != 1 || st.Bytes != int64(len("the-render")) {
		t.Fatalf("stats = %+v", st)
	}
	if v := metricValue(t, f.c.m.requests.WithLabelValues("generating")); v != n-1 {
		t.Fatalf("generating metric = %v", v)
	}
}

// TestReservationFailure: when the reserving render fails, its waiters
// get that error (they do not render); the next request renders anew.
func TestReservationFailure(t *testing.T) {
	f := newFixture(t, nil)
	sig, cu := key(t, f.c, "https://example.com/flaky", "png")
	boom := errors.New("navigation: net::ERR_CONNECTION_REFUSED")
	var starts atomic.Int32
	fail := make(chan struct{})
	start := func(_ context.Context, holder string) error {
		if starts.Add(1) == 1 {
			go func() {
				<-fail
				if err := f.c.Fail(sig, holder, boom); err != nil {
					t.Error(err)
				}
			}()
			return nil
		}
		_, _, err := f.c.Complete(sig, holder, Render{ContentType: "text/plain", Body: []byte("ok now")})
		return err
	}
	const n = 20
	errs := make(chan error, n)
	for range n {
		go func() {
			_, _, err := f.c.Get(context.Background(), sig, cu, GetOptions{}, start)
			errs <- err
		}()
	}
	testutil.Eventually(t, 30*time.Second, testutil.Cond("all waiting", func() bool { return f.c.waiting.Load() == n }))
	close(fail)
	for range n {
		err := <-errs
		var re *RenderError
		if !errors.As(err, &re) || !errors.Is(err, boom) {
			t.Fatalf("waiter err = %v, want the render's error", err)
		}
	}
	if starts.Load() != 1 {
		t.Fatalf("starts = %d after the failure, want 1 (waiters must not render)", starts.Load())
	}
	// A Wait that starts after the failure still learns of it.
	if _, err := f.c.Wait(context.Background(), sig); !errors.Is(err, boom) {
		t.Fatalf("late Wait = %v", err)
	}
	// The next request renders again.
	e, out, err := f.c.Get(context.Background(), sig, cu, GetOptions{}, start)
	if err != nil || out != Miss || string(e.Body) != "ok now" || starts.Load() != 2 {
		t.Fatalf("retry = %q %v %v starts=%d", e.Body, out, err, starts.Load())
	}

	// A start that fails at once: the caller gets its error, the
	// reservation ends.
	sig2, cu2 := key(t, f.c, "https://example.com/refused", "png")
	_, _, err = f.c.Get(context.Background(), sig2, cu2, GetOptions{}, func(context.Context, string) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("start error = %v", err)
	}
	if res, _ := f.c.Lookup(sig2, 0); res.Status != Miss {
		t.Fatalf("after failed start: %v", res.Status)
	}
	// Only the holder ends a reservation.
	if _, err := f.c.Reserve(sig2, cu2, "a", 0); err != nil {
		t.Fatal(err)
	}
	if err := f.c.Fail(sig2, "b", boom); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("Fail by another = %v", err)
	}
	if _, _, err := f.c.Complete(sig2, "b", Render{Body: []byte("x")}); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("Complete by another = %v", err)
	}
}

// TestReserveRace: concurrent Reserve calls: exactly one wins; the
// others see Generating since the winner's time, by the winner.
func TestReserveRace(t *testing.T) {
	f := newFixture(t, nil)
	sig, cu := key(t, f.c, "https://example.com/", "pdf")
	var wg sync.WaitGroup
	var won atomic.Int32
	var mu sync.Mutex
	holders := map[string]int{}
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := f.c.Reserve(sig, cu, fmt.Sprint("h", i), 0)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			switch res.Status {
			case Reserved:
				won.Add(1)
				holders[res.Holder]++
			case Generating:
				if !res.Since.Equal(f.clock.Now()) {
					t.Errorf("since = %v", res.Since)
				}
				holders[res.Holder]++
			default:
				t.Errorf("status %v", res.Status)
			}
		}()
	}
	wg.Wait()
	if won.Load() != 1 || len(holders) != 1 {
		t.Fatalf("winners = %d, holders seen = %v", won.Load(), holders)
	}
}

func TestStaleness(t *testing.T) {
	ctx := context.Background()
	t.Run("age", func(t *testing.T) {
		f := newFixture(t, func(c *Config) { c.DefaultMaxAge = time.Hour })
		sig, cu := key(t, f.c, "https://example.com/", "png")
		put(t, f.c, sig, cu, "v1")
		f.clock.Advance(time.Hour)
		if res, _ := f.c.Lookup(sig, 0); res.Status != Hit || res.Entry.Age(f.clock.Now()) != time.Hour {
			t.Fatalf("at max age: %v", res.Status)
		}
		if res, _ := f.c.Lookup(sig, 30*time.Minute); res.Status != Stale {
			t.Fatalf("per-request max age 30m: %v", res.Status)
		}
		if res, _ := f.c.Lookup(sig, NoCache); res.Status != Stale {
			t.Fatalf("no-cache: %v", res.Status)
		}
		f.clock.Advance(time.Second)
		res, _ := f.c.Lookup(sig, 0)
		if res.Status != Stale || string(res.Entry.Body) != "v1" {
			t.Fatalf("past max age: %v", res.Status)
		}
		if res, _ := f.c.Lookup(sig, 2*time.Hour); res.Status != Hit {
			t.Fatalf("per-request max age 2h: %v", res.Status)
		}
		// The synchronous Get renders again and waits for it.
		e, out, err := f.c.Get(ctx, sig, cu, GetOptions{}, completeWith(f.c, sig, "v2"))
		if err != nil || out != Miss || string(e.Body) != "v2" || e.Version != 2 {
			t.Fatalf("get = %q v%d %v %v", e.Body, e.Version, out, err)
		}
		// Stale-while-revalidate: the old bytes at once, the new ones later.
		f.clock.Advance(2 * time.Hour)
		started := make(chan string, 1)
		e, out, err = f.c.Get(ctx, sig, cu, GetOptions{StaleWhileRevalidate: true},
			func(_ context.Context, holder string) error { started <- holder; return nil })
		if err != nil || out != Stale || string(e.Body) != "v2" {
			t.Fatalf("swr = %q %v %v", e.Body, out, err)
		}
		holder := <-started
		// While it regenerates, SWR callers keep getting v2, others wait.
		if res, _ := f.c.Lookup(sig, 0); res.Status != Generating || string(res.Entry.Body) != "v2" {
			t.Fatalf("while regenerating: %v", res.Status)
		}
		if _, _, err := f.c.Complete(sig, holder, Render{Body: []byte("v3")}); err != nil {
			t.Fatal(err)
		}
		if res, _ := f.c.Lookup(sig, 0); res.Status != Hit || string(res.Entry.Body) != "v3" {
			t.Fatalf("after revalidation: %v %q", res.Status, res.Entry.Body)
		}
	})
	t.Run("purge", func(t *testing.T) {
		f := newFixture(t, nil)
		png, cu := key(t, f.c, "https://example.com/p?a=1", "png")
		pdf, _ := key(t, f.c, "https://example.com/p?a=1", "pdf")
		other, ocu := key(t, f.c, "https://example.com/q", "png")
		put(t, f.c, png, cu, "png")
		put(t, f.c, pdf, cu, "pdf")
		put(t, f.c, other, ocu, "other")
		// A signature alone.
		if n, err := f.c.Purge(pdf); err != nil || n != 1 {
			t.Fatalf("purge sig = %d %v", n, err)
		}
		if res, _ := f.c.Lookup(pdf, 0); res.Status != Miss {
			t.Fatalf("purged sig: %v", res.Status)
		}
		if res, _ := f.c.Lookup(png, 0); res.Status != Hit {
			t.Fatalf("sibling of purged sig: %v", res.Status)
		}
		put(t, f.c, pdf, cu, "pdf")
		// A URL, in another spelling: all its signatures, nothing else.
		if n, err := f.c.Purge("HTTPS://Example.com:443/p?utm_source=mail&a=1#x"); err != nil || n != 2 {
			t.Fatalf("purge url = %d %v", n, err)
		}
		for _, s := range []string{png, pdf} {
			if res, _ := f.c.Lookup(s, 0); res.Status != Miss {
				t.Fatalf("purged by URL: %v", res.Status)
			}
		}
		if res, _ := f.c.Lookup(other, 0); res.Status != Hit {
			t.Fatalf("other URL: %v", res.Status)
		}
		if st := f.c.Stats(); st.Entries != 1 || st.Bytes != int64(len("other")) {
			t.Fatalf("stats = %+v", st)
		}
		if n, err := f.c.Purge("https://example.com/never"); err != nil || n != 0 {
			t.Fatalf("purge unknown = %d %v", n, err)
		}
		if _, err := f.c.Purge("::not a url"); err == nil {
			t.Fatal("purge of garbage: no error")
		}
	})
	t.Run("monitor change", func(t *testing.T) {
		f := newFixture(t, nil)
		png, cu := key(t, f.c, "https://example.com/news", "png")
		txt, _ := key(t, f.c, "https://example.com/news", "text")
		put(t, f.c, png, cu, "png")
		put(t, f.c, txt, cu, "text")
		// A render under way when the change is seen...
		res, _ := f.c.Reserve(txt, cu, "h-late", NoCache)
		if res.Status != Reserved {
			t.Fatal(res.Status)
		}
		if n, err := f.c.MarkStale("https://example.com/news"); err != nil || n != 2 {
			t.Fatalf("mark stale = %d %v", n, err)
		}
		if res, _ := f.c.Lookup(png, 24*time.Hour); res.Status != Stale || string(res.Entry.Body) != "png" {
			t.Fatalf("marked stale: %v", res.Status)
		}
		// ... may have loaded the old page: its result is stored stale.
		e, _, err := f.c.Complete(txt, "h-late", Render{Body: []byte("text2")})
		if err != nil || !e.Stale {
			t.Fatalf("complete after mark = %+v %v", e, err)
		}
		if res, _ := f.c.Lookup(txt, 0); res.Status != Stale {
			t.Fatalf("render begun before the change: %v", res.Status)
		}
		// A render begun after it is fresh again.
		e, out, err := f.c.Get(ctx, png, cu, GetOptions{}, completeWith(f.c, png, "png2"))
		if err != nil || out != Miss || e.Stale || string(e.Body) != "png2" {
			t.Fatalf("re-render = %v %v %+v", out, err, e)
		}
		if res, _ := f.c.Lookup(png, 0); res.Status != Hit {
			t.Fatalf("after re-render: %v", res.Status)
		}
	})
}

// completeWith is a StartFunc that renders body synchronously.
func completeWith(c *Cache, sig, body string) StartFunc {
	return func(_ context.Context, holder string) error {
		_, _, err := c.Complete(sig, holder, Render{ContentType: "image/png", Body: []byte(body)})
		return err
	}
}

// TestNoHalfWrittenReads: readers running while an entry is regenerated
// over and over see one whole version each time: body, size, hash and
// version agree (minutia 1). A body is its version number repeated, with
// sizes that change between versions.
func TestNoHalfWrittenReads(t *testing.T) {
	f := newFixture(t, nil)
	sig, cu := key(t, f.c, "https://example.com/live", "html")
	body := func(v uint64) []byte { return bytes.Repeat(fmt.Appendf(nil, "<%d>", v), 100+int(v%7)*1000) }
	put(t, f.c, sig, cu, string(body(1)))
	const versions = 150
	done := make(chan struct{})
	var wg sync.WaitGroup
	var reads atomic.Int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := uint64(0)
			for {
				select {
				case <-done:
					return
				default:
				}
				res, err := f.c.Lookup(sig, NoCache)
				if err != nil {
					t.Error(err)
					return
				}
				e := res.Entry
				if e == nil {
					t.Error("entry vanished while being regenerated")
					return
				}
				if !bytes.Equal(e.Body, body(e.Version)) {
					t.Errorf("version %d with another version's body (%d bytes)", e.Version, len(e.Body))
					return
				}
				if e.Hash != hashOf(e.Body) {
					t.Errorf("v%d: hash does not match body", e.Version)
					return
				}
				if e.Version < last {
					t.Errorf("went back from v%d to v%d", last, e.Version)
					return
				}
				last = e.Version
				reads.Add(1)
			}
		}()
	}
	for v := uint64(2); v <= versions; v++ {
		if _, err := f.c.Reserve(sig, cu, "w", NoCache); err != nil {
			t.Fatal(err)
		}
		e, _, err := f.c.Complete(sig, "w", Render{Body: body(v)})
		if err != nil || e.Version != v {
			t.Fatalf("v%d: %v %v", v, e.Version, err)
		}
	}
	close(done)
	wg.Wait()
	// Old versions are gone: one body left.
	n := 0
	f.st.Scan(BucketBlobs, "", func(string, []byte) bool { n++; return true })
	if n != 1 {
		t.Fatalf("%d bodies stored, want 1", n)
	}
	t.Logf("%d consistent reads during %d versions", reads.Load(), versions)
}

func hashOf(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TestSweep: stale, too old and unused entries, abandoned reservations
// (their waiters are told) go; fresh used entries and live reservations
// stay; URL links of removed signatures go too.
func TestSweep(t *testing.T) {
	f := newFixture(t, func(c *Config) {
		c.DefaultMaxAge = time.Hour
		c.MaxKeep = 48 * time.Hour
		c.UnusedAfter = 24 * time.Hour
		c.ReservationTimeout = 10 * time.Minute
	})
	sigOf := func(p string) (string, string) { return key(t, f.c, "https://example.com/"+p, "png") }
	old, ocu := sigOf("old")
	put(t, f.c, old, ocu, "o")
	f.clock.Advance(12 * time.Hour)
	unused, ucu := sigOf("unused")
	put(t, f.c, unused, ucu, "u")
	f.clock.Advance(28 * time.Hour)
	// "old" is read, but will be older than MaxKeep.
	if res, _ := f.c.Lookup(old, 1000*time.Hour); res.Status != Hit {
		t.Fatal(res.Status)
	}
	marked, mcu := sigOf("marked")
	put(t, f.c, marked, mcu, "m")
	if _, err := f.c.MarkStale(mcu); err != nil {
		t.Fatal(err)
	}
	keep, kcu := sigOf("keep")
	put(t, f.c, keep, kcu, "k")
	gone, gcu := sigOf("abandoned")
	if res, _ := f.c.Reserve(gone, gcu, "lost-job", 0); res.Status != Reserved {
		t.Fatal(res.Status)
	}
	f.clock.Advance(8*time.Hour + time.Minute) // old: 48h01 > MaxKeep; unused: not read for 36h01
	live, lcu := sigOf("live")
	if res, _ := f.c.Reserve(live, lcu, "running-job", 0); res.Status != Reserved {
		t.Fatal(res.Status)
	}
	if res, _ := f.c.Lookup(keep, 48*time.Hour); res.Status != Hit {
		t.Fatal(res.Status)
	}
	// The reservation is past its bound already: Wait says so at once.
	if _, err := f.c.Wait(context.Background(), gone); !errors.Is(err, ErrAbandoned) {
		t.Fatalf("wait on abandoned = %v", err)
	}

	st, err := f.c.Sweep(f.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if st != (SweepStats{Stale: 2, Unused: 1, Abandoned: 1}) {
		t.Fatalf("sweep = %+v", st)
	}
	for sig, want := range map[string]Status{unused: Miss, old: Miss, marked: Miss, gone: Miss, keep: Hit, live: Generating} {
		if res, _ := f.c.Lookup(sig, 48*time.Hour); res.Status != want {
			t.Errorf("%s: %v, want %v", sig[:8], res.Status, want)
		}
	}
	urls := f.st.All(BucketURLs)
	if len(urls) != 2 || urls[urlKey(kcu)] == nil || urls[urlKey(lcu)] == nil {
		t.Fatalf("url links left: %d", len(urls))
	}
	if s := f.c.Stats(); s.Entries != 1 || s.Bytes != 1 {
		t.Fatalf("stats = %+v", s)
	}
	// The abandoned signature can be reserved again; its stale holder
	// can no longer complete it.
	if res, _ := f.c.Reserve(gone, gcu, "new-job", 0); res.Status != Reserved {
		t.Fatal(res.Status)
	}
	if _, _, err := f.c.Complete(gone, "lost-job", Render{Body: []byte("late")}); !errors.Is(err, ErrNotHolder) {
		t.Fatalf("late complete = %v", err)
	}
}

// TestAbandonedTakeover: a Get waiting on a reservation whose render is
// lost is woken by the sweep, races again and renders itself.
func TestAbandonedTakeover(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.ReservationTimeout = 10 * time.Minute })
	sig, cu := key(t, f.c, "https://example.com/", "png")
	if res, _ := f.c.Reserve(sig, cu, "lost", 0); res.Status != Reserved {
		t.Fatal(res.Status)
	}
	type got struct {
		e   Entry
		out Status
		err error
	}
	ch := make(chan got, 1)
	go func() {
		e, out, err := f.c.Get(context.Background(), sig, cu, GetOptions{}, completeWith(f.c, sig, "mine"))
		ch <- got{e, out, err}
	}()
	testutil.Eventually(t, 30*time.Second, testutil.Cond("the Get to wait", func() bool { return f.c.waiting.Load() == 1 }))
	f.clock.Advance(10 * time.Minute)
	if st, err := f.c.Sweep(f.clock.Now()); err != nil || st.Abandoned != 1 {
		t.Fatalf("sweep = %+v %v", st, err)
	}
	g := <-ch
	if g.err != nil || g.out != Miss || string(g.e.Body) != "mine" {
		t.Fatalf("get = %v %v %q", g.out, g.err, g.e.Body)
	}
}

// TestEviction: the total stays under MaxBytes by evicting the least
// recently used; an entry over MaxEntryBytes reaches its waiters but is
// not cached.
func TestEviction(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.MaxBytes = 1000; c.MaxEntryBytes = 500 })
	b400 := string(bytes.Repeat([]byte("x"), 400))
	a, acu := key(t, f.c, "https://example.com/a", "png")
	b, bcu := key(t, f.c, "https://example.com/b", "png")
	c, ccu := key(t, f.c, "https://example.com/c", "png")
	put(t, f.c, a, acu, b400)
	f.clock.Advance(time.Second)
	put(t, f.c, b, bcu, b400)
	f.clock.Advance(time.Second)
	if res, _ := f.c.Lookup(a, 0); res.Status != Hit { // a is now more recent than b
		t.Fatal(res.Status)
	}
	f.clock.Advance(time.Second)
	put(t, f.c, c, ccu, b400)
	for sig, want := range map[string]Status{a: Hit, b: Miss, c: Hit} {
		if res, _ := f.c.Lookup(sig, 0); res.Status != want {
			t.Errorf("%s: %v want %v", sig[:6], res.Status, want)
		}
	}
	st := f.c.Stats()
	if st.Bytes != 800 || st.Entries != 2 || st.Evictions != 1 {
		t.Fatalf("stats = %+v", st)
	}
	if v := metricValue(t, f.c.m.evictions); v != 1 {
		t.Fatalf("evictions metric = %v", v)
	}
	if v := metricValue(t, f.c.m.bytes); v != 800 {
		t.Fatalf("bytes metric = %v", v)
	}

	// Oversize: waiters get it, the cache does not keep it.
	big, bigcu := key(t, f.c, "https://example.com/big", "pdf")
	huge := bytes.Repeat([]byte("y"), 600)
	e, out, err := f.c.Get(context.Background(), big, bigcu, GetOptions{}, func(_ context.Context, h string) error {
		_, stored, err := f.c.Complete(big, h, Render{ContentType: "application/pdf", Body: huge})
		if stored {
			t.Error("oversize entry stored")
		}
		return err
	})
	if err != nil || out != Miss || !bytes.Equal(e.Body, huge) || e.Version != 0 {
		t.Fatalf("oversize get = %v %v v%d", out, err, e.Version)
	}
	if res, _ := f.c.Lookup(big, 0); res.Status != Miss {
		t.Fatalf("oversize cached: %v", res.Status)
	}
	if st := f.c.Stats(); st.Bytes != 800 || st.Entries != 2 {
		t.Fatalf("oversize changed sizes: %+v", st)
	}

	// The sweep enforces a lowered bound too.
	f.reopen(t, func(c *Config) { c.MaxBytes = 500 })
	if s, err := f.c.Sweep(f.clock.Now()); err != nil || s.Evicted != 1 {
		t.Fatalf("sweep = %+v %v", s, err)
	}
	if res, _ := f.c.Lookup(c, 0); res.Status != Hit {
		t.Fatalf("most recent evicted: %v", res.Status)
	}
}

// TestRestart: entries and reservations survive a restart; a waiter after
// the restart is woken by the original holder's Complete.
func TestRestart(t *testing.T) {
	f := newFixture(t, nil)
	done, dcu := key(t, f.c, "https://example.com/done", "png")
	put(t, f.c, done, dcu, "cached")
	queued, qcu := key(t, f.c, "https://example.com/queued", "png")
	if res, _ := f.c.Reserve(queued, qcu, "job-17", 0); res.Status != Reserved {
		t.Fatal(res.Status)
	}
	since := f.clock.Now()
	f.clock.Advance(time.Minute)

	f.reopen(t, nil)

	if st := f.c.Stats(); st.Entries != 1 || st.Bytes != int64(len("cached")) {
		t.Fatalf("stats after restart = %+v", st)
	}
	if res, _ := f.c.Lookup(done, 0); res.Status != Hit || string(res.Entry.Body) != "cached" {
		t.Fatalf("entry after restart: %v", res.Status)
	}
	rs, err := f.c.Reservations()
	if err != nil || len(rs) != 1 || rs[0].Holder != "job-17" || rs[0].URL != qcu || !rs[0].Since.Equal(since) {
		t.Fatalf("reservations = %+v %v", rs, err)
	}
	// Still honoured: another request waits for job-17.
	res, _ := f.c.Reserve(queued, qcu, "other", 0)
	if res.Status != Generating || res.Holder != "job-17" || !res.Since.Equal(since) {
		t.Fatalf("after restart: %+v", res)
	}
	got := make(chan error, 1)
	go func() {
		e, err := f.c.Wait(context.Background(), queued)
		if err == nil && string(e.Body) != "from job-17" {
			err = fmt.Errorf("body %q", e.Body)
		}
		got <- err
	}()
	testutil.Eventually(t, 30*time.Second, testutil.Cond("the waiter", func() bool { return f.c.waiting.Load() == 1 }))
	if _, _, err := f.c.Complete(queued, "job-17", Render{Body: []byte("from job-17")}); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// metricValue reads a one-metric collector (a counter or a gauge).
func metricValue(t testing.TB, c prometheus.Collector) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	var m dto.Metric
	if err := (<-ch).Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

func specFor(i int) wire.JobSpec {
	return wire.JobSpec{Kind: wire.JobRender, URL: fmt.Sprintf("https://example.com/page/%d", i), Format: wire.FormatPNG}
}

// TestOwnerPartitions: entries belong to the principal that rendered them
// (ReserveFor, GetOptions.Owner); PurgeFor and MarkStaleFor touch only
// that principal's entries, Purge (the admin's) every one.
func TestOwnerPartitions(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, nil)
	const u = "https://example.com/account"
	keyAs := func(user string) (string, string) {
		sig, cu, err := f.c.Key(wire.JobSpec{Kind: wire.JobRender, URL: u, Format: wire.FormatText, User: user}, false)
		if err != nil {
			t.Fatal(err)
		}
		return sig, cu
	}
	alice, cu := keyAs("alice")
	bob, _ := keyAs("bob")
	if alice == bob {
		t.Fatal("two principals share a signature")
	}
	if res, err := f.c.ReserveFor("alice", alice, cu, "h-a", NoCache); err != nil || res.Status != Reserved {
		t.Fatalf("reserve = %+v %v", res, err)
	}
	if e, _, err := f.c.Complete(alice, "h-a", Render{Body: []byte("alice's")}); err != nil || e.Owner != "alice" {
		t.Fatalf("complete = %+v %v", e, err)
	}
	if e, out, err := f.c.Get(ctx, bob, cu, GetOptions{Owner: "bob"}, completeWith(f.c, bob, "bob's")); err != nil || out != Miss || e.Owner != "bob" {
		t.Fatalf("bob's render = %v %+v %v", out, e, err)
	}
	lookup := func(sig string) Status {
		t.Helper()
		res, err := f.c.Lookup(sig, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return res.Status
	}
	steps := []struct {
		name       string
		do         func() (int, error)
		n          int
		alice, bob Status
	}{
		{"bob marks his own stale", func() (int, error) { return f.c.MarkStaleFor(u, "bob") }, 1, Hit, Stale},
		{"bob purges the URL", func() (int, error) { return f.c.PurgeFor(u, "bob") }, 1, Hit, Miss},
		{"bob purges alice's signature", func() (int, error) { return f.c.PurgeFor(alice, "bob") }, 0, Hit, Miss},
		{"carol purges the URL", func() (int, error) { return f.c.PurgeFor(u, "carol") }, 0, Hit, Miss},
		{"the admin purges every partition", func() (int, error) { return f.c.Purge(u) }, 1, Miss, Miss},
	}
	for _, s := range steps {
		n, err := s.do()
		if err != nil || n != s.n {
			t.Fatalf("%s: %d %v, want %d", s.name, n, err, s.n)
		}
		if a, b := lookup(alice), lookup(bob); a != s.alice || b != s.bob {
			t.Fatalf("%s: alice %v bob %v, want %v %v", s.name, a, b, s.alice, s.bob)
		}
	}
}
