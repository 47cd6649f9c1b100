package worker

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

// gatedRuntime holds every new browser until the gate opens.
type gatedRuntime struct {
	*browser.Null
	gate  chan struct{}
	mu    sync.Mutex
	calls int
}

func (g *gatedRuntime) NewBrowser(ctx context.Context, opts browser.Options) (browser.Browser, error) {
	g.mu.Lock()
	g.calls++
	g.mu.Unlock()
	select {
	case <-g.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.Null.NewBrowser(ctx, opts)
}

func (g *gatedRuntime) made() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls
}

// TestConcurrentFirstRequestsOneBrowser: a user's concurrent first requests
// to an instance make one browser, which they all get, and take one place
// in the user's quota. Before, each request started a browser of its own
// and all but one lost: with a quota of 1 the others were refused.
func TestConcurrentFirstRequestsOneBrowser(t *testing.T) {
	rt := &gatedRuntime{Null: &browser.Null{}, gate: make(chan struct{})}
	w, err := New(Config{ID: "w-mk", Secret: testSecret, Master: "127.0.0.1:1", Runtime: rt, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	w.replica.Store = newLocalReplica()
	t.Cleanup(func() { w.Close() })
	setQuotas(w, wire.Quotas{BrowsersPerUser: 1})
	ctx := context.Background()
	app := wire.App{Name: "T", MountPoint: "typing", Entry: "https://example.test/", Strategy: wire.SingleInstancePerUser}
	if err := w.apps.AddApplication(ctx, app); err != nil {
		t.Fatal(err)
	}
	const iid = "w-mk.makingmaking1"
	if err := w.apps.CreateInstance(ctx, wire.CreateInstance{App: app, InstanceID: iid, Owner: "dave"}); err != nil {
		t.Fatal(err)
	}
	in, _ := w.instances.get(iid)
	const n = 20
	ids, errs := make([]string, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids[i], errs[i] = w.apps.OpenBrowserFor(ctx, wire.OpenBrowser{InstanceID: iid, User: "dave", ClientIP: "192.0.2.7"})
		}()
	}
	// Every request has arrived: one makes the browser, the others wait.
	testutil.Eventually(t, 10*time.Second, testutil.Cond("one browser being made, the others waiting", func() bool {
		in.mu.Lock()
		defer in.mu.Unlock()
		m := in.making["dave"]
		return rt.made() == 1 && m != nil && m.waiters == n-1
	}))
	close(rt.gate)
	wg.Wait()
	for i := range n {
		if errs[i] != nil || ids[i] != ids[0] {
			t.Fatalf("request %d: browser %q, %v; request 0: %q, %v", i, ids[i], errs[i], ids[0], errs[0])
		}
	}
	if rt.made() != 1 {
		t.Fatalf("%d browsers started, want 1", rt.made())
	}
}

// bypassRuntime's first browser navigates as if it went round its egress
// guard (Chromium's own resolver answered).
type bypassRuntime struct {
	*browser.Null
	mu    sync.Mutex
	made  int
	first browser.Browser
}

type bypassBrowser struct{ browser.Browser }

func (b bypassBrowser) Navigate(ctx context.Context, url string) error {
	return errors.New("chromium: navigate: " + url + ": net::ERR_NAME_NOT_RESOLVED")
}

func (r *bypassRuntime) NewBrowser(ctx context.Context, opts browser.Options) (browser.Browser, error) {
	b, err := r.Null.NewBrowser(ctx, opts)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.made++
	if r.made == 1 {
		r.first = b
		return bypassBrowser{b}, nil
	}
	return b, nil
}

// TestEgressBypassNeverHandedOut: a browser whose entry navigation shows it
// resolved a name itself (its traffic did not go through its egress guard)
// is destroyed, and the user gets another browser.
func TestEgressBypassNeverHandedOut(t *testing.T) {
	rt := &bypassRuntime{Null: &browser.Null{}}
	w, err := New(Config{ID: "w-by", Secret: testSecret, Master: "127.0.0.1:1", Runtime: rt, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	w.replica.Store = newLocalReplica()
	t.Cleanup(func() { w.Close() })
	ctx := context.Background()
	app := wire.App{Name: "T", MountPoint: "typing", Entry: "index.html", Strategy: wire.SingleInstancePerUser}
	if err := w.apps.AddApplication(ctx, app); err != nil {
		t.Fatal(err)
	}
	const iid = "w-by.bypassbypass"
	if err := w.apps.CreateInstance(ctx, wire.CreateInstance{App: app, InstanceID: iid, Owner: "dave"}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.apps.OpenBrowserFor(ctx, wire.OpenBrowser{InstanceID: iid, User: "dave"}); err != nil {
		t.Fatalf("open: %v", err)
	}
	rt.mu.Lock()
	made, first := rt.made, rt.first
	rt.mu.Unlock()
	if made != 2 {
		t.Fatalf("%d browsers made, want 2 (the bypassing one, then another)", made)
	}
	testutil.Eventually(t, 10*time.Second, testutil.Cond("the bypassing browser closed", func() bool {
		return errors.Is(first.Navigate(ctx, "about:blank"), browser.ErrClosed)
	}))
}
