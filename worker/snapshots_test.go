package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock/clocktest"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/browsertest"
	"github.com/cloudbrowser-go/cloudbrowser/worker/failover"
	"github.com/cloudbrowser-go/cloudbrowser/worker/httpserve"
)

// memSnapshots is the master's snapshot store, in memory.
type memSnapshots struct {
	mu    sync.Mutex
	snaps map[string]map[string]wire.BrowserSnapshot // iid -> bid -> snapshot
	saves int
}

func newMemSnapshots() *memSnapshots {
	return &memSnapshots{snaps: map[string]map[string]wire.BrowserSnapshot{}}
}

func (m *memSnapshots) SaveBrowser(ctx context.Context, req wire.SaveBrowser) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.snaps[req.Instance] == nil {
		m.snaps[req.Instance] = map[string]wire.BrowserSnapshot{}
	}
	if req.Snapshot == nil {
		delete(m.snaps[req.Instance], req.Remove)
		return nil
	}
	m.saves++
	m.snaps[req.Instance][req.Snapshot.ID] = *req.Snapshot
	return nil
}

func (m *memSnapshots) Browsers(ctx context.Context, iid, after string) (wire.BrowserSnapshots, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out wire.BrowserSnapshots
	for _, s := range m.snaps[iid] {
		out.Browsers = append(out.Browsers, s)
	}
	return out, nil
}

func (m *memSnapshots) get(iid, bid string) (wire.BrowserSnapshot, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.snaps[iid][bid]
	return s, ok
}

// recBrowser records the restore steps made on it; its page storage is
// that of a page at https://example.test.
type recBrowser struct {
	browser.Browser // Null for the rest
	mu              sync.Mutex
	calls           []string
	draft           string // what the page's localStorage "draft" holds
}

func (r *recBrowser) setDraft(s string) { r.mu.Lock(); r.draft = s; r.mu.Unlock() }

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
		local := map[string]string{"theme": "dark"}
		r.mu.Lock()
		if r.draft != "" {
			local["draft"] = r.draft
		}
		r.mu.Unlock()
		v = map[string]any{"origin": "https://example.test", "local": local}
	default:
		return errors.New("unsupported")
	}
	j, _ := json.Marshal(v)
	return json.Unmarshal(j, out)
}

type recRuntime struct {
	browser.Null
	mu  sync.Mutex
	all []*recBrowser
}

func (r *recRuntime) NewBrowser(ctx context.Context, opts browser.Options) (browser.Browser, error) {
	b, err := r.Null.NewBrowser(ctx, opts)
	if err != nil {
		return nil, err
	}
	rb := &recBrowser{Browser: b}
	r.mu.Lock()
	r.all = append(r.all, rb)
	r.mu.Unlock()
	return rb, nil
}

// keepSnapshots has w's browsers snapshotted into store instead of the
// master, their input holds timed by w's clock as it is now.
func keepSnapshots(w *Worker, store failover.SnapshotStore) {
	w.snaps = failover.NewSnapshots(w.ctx, failover.SnapshotConfig{Store: store, Clock: w.clock, Log: w.log})
}

// snapWorker is a worker (Null-based runtime, no master) with in-memory
// state and snapshot stores, and one app.
func snapWorker(t *testing.T, id string, snaps *memSnapshots, interval time.Duration) (*Worker, wire.App) {
	t.Helper()
	w, err := New(Config{ID: id, Secret: testSecret, Master: "127.0.0.1:1", Runtime: &recRuntime{}, Logger: zerolog.Nop(), SnapshotInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	w.replica.Store = newLocalReplica()
	keepSnapshots(w, snaps)
	t.Cleanup(func() { w.Close() })
	app := wire.App{Name: "A", MountPoint: "app", Entry: "https://example.test/", Strategy: wire.MultiInstance}
	if err := w.apps.AddApplication(context.Background(), app); err != nil {
		t.Fatal(err)
	}
	return w, app
}

// A re-placed instance (Restore, an id named after a dead worker) keeps
// its creation time, name, owner and epoch, and gets every snapshotted
// browser back with the same id, owner, grants and name, restored in
// order: cookies, viewport, URL, storage, reload. A browser that cannot
// be restored is left out without failing the instance. Without Restore
// a foreign id is still refused.
func TestRestoreRecreatesBrowsers(t *testing.T) {
	snaps := newMemSnapshots()
	iid := "w-old.restorerestore"
	created := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	page := "https://example.test/room?x=1"
	for _, s := range []wire.BrowserSnapshot{
		{ID: "b1", Owner: "alice", Theirs: true, Name: "main", Perms: map[string]string{"bob": "reader"}, URL: page,
			Width: 900, Height: 700, Origin: "https://example.test", Local: map[string]string{"theme": "dark"},
			Session: map[string]string{"tab": "2"}, Cookies: []wire.SnapshotCookie{{Name: "sid", Value: "s3cr3t", Domain: "example.test", Path: "/"}}},
		{ID: "b2", Owner: "bob", URL: "https://example.test/other"},
		{ID: "b3", Owner: "carol", URL: page, Cookies: []wire.SnapshotCookie{{Name: "fail", Value: "x", Domain: "example.test", Path: "/"}}},
	} {
		_ = snaps.SaveBrowser(context.Background(), wire.SaveBrowser{Instance: iid, Snapshot: &s})
	}
	w, app := snapWorker(t, "w-new", snaps, time.Hour)
	ctx := context.Background()

	for _, tc := range []struct {
		name    string
		req     wire.CreateInstance
		refused bool
	}{
		{"foreign id without restore", wire.CreateInstance{App: app, InstanceID: iid, Owner: "alice", Epoch: 9}, true},
		{"malformed id with restore", wire.CreateInstance{App: app, InstanceID: "nonsense", Restore: true}, true},
		{"foreign id with restore", wire.CreateInstance{App: app, InstanceID: iid, Owner: "alice", Epoch: 9, Restore: true, Created: created, Name: "the room"}, false},
	} {
		err := w.apps.CreateInstance(ctx, tc.req)
		if tc.refused != (err != nil) {
			t.Fatalf("%s: error %v", tc.name, err)
		}
		if tc.refused && !strings.Contains(err.Error(), "does not belong to worker w-new") {
			t.Fatalf("%s: %v", tc.name, err)
		}
	}
	in, ok := w.instances.get(iid)
	if !ok {
		t.Fatal("restored instance missing")
	}
	for _, bid := range []string{"b1", "b2", "b3"} {
		in.restoring.Await(ctx, bid)
	}
	if in.info.Created != created || in.info.Name != "the room" || in.info.Owner != "alice" || in.info.Epoch != 9 || in.info.Worker != "w-new" {
		t.Fatalf("instance info: %+v", in.info)
	}
	b1, ok := in.browser("b1")
	if !ok || b1.owner != "alice" || b1.name != "main" || b1.perms["bob"] != httpserve.RoleReader || in.byUser["alice"] != "b1" {
		t.Fatalf("b1: %+v", b1)
	}
	if b2, ok := in.browser("b2"); !ok || b2.owner != "bob" || in.byUser["bob"] != "" {
		t.Fatalf("b2: %+v (byUser %v)", b2, in.byUser)
	}
	if _, ok := in.browser("b3"); ok {
		t.Fatal("b3, whose cookies failed, was kept")
	}
	want := []string{
		"cookies sid=s3cr3t",
		"input resize 900x700",
		"navigate " + page,
		`storage "https://example.test", {"theme":"dark"}, {"tab":"2"}`,
		"navigate " + page,
	}
	if got := b1.b.(*recBrowser).steps(); !reflect.DeepEqual(got[len(got)-len(want):], want) {
		t.Fatalf("b1's restore steps:\n%s\nwant them to end with\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if b1.b.Page().URL != page {
		t.Fatalf("b1 at %q", b1.b.Page().URL)
	}
	cs, _ := b1.b.Cookies(ctx)
	if len(cs) != 1 || cs[0].Value != "s3cr3t" {
		t.Fatalf("b1's cookies: %+v", cs)
	}
	// The strategy finds alice's restored browser rather than making one.
	if b, err := w.browsers.browserFor(ctx, in, "alice"); err != nil || b.id != "b1" {
		t.Fatalf("alice's browser: %v %v", b, err)
	}
	// A retried call changes nothing.
	if err := w.apps.CreateInstance(ctx, wire.CreateInstance{App: app, InstanceID: iid, Owner: "alice", Epoch: 9, Restore: true}); err != nil {
		t.Fatal(err)
	}
	if n := len(in.browserList()); n != 2 {
		t.Fatalf("%d browsers after a retried restore, want 2", n)
	}
}

// aliceBrowser makes instance iid of app on w, owned by alice under epoch,
// and alice's browser in it.
func aliceBrowser(t *testing.T, w *Worker, app wire.App, iid string, epoch uint64) (*instance, *vbrowser) {
	t.Helper()
	ctx := context.Background()
	if err := w.apps.CreateInstance(ctx, wire.CreateInstance{App: app, InstanceID: iid, Owner: "alice", Epoch: epoch}); err != nil {
		t.Fatal(err)
	}
	in, _ := w.instances.get(iid)
	vb, err := w.browsers.browserFor(ctx, in, "alice")
	if err != nil {
		t.Fatal(err)
	}
	return in, vb
}

// A browser is snapshotted when it is made and after each navigation,
// with its owner, grants, viewport, cookies and storage; a closed
// browser's snapshot is removed.
func TestSnapshotsSavedAndRemoved(t *testing.T) {
	snaps := newMemSnapshots()
	w, app := snapWorker(t, "w-snap", snaps, time.Hour)
	ctx := context.Background()
	iid := "w-snap.snapsnapsnap"
	in, vb := aliceBrowser(t, w, app, iid, 4)
	testutil.Eventually(t, 10*time.Second, testutil.Cond("the first snapshot", func() bool { s, ok := snaps.get(iid, vb.id); return ok && s.URL == "https://example.test/" }))
	vb.setGrant("bob", httpserve.RoleReaderWriter)
	_ = vb.b.SetCookies(ctx, []browser.Cookie{{Name: "sid", Value: "1", Domain: "example.test", Path: "/"}})
	if err := vb.b.Navigate(ctx, "https://example.test/next"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, testutil.Cond("the snapshot of /next", func() bool { s, _ := snaps.get(iid, vb.id); return s.URL == "https://example.test/next" }))
	s, _ := snaps.get(iid, vb.id)
	if s.Owner != "alice" || !s.Theirs || s.Perms["bob"] != "reader-writer" || s.Origin != "https://example.test" ||
		s.Local["theme"] != "dark" || len(s.Cookies) != 1 || s.Cookies[0].Value != "1" || s.Taken.IsZero() {
		t.Fatalf("snapshot: %+v", s)
	}
	w.browsers.closeBrowser(in, vb, "test")
	testutil.Eventually(t, 10*time.Second, testutil.Cond("the snapshot removed", func() bool { _, ok := snaps.get(iid, vb.id); return !ok }))
}

// What the hub tells a browser's host (input, a resize) marks it for the
// periodic snapshot, which goes over every browser of the worker.
func TestSnapshotInterval(t *testing.T) {
	snaps := newMemSnapshots()
	w, app := snapWorker(t, "w-tick", snaps, 20*time.Millisecond)
	w.wg.Add(1)
	go func() { defer w.wg.Done(); w.snaps.Run(w.ctx, w.cfg.SnapshotInterval, w.instances.subjects) }()
	ctx := context.Background()
	iid := "w-tick.ticktickticktick"
	_, vb := aliceBrowser(t, w, app, iid, 0)
	testutil.Eventually(t, 10*time.Second, testutil.Cond("a snapshot", func() bool { _, ok := snaps.get(iid, vb.id); return ok }))
	// An owner's resize, as the hub hands it to the browser and its host.
	if err := vb.b.Input(ctx, browser.InputEvent{Type: browser.InputResize, Width: 640, Height: 480}); err != nil {
		t.Fatal(err)
	}
	host := browserHost{&vb.snap, vb}
	host.Touched()
	host.Resized(640, 480)
	testutil.Eventually(t, 10*time.Second, testutil.Cond("a 640x480 snapshot", func() bool { s, _ := snaps.get(iid, vb.id); return s.Width == 640 && s.Height == 480 }))
}

// A page's acknowledged shared-state write snapshots its browser at once,
// not at the next interval: the draft the page cleared for it must not
// come back with a failover.
func TestSnapshotAfterStateWrite(t *testing.T) {
	snaps := newMemSnapshots()
	w, app := snapWorker(t, "w-write", snaps, time.Hour)
	iid := "w-write.writewritewrite"
	_, vb := aliceBrowser(t, w, app, iid, 0)
	rb := vb.b.(*recBrowser)
	rb.setDraft("m3")
	vb.snap.Touched() // typed: left for the periodic snapshot, an hour away
	testutil.Eventually(t, 10*time.Second, testutil.Cond("the first snapshot", func() bool { _, ok := snaps.get(iid, vb.id); return ok }))

	for _, tc := range []struct {
		op, draft string
		req       apiRequest
	}{
		{"append", "", apiRequest{Op: "append", Key: "messages", Value: json.RawMessage(`{"text":"m3"}`)}},
		{"set", "x", apiRequest{Op: "set", Key: "topic", Value: json.RawMessage(`"x"`)}},
	} {
		rb.setDraft(tc.draft) // the page changes itself, then writes
		if _, err := w.api.apiOp(vb, tc.req); err != nil {
			t.Fatalf("%s: %v", tc.op, err)
		}
		testutil.Eventually(t, 10*time.Second, testutil.Cond("a snapshot after the "+tc.op, func() bool {
			s, _ := snaps.get(iid, vb.id)
			return s.Local["draft"] == tc.draft
		}))
	}
}

// keysOf are the keys of the keydowns fb took, in order.
func keysOf(fb *browsertest.Fake) string { return fb.Keys() }

// nextMsg is conn's next text message of type typ; frames and the other
// types in skip are passed over.
func nextMsg(t *testing.T, conn *websocket.Conn, typ string, skip ...string) map[string]any {
	t.Helper()
	for {
		m, err := nextText(t, conn)
		if err != nil {
			t.Fatalf("waiting for %q: %v", typ, err)
		}
		if m["t"] == typ {
			return m
		}
		if !slices.Contains(skip, fmt.Sprint(m["t"])) {
			t.Fatalf("got %v while waiting for %q", m, typ)
		}
	}
}

// TestMigrationHoldsInput: the snapshot before a migration is taken with
// the browser's input held: its clients are told ({"t":"hold"}, also one
// that connects meanwhile), input that reaches the worker after it is sent
// back to its client ({"t":"held"}) instead of into the page, which the
// client sends again to the browser's new copy. A hold that the move does
// not end (it failed) ends ({"t":"resume"}) when the master says so, or by
// itself after failover.InputHoldMax, and input reaches this page again.
func TestMigrationHoldsInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(f *hubFixture, clk *clocktest.Clock)
	}{
		{"the master resumes", func(f *hubFixture, _ *clocktest.Clock) {
			if err := f.w.apps.ResumeInstance(context.Background(), f.iid); err != nil {
				t.Fatal(err)
			}
		}},
		{"the hold times out", func(_ *hubFixture, clk *clocktest.Clock) { clk.Advance(failover.InputHoldMax) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktest.New(time.Unix(1000, 0))
			f := newHubFixture(t, httpserve.RoleReader, func(w *Worker) { w.clock = clk; keepSnapshots(w, newMemSnapshots()) })
			fb := f.rt.last()
			owner, _ := f.dial(t, true)
			key := func(k string) {
				_ = owner.WriteJSON(map[string]any{"t": "input", "type": "keydown", "key": k, "text": k})
			}
			key("a")
			testutil.Eventually(t, 10*time.Second, testutil.Cond("the key a taken", func() bool { return keysOf(fb) == "a" }))

			if err := f.w.apps.SnapshotInstance(context.Background(), f.iid); err != nil {
				t.Fatal(err)
			}
			nextMsg(t, owner, "hold", "page")
			key("b")
			held := nextMsg(t, owner, "held", "page")
			if in, _ := held["input"].(map[string]any); in["t"] != "input" || in["key"] != "b" || in["type"] != "keydown" {
				t.Fatalf("held: %v", held)
			}
			viewer, _ := f.dial(t, false)
			nextMsg(t, viewer, "hold", "page")
			if got := keysOf(fb); got != "a" {
				t.Fatalf("keys in the page during the hold: %q, want a", got)
			}

			tc.end(f, clk)
			nextMsg(t, owner, "resume", "page")
			key("c")
			testutil.Eventually(t, 10*time.Second, testutil.Cond("the key c taken after the hold", func() bool { return keysOf(fb) == "ac" }))
		})
	}
}
