package failover

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock/clocktest"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// memStore is the master's snapshot store, in memory. With pageSize > 0
// Browsers answers in pages of that many, by id.
type memStore struct {
	mu       sync.Mutex
	snaps    map[string]map[string]wire.BrowserSnapshot // iid -> bid -> snapshot
	saves    int
	removes  int
	epochs   []uint64 // of every request
	pageSize int
}

func newMemStore() *memStore {
	return &memStore{snaps: map[string]map[string]wire.BrowserSnapshot{}}
}

func (m *memStore) SaveBrowser(ctx context.Context, req wire.SaveBrowser) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.epochs = append(m.epochs, req.Epoch)
	if m.snaps[req.Instance] == nil {
		m.snaps[req.Instance] = map[string]wire.BrowserSnapshot{}
	}
	if req.Snapshot == nil {
		m.removes++
		delete(m.snaps[req.Instance], req.Remove)
		return nil
	}
	m.saves++
	m.snaps[req.Instance][req.Snapshot.ID] = *req.Snapshot
	return nil
}

func (m *memStore) Browsers(ctx context.Context, iid, after string) (wire.BrowserSnapshots, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out wire.BrowserSnapshots
	for _, s := range m.snaps[iid] {
		if s.ID > after {
			out.Browsers = append(out.Browsers, s)
		}
	}
	slices.SortFunc(out.Browsers, func(a, b wire.BrowserSnapshot) int { return strings.Compare(a.ID, b.ID) })
	if m.pageSize > 0 && len(out.Browsers) > m.pageSize {
		out.Browsers, out.More = out.Browsers[:m.pageSize], true
	}
	return out, nil
}

func (m *memStore) get(iid, bid string) (wire.BrowserSnapshot, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.snaps[iid][bid]
	return s, ok
}

func (m *memStore) counts() (saves, removes int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.saves, m.removes
}

// recBrowser is a Null browser that records the restore steps made on it;
// its page storage is that of a page at https://example.test.
type recBrowser struct {
	browser.Browser
	mu    sync.Mutex
	calls []string
}

func newRecBrowser(t *testing.T, url string) *recBrowser {
	t.Helper()
	b, err := (&browser.Null{}).NewBrowser(context.Background(), browser.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(context.Background()) })
	return &recBrowser{Browser: b}
}

func (r *recBrowser) rec(s string) { r.mu.Lock(); r.calls = append(r.calls, s); r.mu.Unlock() }

func (r *recBrowser) steps() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...)
}

func (r *recBrowser) SetCookies(ctx context.Context, cs []browser.Cookie) error {
	names := []string{}
	for _, c := range cs {
		if c.Name == "fail" {
			return errors.New("cookie refused")
		}
		names = append(names, c.Name+"="+c.Value)
	}
	r.rec("cookies " + strings.Join(names, ","))
	return r.Browser.SetCookies(ctx, cs)
}

func (r *recBrowser) Input(ctx context.Context, ev browser.InputEvent) error {
	r.rec(fmt.Sprintf("input %s %dx%d", ev.Type, ev.Width, ev.Height))
	return r.Browser.Input(ctx, ev)
}

func (r *recBrowser) Navigate(ctx context.Context, url string) error {
	r.rec("navigate " + url)
	return r.Browser.Navigate(ctx, url)
}

func (r *recBrowser) Evaluate(ctx context.Context, expr string, out any) error {
	var v any
	switch {
	case strings.Contains(expr, "location.origin !== origin"):
		r.rec("storage " + expr[strings.LastIndex(expr, "})(")+3:len(expr)-1])
		v = true
	case strings.Contains(expr, "skipped"):
		v = pageStorage{Origin: "https://example.test", Local: map[string]string{"theme": "dark"}}
	default:
		return errors.New("unsupported")
	}
	j, _ := json.Marshal(v)
	return json.Unmarshal(j, out)
}

// subject is a virtual browser as the worker's are: its browser, what the
// worker knows of it and its clients.
type subject struct {
	st      BrowserState
	b       browser.Browser
	clients *fakeClients // nil: none

	mu   sync.Mutex
	info Info
}

func (s *subject) Snap() *BrowserState      { return &s.st }
func (s *subject) Browser() browser.Browser { return s.b }

func (s *subject) Describe() Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.info
}

func (s *subject) Clients() Clients {
	if s.clients == nil {
		return nil
	}
	return s.clients
}

func (s *subject) update(f func(*Info)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.info)
}

// fakeClients count what a hub's clients are told.
type fakeClients struct {
	mu             sync.Mutex
	holds, resumes int
	closed         bool
}

func (c *fakeClients) AnnounceHold()   { c.mu.Lock(); c.holds++; c.mu.Unlock() }
func (c *fakeClients) AnnounceResume() { c.mu.Lock(); c.resumes++; c.mu.Unlock() }
func (c *fakeClients) Closed() bool    { c.mu.Lock(); defer c.mu.Unlock(); return c.closed }

func (c *fakeClients) told() (holds, resumes int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.holds, c.resumes
}

// newKeeper is a keeper into store that stops with the test.
func newSnapshots(t *testing.T, store SnapshotStore, clk *clocktest.Clock) *Snapshots {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cfg := SnapshotConfig{Store: store, Log: zerolog.Nop()}
	if clk != nil {
		cfg.Clock = clk
	}
	return NewSnapshots(ctx, cfg)
}

// idle waits until no snapshot of b runs.
func idle(t *testing.T, b Subject) {
	t.Helper()
	s := b.Snap()
	testutil.Eventually(t, 10*time.Second, testutil.Cond("the snapshot done", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return !s.running
	}))
}

// seq lists browsers as the worker does.
func seq(bs ...Subject) iter.Seq[Subject] { return slices.Values(bs) }

// A browser is snapshotted when it starts and after each navigation, with
// what the worker knows of it, under its instance's epoch, and with its
// viewport, cookies and storage; an unchanged browser is not sent again,
// one given back to its pool not at all, and a closed browser's snapshot
// is removed (one never sent is not asked to be).
func TestSnapshotsSavedAndRemoved(t *testing.T) {
	store := newMemStore()
	sn := newSnapshots(t, store, nil)
	ctx := context.Background()
	created := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	b := &subject{b: newRecBrowser(t, "https://example.test/"), info: Info{Instance: "w-a.inst", Epoch: 4, ID: "b1", Owner: "alice",
		Created: created, Theirs: true, Name: "main", Perms: map[string]string{"bob": "reader-writer"}}}
	b.st.Resized(800, 600)
	sn.Started(b)
	testutil.Eventually(t, 10*time.Second, testutil.Cond("the first snapshot", func() bool {
		s, ok := store.get("w-a.inst", "b1")
		return ok && s.URL == "https://example.test/"
	}))

	_ = b.b.SetCookies(ctx, []browser.Cookie{{Name: "sid", Value: "1", Domain: "example.test", Path: "/"}})
	if err := b.b.Navigate(ctx, "https://example.test/next"); err != nil {
		t.Fatal(err)
	}
	sn.PageChanged(b, b.b.Page())
	testutil.Eventually(t, 10*time.Second, testutil.Cond("the snapshot of /next", func() bool {
		s, _ := store.get("w-a.inst", "b1")
		return s.URL == "https://example.test/next"
	}))
	s, _ := store.get("w-a.inst", "b1")
	if s.Owner != "alice" || !s.Theirs || s.Name != "main" || !s.Created.Equal(created) || s.Perms["bob"] != "reader-writer" ||
		s.Width != 800 || s.Height != 600 || s.Origin != "https://example.test" || s.Local["theme"] != "dark" ||
		len(s.Cookies) != 1 || s.Cookies[0].Value != "1" || s.Taken.IsZero() {
		t.Fatalf("snapshot: %+v", s)
	}

	// The same page again: nothing sent.
	idle(t, b)
	saves, _ := store.counts()
	sn.kick(b)
	idle(t, b)
	if n, _ := store.counts(); n != saves {
		t.Fatalf("an unchanged snapshot was sent again (%d saves, was %d)", n, saves)
	}
	// Given back to its pool: nothing more is saved of it.
	b.update(func(i *Info) { i.Released = true })
	b.st.Resized(1024, 768)
	sn.kick(b)
	idle(t, b)
	if n, _ := store.counts(); n != saves {
		t.Fatalf("a released browser was snapshotted (%d saves, was %d)", n, saves)
	}

	b.update(func(i *Info) { i.Epoch = 5 })
	sn.Forget(b)
	testutil.Eventually(t, 10*time.Second, testutil.Cond("the snapshot removed", func() bool { _, ok := store.get("w-a.inst", "b1"); return !ok }))
	store.mu.Lock()
	if e := store.epochs[len(store.epochs)-1]; e != 5 || store.epochs[0] != 4 {
		t.Errorf("epochs of the requests: %v", store.epochs)
	}
	store.mu.Unlock()

	// A browser closed before its first snapshot went out.
	never := &subject{b: newRecBrowser(t, "https://example.test/"), info: Info{Instance: "w-a.inst", ID: "b2", Released: true}}
	sn.Forget(never)
	idle(t, never)
	if _, removes := store.counts(); removes != 1 {
		t.Fatalf("%d removals, want 1", removes)
	}
}

// Run snapshots the browsers marked since the last tick (input, repaints,
// a resize), and only those that changed.
func TestRunSnapshotsTouched(t *testing.T) {
	store := newMemStore()
	sn := newSnapshots(t, store, nil)
	b := &subject{b: newRecBrowser(t, "https://example.test/"), info: Info{Instance: "w-a.tick", ID: "b1"}}
	quiet := &subject{b: newRecBrowser(t, "https://example.test/"), info: Info{Instance: "w-a.tick", ID: "b2"}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() { defer close(done); sn.Run(ctx, 20*time.Millisecond, seq(b, quiet)) }()

	b.st.Touched()
	testutil.Eventually(t, 10*time.Second, testutil.Cond("a snapshot", func() bool { _, ok := store.get("w-a.tick", "b1"); return ok }))
	// An owner's resize, as the hub tells the browser and its host.
	if err := b.b.Input(ctx, browser.InputEvent{Type: browser.InputResize, Width: 640, Height: 480}); err != nil {
		t.Fatal(err)
	}
	b.st.Touched()
	b.st.Resized(640, 480)
	testutil.Eventually(t, 10*time.Second, testutil.Cond("a 640x480 snapshot", func() bool {
		s, _ := store.get("w-a.tick", "b1")
		return s.Width == 640 && s.Height == 480
	}))
	idle(t, b)
	n, _ := store.counts()
	b.st.Touched()
	testutil.Eventually(t, 10*time.Second, testutil.Cond("the tick took the mark", func() bool { return !b.st.dirty.Load() }))
	idle(t, b)
	if got, _ := store.counts(); got != n {
		t.Fatalf("an unchanged snapshot was sent again (%d saves, was %d)", got, n)
	}
	if _, ok := store.get("w-a.tick", "b2"); ok {
		t.Fatal("a browser nothing happened in was snapshotted")
	}
}

// A new browser is brought back to a snapshot's page in order: cookies,
// viewport, URL, storage, reload (by navigating, or with a fragment by
// reloading). Cookies it does not take fail the restore.
func TestRestorePage(t *testing.T) {
	sn := newSnapshots(t, newMemStore(), nil)
	ctx := context.Background()
	page := "https://example.test/room?x=1"
	full := wire.BrowserSnapshot{ID: "b1", Owner: "alice", URL: page, Width: 900, Height: 700, Origin: "https://example.test",
		Local: map[string]string{"theme": "dark"}, Session: map[string]string{"tab": "2"},
		Cookies: []wire.SnapshotCookie{{Name: "sid", Value: "s3cr3t", Domain: "example.test", Path: "/"}}}
	withFragment := full
	withFragment.URL, withFragment.Width, withFragment.Height, withFragment.Cookies, withFragment.Session = page+"#top", 0, 0, nil, nil
	blank := wire.BrowserSnapshot{ID: "b1", URL: "about:blank", Cookies: full.Cookies}
	failing := full
	failing.Cookies = []wire.SnapshotCookie{{Name: "fail", Value: "x", Domain: "example.test", Path: "/"}}
	for _, tc := range []struct {
		name    string
		snap    wire.BrowserSnapshot
		want    []string
		wantErr string
	}{
		{"full", full, []string{
			"cookies sid=s3cr3t",
			"input resize 900x700",
			"navigate " + page,
			`storage "https://example.test", {"theme":"dark"}, {"tab":"2"}`,
			"navigate " + page,
		}, ""},
		{"fragment", withFragment, []string{
			"navigate " + page + "#top",
			`storage "https://example.test", {"theme":"dark"}, {}`,
			"input reload 0x0",
		}, ""},
		{"blank", blank, []string{"cookies sid=s3cr3t"}, ""},
		{"cookies refused", failing, nil, "restore cookies: cookie refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rb := newRecBrowser(t, "")
			b := &subject{b: rb, info: Info{Instance: "w-a.room", ID: "b1"}}
			err := sn.RestorePage(ctx, b, tc.snap)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := rb.steps(); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("restore steps:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if w, h := b.st.width.Load(), b.st.height.Load(); int(w) != tc.snap.Width || int(h) != tc.snap.Height {
				t.Fatalf("viewport kept %dx%d, want %dx%d", w, h, tc.snap.Width, tc.snap.Height)
			}
			if len(tc.snap.Cookies) > 0 {
				if cs, _ := rb.Cookies(ctx); len(cs) != 1 || cs[0].Value != "s3cr3t" {
					t.Fatalf("cookies: %+v", cs)
				}
			}
		})
	}
}

// A migration's hold waits for input under way, keeps further input out
// (Input tells it held) and its clients are told; the browsers are
// snapshotted with it on. It ends when the master says so (Resume) or by
// itself after InputHoldMax, telling the clients, unless they are gone
// (moved); a newer hold outlives an older one's time limit.
func TestHoldAndResume(t *testing.T) {
	store := newMemStore()
	clk := clocktest.New(time.Unix(1000, 0))
	sn := newSnapshots(t, store, clk)
	ctx := context.Background()
	newSubject := func(id string) *subject {
		return &subject{b: newRecBrowser(t, "https://example.test/"), clients: &fakeClients{}, info: Info{Instance: "w-a.move", ID: id}}
	}
	a, b := newSubject("b1"), newSubject("b2")
	held := func(s *subject) bool {
		var h bool
		s.st.Input(func(held bool) { h = held })
		if h != s.st.InputHeld() {
			t.Fatalf("Input says held %v, InputHeld %v", h, !h)
		}
		return h
	}

	// Input under way when the hold comes: the hold waits for it.
	taking, release := make(chan struct{}), make(chan struct{})
	go a.st.Input(func(held bool) { close(taking); <-release })
	<-taking
	holding := make(chan error, 1)
	go func() { holding <- sn.HoldAndSave(ctx, seq(a, b)) }()
	select {
	case err := <-holding:
		t.Fatalf("the hold did not wait for input under way: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-holding; err != nil {
		t.Fatal(err)
	}
	for _, s := range []*subject{a, b} {
		if !held(s) {
			t.Fatalf("%s: input not held", s.info.ID)
		}
		if holds, _ := s.clients.told(); holds != 1 {
			t.Fatalf("%s: clients told of %d holds", s.info.ID, holds)
		}
		if _, ok := store.get("w-a.move", s.info.ID); !ok {
			t.Fatalf("%s: no snapshot with the hold", s.info.ID)
		}
	}

	// The master gives the input back; b moved meanwhile.
	b.clients.mu.Lock()
	b.clients.closed = true
	b.clients.mu.Unlock()
	sn.Resume(seq(a, b))
	if held(a) || held(b) {
		t.Fatal("input still held after Resume")
	}
	if _, resumes := a.clients.told(); resumes != 1 {
		t.Fatalf("a's clients told of %d resumes, want 1", resumes)
	}
	if _, resumes := b.clients.told(); resumes != 0 {
		t.Fatal("b's clients, gone with the move, were told to resume")
	}
	clk.Advance(InputHoldMax) // the first hold's time limit: nothing left to end
	if _, resumes := a.clients.told(); resumes != 1 {
		t.Fatalf("a's clients told of %d resumes, want 1", resumes)
	}

	// A hold nobody ends ends by itself; a newer hold is not ended by an
	// older one's limit.
	if err := sn.HoldAndSave(ctx, seq(a)); err != nil {
		t.Fatal(err)
	}
	clk.Advance(InputHoldMax / 2)
	if err := sn.HoldAndSave(ctx, seq(a)); err != nil {
		t.Fatal(err)
	}
	clk.Advance(InputHoldMax / 2)
	if !held(a) {
		t.Fatal("the older hold's limit ended the newer hold")
	}
	clk.Advance(InputHoldMax / 2)
	if held(a) {
		t.Fatal("input still held after InputHoldMax")
	}
	if holds, resumes := a.clients.told(); holds != 3 || resumes != 2 {
		t.Fatalf("a's clients told of %d holds and %d resumes, want 3 and 2", holds, resumes)
	}

	// A canceled call holds nothing.
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if err := sn.HoldAndSave(canceled, seq(a)); !errors.Is(err, context.Canceled) || held(a) {
		t.Fatalf("canceled: %v, held %v", err, held(a))
	}
}

// Load reads every page of an instance's snapshots.
func TestLoad(t *testing.T) {
	store := newMemStore()
	store.pageSize = 2
	for _, id := range []string{"b1", "b2", "b3", "b4", "b5"} {
		_ = store.SaveBrowser(context.Background(), wire.SaveBrowser{Instance: "w-a.load", Snapshot: &wire.BrowserSnapshot{ID: id}})
	}
	_ = store.SaveBrowser(context.Background(), wire.SaveBrowser{Instance: "w-a.other", Snapshot: &wire.BrowserSnapshot{ID: "b9"}})
	got, err := newSnapshots(t, store, nil).Load(context.Background(), "w-a.load")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range got {
		ids = append(ids, s.ID)
	}
	if strings.Join(ids, ",") != "b1,b2,b3,b4,b5" {
		t.Fatalf("loaded %v", ids)
	}
}

// RestoreAll restores a few browsers at a time in the background and
// marks each done, restored or not; requests wait for the browser they
// ask for, or for those of their user, until then.
func TestRestoreAll(t *testing.T) {
	sn := newSnapshots(t, newMemStore(), nil)
	ctx := context.Background()
	var snaps []wire.BrowserSnapshot
	for i := range 8 {
		snaps = append(snaps, wire.BrowserSnapshot{ID: fmt.Sprintf("b%d", i), Owner: []string{"alice", "bob"}[i%2]})
	}
	var r Restoring
	r.Add(snaps[:1]) // already pending: waited for once
	var (
		mu            sync.Mutex
		running, most int
		restored      []string
	)
	gate := make(chan struct{})
	if done := sn.RestoreAll(ctx, &r, "w-a.back", nil, nil); done != nil {
		t.Fatal("RestoreAll without snapshots has something to wait for")
	}
	done := sn.RestoreAll(ctx, &r, "w-a.back", snaps, func(ctx context.Context, s wire.BrowserSnapshot) error {
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		<-gate
		mu.Lock()
		defer mu.Unlock()
		running--
		if s.ID == "b3" {
			return errors.New("no")
		}
		restored = append(restored, s.ID)
		return nil
	})

	waited := make(chan string, 3)
	go func() { r.Await(ctx, "b7"); waited <- "b7" }()
	go func() { r.AwaitOwner(ctx, "bob"); waited <- "bob" }()
	r.Await(ctx, "unknown") // not being restored: no wait
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	r.Await(canceled, "b7")
	select {
	case w := <-waited:
		t.Fatalf("%s done before any browser was restored", w)
	case <-time.After(50 * time.Millisecond):
	}
	close(gate)
	<-done
	for range 2 {
		<-waited
	}
	if most > restoreParallel {
		t.Fatalf("%d restores at once, at most %d", most, restoreParallel)
	}
	if len(restored) != 7 {
		t.Fatalf("restored %v", restored)
	}
	r.Await(ctx, "b3") // failed: done as well
	r.AwaitOwner(ctx, "alice")
}

// A nil *Snapshots (a worker without a master) keeps nothing and has nothing
// to restore.
func TestNilSnapshots(t *testing.T) {
	var sn *Snapshots
	b := &subject{b: newRecBrowser(t, "https://example.test/")}
	sn.Started(b)
	sn.PageChanged(b, browser.Page{URL: "https://example.test/2"})
	sn.Forget(b)
	sn.Run(context.Background(), time.Millisecond, seq(b))
	sn.Resume(seq(b))
	if err := sn.HoldAndSave(context.Background(), seq(b)); err != nil || b.st.InputHeld() {
		t.Fatalf("HoldAndSave: %v, held %v", err, b.st.InputHeld())
	}
	if snaps, err := sn.Load(context.Background(), "w-a.none"); snaps != nil || err != nil {
		t.Fatalf("Load: %v %v", snaps, err)
	}
}
