package membership

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
)

// recorder keeps every event; waitFor looks through all of them, because
// the seed may see b join before a (both joins are merged concurrently).
type recorder struct {
	mu  sync.Mutex
	evs []Event
}

func (r *recorder) on(ev Event) {
	r.mu.Lock()
	r.evs = append(r.evs, ev)
	r.mu.Unlock()
}

func (r *recorder) waitFor(t *testing.T, kind EventKind, name string) Event {
	t.Helper()
	var got Event
	testutil.Eventually(t, 20*time.Second, func() error {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, ev := range r.evs {
			if ev.Kind == kind && ev.Name == name {
				got = ev
				return nil
			}
		}
		return fmt.Errorf("no %s event for %s", kind, name)
	})
	return got
}

func start(t *testing.T, name string, key []byte, rec *recorder) *Member {
	t.Helper()
	cfg := Config{Name: name, Key: key, Label: "test", Meta: Meta{Role: RoleWorker, ID: name}, Logger: zerolog.Nop()}
	if rec != nil {
		cfg.OnEvent = rec.on
	}
	m, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestGracefulLeaveAndCrashAreDistinguished(t *testing.T) {
	key := make([]byte, 32)
	key[0] = 7
	rec := &recorder{}
	seed := start(t, "master", key, rec)
	defer seed.Shutdown()
	a := start(t, "a", key, nil)
	b := start(t, "b", key, nil)
	ctx := context.Background()
	if err := a.Join(ctx, seed.Addr()); err != nil {
		t.Fatal(err)
	}
	if err := b.Join(ctx, seed.Addr()); err != nil {
		t.Fatal(err)
	}
	if ev := rec.waitFor(t, Joined, "a"); ev.Meta.ID != "a" || ev.Meta.Role != RoleWorker {
		t.Errorf("meta not gossiped: %+v", ev.Meta)
	}
	rec.waitFor(t, Joined, "b")

	if err := a.Leave(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, Left, "a")

	b.Shutdown() // a crash: no announcement
	rec.waitFor(t, Failed, "b")
}

func TestWrongKeyCannotJoin(t *testing.T) {
	k1, k2 := make([]byte, 32), make([]byte, 32)
	k2[0] = 1
	seed := start(t, "master", k1, nil)
	defer seed.Shutdown()
	intruder := start(t, "intruder", k2, nil)
	defer intruder.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if err := intruder.Join(ctx, seed.Addr()); err == nil {
		t.Fatal("a member with another key joined")
	}
	for _, m := range seed.Members() {
		if m.Name == "intruder" {
			t.Fatal("intruder is listed")
		}
	}
}

func TestBadKeyLength(t *testing.T) {
	if _, err := Start(Config{Name: "x", Key: []byte("short")}); err == nil {
		t.Fatal("short key accepted")
	}
}

// TestMembersDuringChurn: Members and Alive are read while members join
// and leave (a data race under -race when they read memberlist's node
// table), and they show who is live.
func TestMembersDuringChurn(t *testing.T) {
	key := make([]byte, 32)
	key[0] = 9
	rec := &recorder{}
	seed := start(t, "seed", key, rec)
	defer seed.Shutdown()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				_ = seed.Members()
				_ = seed.Alive("c")
			}
		}
	}()
	c := start(t, "c", key, nil)
	if err := c.Join(context.Background(), seed.Addr()); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, Joined, "c")
	if !seed.Alive("c") {
		t.Error("c joined but is not alive")
	}
	names := []string{}
	for _, in := range seed.Members() {
		names = append(names, in.Name+"/"+in.State)
	}
	if len(names) != 2 || names[0] != "c/alive" || names[1] != "seed/alive" {
		t.Errorf("members %v", names)
	}
	if err := c.Leave(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, Left, "c")
	close(stop)
	<-done
	if seed.Alive("c") {
		t.Error("c left but is still alive")
	}
}
