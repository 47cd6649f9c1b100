package worker

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/httpserve"
)

// restIn is the tests' RestAfter, apart from the fixture app's idle
// timeout in the fake timers.
const restIn = 42 * time.Second

// resting reports the fixture browser's state as the Null browser under
// the fake keeps it.
func (f *hubFixture) resting(t *testing.T) bool {
	t.Helper()
	r, ok := f.rt.last().Browser.(interface{ Resting() bool })
	if !ok {
		t.Fatal("the fake browser does not report resting")
	}
	return r.Resting()
}

// TestBrowserRests: a browser without a client rests after RestAfter; the
// next client finds it awake by the time it is greeted; a countdown that
// fires while someone watches changes nothing; a browser going back to its
// pool goes awake.
func TestBrowserRests(t *testing.T) {
	fa := &fakeAfter{}
	f := newHubFixture(t, httpserve.RoleReader, func(w *Worker) { w.clock = fa; w.cfg.RestAfter = restIn })
	check := func(step string, resting bool, gauge int64, rests, wakes uint64) {
		t.Helper()
		if got := f.resting(t); got != resting {
			t.Fatalf("%s: resting = %v, want %v", step, got, resting)
		}
		if st := f.w.counters.Stats(); st.Resting != gauge || st.Rests != rests || st.Wakes != wakes {
			t.Fatalf("%s: gauge %d, rests %d, wakes %d; want %d, %d, %d", step, st.Resting, st.Rests, st.Wakes, gauge, rests, wakes)
		}
	}
	// Nobody ever connected: the countdown runs from the creation.
	if n := fa.fireOf(restIn, false); n != 1 {
		t.Fatalf("%d countdowns fired, want the new browser's", n)
	}
	check("unwatched", true, 1, 1, 0)

	conn, _ := f.dial(t, true)
	check("a client came", false, 0, 1, 1)
	if n := fa.fireOf(restIn, true); n != 0 { // the stopped countdown is stale
		check("stale countdown", false, 0, 1, 1)
	}
	check("watched", false, 0, 1, 1)

	conn.Close()
	testutil.Eventually(t, 10*time.Second, testutil.Cond("a countdown after the client left", func() bool { return fa.pendingOf(restIn) == 1 }))
	fa.fireOf(restIn, false)
	check("left", true, 1, 2, 1)

	in, _ := f.w.instances.get(f.iid)
	vb, ok := in.browser(strings.TrimPrefix(f.loc, "/app/a/"+f.iid+"/b/"))
	if !ok {
		t.Fatal("no browser")
	}
	vb.close(context.Background(), "test")
	check("back to its pool", false, 0, 2, 2)
}

// TestRestRaceWithConnect: a countdown firing while a client connects
// leaves the page awake for that client, whichever goes first.
func TestRestRaceWithConnect(t *testing.T) {
	for i := range 20 {
		fa := &fakeAfter{}
		f := newHubFixture(t, httpserve.RoleReader, func(w *Worker) { w.clock = fa; w.cfg.RestAfter = restIn })
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); fa.fireOf(restIn, false) }()
		conn, _ := f.dial(t, true)
		wg.Wait()
		if f.resting(t) {
			t.Fatalf("round %d: resting with a client connected", i)
		}
		conn.Close()
	}
}
