package e2e

import (
	"syscall"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// TestStallE2E: the worker hosting the chat room stops (SIGSTOP) for about
// ten seconds. A new user who opens /chat meanwhile waits and is served the
// room from its new worker (never a 503); alice's engine, whose socket the
// stalled worker holds, is closed by the proxy when the master declares
// the worker dead and reconnects to the room's new copy at the same URL;
// when the worker resumes, its copy is fenced, not served.
func TestStallE2E(t *testing.T) {
	r := newChatRoom(t)
	c, base, alice, alicePath, iid := r.c, r.base, r.alice, r.path, r.iid
	want := sendChat(t, alice, 3)
	victim := instanceWorker(c.mustStatus(), iid)
	pid := c.workers[victim].cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	defer resume()

	// A new user of the room during the stall, once the master sees the
	// worker silent (Application URLs then pass it over; a request sent to
	// it in the first seconds of a stall waits out the stall: a known
	// limit): served once the room moved.
	c.waitFor("the stalled worker silent", 30*time.Second, func(st *wire.ClusterStatus) bool { return silent(st, victim) })
	hops := newUser(t, base).open("/chat")
	last := hops[len(hops)-1]
	m := browserURL.FindStringSubmatch(last.path)
	if last.status != 200 || m == nil || m[2] != iid {
		t.Fatalf("/chat during the stall: %+v", hops)
	}
	t.Logf("/chat during the stall answered after %v, by %s", time.Since(stopped), last.worker)

	moved := c.movedOff(iid, victim)
	decided := time.Now()
	liveOn(t, alice, base, alicePath, moved, want)
	t.Logf("fault-to-live stall: %v (SIGSTOP; the room moved after %v, alice live on the new copy %v after that)", time.Since(stopped), decided.Sub(stopped), time.Since(decided))
	if d := time.Until(stopped.Add(10 * time.Second)); d > 0 {
		time.Sleep(d) // the stall lasts ten seconds in all
	}
	resume()
	c.waitFor("the resumed worker back, the room where it moved", 60*time.Second, func(st *wire.ClusterStatus) bool {
		return hasWorker(st, victim) && connected(st) == 2 && instanceWorker(st, iid) == moved
	})
	eventually(t, alice, "alice still on the new copy", "document.body.dataset.worker", moved)
}

// silent: the master has had no load report from worker id for a while.
func silent(st *wire.ClusterStatus, id string) bool {
	for _, w := range st.Workers {
		if w.ID == id {
			return w.Silent
		}
	}
	return false
}
