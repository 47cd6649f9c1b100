package httpserve

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/cdpticket"
	"github.com/cloudbrowser-go/cloudbrowser/internal/clock/clocktest"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/cdpgate"
)

// closes records the sessions ended.
type closes struct {
	mu  sync.Mutex
	why []string
}

func (c *closes) host(viewers func() int) autoHost {
	return autoHost{close: func(r string) { c.mu.Lock(); c.why = append(c.why, r); c.mu.Unlock() }, viewers: viewers, log: zerolog.Nop()}
}

func (c *closes) count() int { c.mu.Lock(); defer c.mu.Unlock(); return len(c.why) }

// TestAutoSessionLifetime: a session ends when its last client leaves
// (not before), or after its keep-alive unless a client came back; an
// idle one ends and its client is told why, unless it is used or watched.
func TestAutoSessionLifetime(t *testing.T) {
	nobody := func() int { return 0 }
	noop := func(error) {}
	ended := func(t *testing.T, c *closes, n int) {
		t.Helper()
		testutil.Eventually(t, 10*time.Second, testutil.Cond("sessions ended", func() bool { return c.count() == n }))
	}
	t.Run("ends with its last client", func(t *testing.T) {
		var a autoSessions
		var c closes
		_, leave1 := a.join("b1", cdpticket.Claims{}, c.host(nobody), noop)
		_, leave2 := a.join("b1", cdpticket.Claims{}, c.host(nobody), noop)
		leave1()
		if c.count() != 0 {
			t.Fatal("ended with a client still there")
		}
		leave2()
		ended(t, &c, 1)
	})
	t.Run("keep-alive, and a client back in time", func(t *testing.T) {
		clk := clocktest.New(time.Unix(1e9, 0))
		a := autoSessions{clk: clk}
		var c closes
		cl := cdpticket.Claims{KeepAlive: time.Minute}
		_, leave := a.join("b1", cl, c.host(nobody), noop)
		leave()
		clk.Advance(59 * time.Second)
		_, leave = a.join("b1", cl, c.host(nobody), noop) // back within the keep-alive
		clk.Advance(time.Hour)
		if c.count() != 0 {
			t.Fatal("ended although its client came back")
		}
		leave()
		clk.Advance(59 * time.Second)
		if c.count() != 0 {
			t.Fatal("ended before its keep-alive")
		}
		clk.Advance(time.Second)
		ended(t, &c, 1)
	})
	t.Run("idle", func(t *testing.T) {
		clk := clocktest.New(time.Unix(1e9, 0))
		a := autoSessions{clk: clk}
		var c closes
		var mu sync.Mutex
		viewers := 0
		ctx, cancel := context.WithCancelCause(context.Background())
		activity, leave := a.join("b1", cdpticket.Claims{Idle: time.Minute, KeepAlive: time.Hour}, c.host(func() int {
			mu.Lock()
			defer mu.Unlock()
			return viewers
		}), cancel)
		defer leave()
		for range 5 { // commands every 30 s: alive
			clk.Advance(30 * time.Second)
			activity()
		}
		mu.Lock()
		viewers = 1
		mu.Unlock()
		clk.Advance(10 * time.Minute) // watched: alive
		if c.count() != 0 || ctx.Err() != nil {
			t.Fatal("ended while used or watched")
		}
		mu.Lock()
		viewers = 0
		mu.Unlock()
		clk.Advance(2 * time.Minute)
		ended(t, &c, 1)
		if !errors.Is(context.Cause(ctx), errSessionIdle) {
			t.Errorf("client told %v", context.Cause(ctx))
		}
	})
}

// TestTakeover: the first gesture tells the client and the viewers who
// took over, more gestures by anyone keep it theirs; Hand back, or quiet
// for handBackAfter, hands it back; after stop nothing more is sent.
func TestTakeover(t *testing.T) {
	clk := clocktest.New(time.Unix(1e9, 0))
	var shown []string
	tk := newTakeover(clk, func(user string) { shown = append(shown, user) })
	next := func() cdpgate.Notice {
		t.Helper()
		select {
		case n := <-tk.notices:
			return n
		default:
			t.Fatal("no notice")
			return cdpgate.Notice{}
		}
	}
	none := func() {
		t.Helper()
		select {
		case n := <-tk.notices:
			t.Fatalf("unexpected notice %+v", n)
		default:
		}
	}
	is := func(n cdpgate.Notice, method, user string) {
		t.Helper()
		if n.Method != method || n.Params.(map[string]string)["user"] != user {
			t.Fatalf("got %+v, want %s by %s", n, method, user)
		}
	}
	tk.gesture("ann")
	is(next(), "CloudBrowser.takeover", "ann")
	clk.Advance(handBackAfter - time.Second)
	tk.gesture("bob") // still ann's turn; the quiet starts again
	none()
	clk.Advance(handBackAfter - time.Second)
	none()
	clk.Advance(time.Second)
	is(next(), "CloudBrowser.handback", "ann")

	tk.gesture("bob")
	is(next(), "CloudBrowser.takeover", "bob")
	tk.handBack() // the engine's button
	is(next(), "CloudBrowser.handback", "bob")
	tk.handBack() // nobody has it: nothing
	clk.Advance(time.Hour)
	none()

	tk.gesture("carol")
	is(next(), "CloudBrowser.takeover", "carol")
	tk.stop()
	clk.Advance(time.Hour)
	tk.gesture("dave")
	none()
	if want := []string{"ann", "", "bob", "", "carol", ""}; !slices.Equal(shown, want) {
		t.Fatalf("the viewers were shown %q, want %q", shown, want)
	}
}
