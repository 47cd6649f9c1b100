package feed

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type log struct {
	mu  sync.Mutex
	got []int
}

func (l *log) add(v int) { l.mu.Lock(); l.got = append(l.got, v); l.mu.Unlock() }
func (l *log) all() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.got)
}

func (l *log) is(t *testing.T, want ...int) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, func() error {
		if got := l.all(); !slices.Equal(got, want) {
			return fmt.Errorf("got %v, want %v", got, want)
		}
		return nil
	})
}

// TestOrderAndReplace: values arrive in order; a value that replaces the
// last one queued takes its place while it waits; a poster never waits
// for a slow subscriber.
func TestOrderAndReplace(t *testing.T) {
	var f Feed[int]
	var l log
	gate := make(chan struct{})
	stop := f.Subscribe(func(v int) {
		if v == 1 {
			<-gate // the first delivery waits: the others queue
		}
		l.add(v)
	})
	defer stop()
	replaces := func(last int) bool { return last >= 10 }
	f.Post(1, nil)
	f.Post(2, nil)
	f.Post(10, replaces) // after 2, which it does not replace
	f.Post(11, replaces) // replaces 10
	f.Post(12, replaces) // replaces 11
	close(gate)
	l.is(t, 1, 2, 12)
}

// TestStopAndEnd: a stopped subscriber gets nothing more; after End
// nobody does, and nothing runs.
func TestStopAndEnd(t *testing.T) {
	var f Feed[int]
	var a, b log
	stopA := f.Subscribe(a.add)
	f.Subscribe(b.add)
	f.Post(1, nil)
	a.is(t, 1)
	b.is(t, 1)
	stopA()
	f.Post(2, nil)
	b.is(t, 1, 2)
	f.End()
	f.Post(3, nil)
	a.is(t, 1)
	b.is(t, 1, 2)
}

// TestInitHandles: Init's handle decides how a value reaches the
// subscribers.
func TestInitHandles(t *testing.T) {
	var f Feed[int]
	var l log
	f.Init(func(v int, fns []func(int)) {
		for _, fn := range fns {
			fn(v * 10)
		}
	})
	f.Subscribe(l.add)
	f.Post(4, nil)
	l.is(t, 40)
}
