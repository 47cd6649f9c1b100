package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master"
)

// The cost of replicated shared state: app API appends through the
// worker's real code path (appendState), acknowledged by a real master
// (RMI round trip + one committed bbolt transaction in a data directory on
// disk) versus acknowledged in this process's memory (localReplica), in
// the same run. See docs/benchmarks.md.

// benchStateCluster is a master with a data directory and a worker (Null
// runtime) with two placed instances of a multiInstance app: one written
// with local acknowledgements, the other with the master's (each keeps
// its own sequence numbers).
func benchStateCluster(b *testing.B) (w *Worker, local, replicated *instance) {
	b.Helper()
	secret := testSecret
	m, err := master.New(master.Config{Secret: secret, AdminToken: "tok", DataDir: b.TempDir(), Logger: zerolog.Nop(),
		Apps: []wire.App{{Name: "Bench", MountPoint: "bench", Entry: "https://example.test/", Strategy: wire.MultiInstance}}})
	if err != nil {
		b.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	w, err = New(Config{ID: "w-bench", Secret: secret, Master: m.RMIAddr(), Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { w.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for !w.Ready() {
		select {
		case <-ctx.Done():
			b.Fatal("worker never registered")
		case <-time.After(20 * time.Millisecond):
		}
	}
	var ins [2]*instance
	for i := range ins {
		p, err := contract.WorkerManagerClient{C: w.client}.Place(ctx, wire.PlaceRequest{App: "bench", User: "u", NoBrowser: true})
		if err != nil {
			b.Fatal(err)
		}
		var ok bool
		if ins[i], ok = w.instances.get(p.InstanceID); !ok {
			b.Fatal("instance not on the worker")
		}
	}
	return w, ins[0], ins[1]
}

var benchEntry = json.RawMessage(`{"from":"anon-1234","text":"a chat message of about sixty bytes..."}`)

func benchAppend(b *testing.B, w *Worker, in *instance) {
	if _, err := w.api.appendState(in, apiRequest{Op: "append", Key: "messages", Value: benchEntry, Max: maxOf(200)}); err != nil {
		b.Error(err) // may run on another goroutine
	}
}

// BenchmarkSharedStateAppendLatency: one append at a time (a chat of 200
// messages), alternating local and replicated acknowledgement.
func BenchmarkSharedStateAppendLatency(b *testing.B) {
	w, inLocal, inRepl := benchStateCluster(b)
	remote, local := w.replica.Store, newLocalReplica()
	var tLocal, tRepl time.Duration
	for b.Loop() {
		w.replica.Store = local
		t0 := time.Now()
		benchAppend(b, w, inLocal)
		t1 := time.Now()
		w.replica.Store = remote
		benchAppend(b, w, inRepl)
		tRepl += time.Since(t1)
		tLocal += t1.Sub(t0)
	}
	n := float64(b.N)
	b.ReportMetric(float64(tLocal.Microseconds())/n, "local-µs/append")
	b.ReportMetric(float64(tRepl.Microseconds())/n, "replicated-µs/append")
	b.ReportMetric(float64(tRepl)/float64(max(tLocal, 1)), "latency-ratio")
}

// BenchmarkSharedStateAppendThroughput: batches of 16 concurrent appends
// to one instance (16 users posting at once), local then replicated.
func BenchmarkSharedStateAppendThroughput(b *testing.B) {
	const writers = 16
	w, inLocal, inRepl := benchStateCluster(b)
	remote, local := w.replica.Store, newLocalReplica()
	batch := func(in *instance) time.Duration {
		return timeBatch(writers, func(int) { benchAppend(b, w, in) })
	}
	var tLocal, tRepl time.Duration
	for b.Loop() {
		w.replica.Store = local
		tLocal += batch(inLocal)
		w.replica.Store = remote
		tRepl += batch(inRepl)
	}
	n := float64(b.N * writers)
	b.ReportMetric(n/tLocal.Seconds(), "local-appends/s")
	b.ReportMetric(n/tRepl.Seconds(), "replicated-appends/s")
	b.ReportMetric(tLocal.Seconds()/tRepl.Seconds(), "throughput-ratio")
}

// chatSnapshot is what a chat page's browser snapshot holds right after
// its user sent a message: the page, its storage, the emptied draft with
// the focus in it, and the scrolled message list.
func chatSnapshot(bid string) *wire.BrowserSnapshot {
	return &wire.BrowserSnapshot{ID: bid, Owner: "anon-1234", URL: "https://example.test/chat", Width: 1280, Height: 720,
		Origin: "https://example.test", Local: map[string]string{"name": "anon-1234", "theme": "light"},
		Cookies: []wire.SnapshotCookie{{Name: "sid", Value: "0123456789abcdef", Domain: "example.test", Path: "/"}},
		Form: &wire.FormState{Fields: []wire.FormField{{Key: "#draft", Kind: wire.FieldValue}}, Focus: "#draft",
			Selection: &wire.FormSelection{}, Scrolls: []wire.FormScroll{{Key: "#messages", Y: 4210}}}}
}

// BenchmarkSharedStateAppendWithSnapshots: what a browser snapshot per
// acknowledged write (failover.Snapshots.Wrote) costs the master. Batches
// of 16 users each posting one chat message, with the master's
// acknowledgement: the appends alone, then each append followed by its
// browser's snapshot save (as the worker sends it, one SaveBrowser call;
// in the worker it runs after the acknowledgement, off the write's path).
// A batch ends when the master has stored everything it was sent, so
// messages/s is what the master absorbs.
func BenchmarkSharedStateAppendWithSnapshots(b *testing.B) {
	const writers = 16
	w, in, _ := benchStateCluster(b)
	states := contract.InstanceStateClient{C: w.client}
	iid, epoch := in.info.ID, in.epoch()
	batch := func(snapshots bool) time.Duration {
		return timeBatch(writers, func(i int) {
			benchAppend(b, w, in)
			if !snapshots {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := states.SaveBrowser(ctx, wire.SaveBrowser{Instance: iid, Epoch: epoch,
				Snapshot: chatSnapshot(fmt.Sprintf("b-%02d", i))}); err != nil {
				b.Error(err)
			}
		})
	}
	var tAlone, tSnap time.Duration
	for b.Loop() {
		tAlone += batch(false)
		tSnap += batch(true)
	}
	n := float64(b.N * writers)
	b.ReportMetric(n/tAlone.Seconds(), "appends-alone/s")
	b.ReportMetric(n/tSnap.Seconds(), "appends-with-snapshots/s")
	b.ReportMetric(tAlone.Seconds()/tSnap.Seconds(), "throughput-ratio")
}

// timeBatch runs post(0) … post(n-1) at once and returns how long they
// took together.
func timeBatch(n int, post func(i int)) time.Duration {
	t0 := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { post(i) })
	}
	wg.Wait()
	return time.Since(t0)
}
