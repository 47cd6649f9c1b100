package e2e

import (
	"errors"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// TestStalledWorker: a worker stalled for 3 s (SIGSTOP) is declared dead,
// and its instances are placed again on the other worker under the same
// ids, so users who arrive meanwhile join them instead of getting new
// ones. When it resumes, the master fences its copies: there is one chat
// room and one notes instance per user, everyone is in the same room, and
// the stalled worker's clients are sent on to the same URLs, now served
// elsewhere (never silently split).
func TestStalledWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	needChromium(t)
	apps, _ := filepath.Abs("../../apps")
	c := startCluster(t, clusterOpts{proxies: 1, workers: 2, runtime: "chromium", extra: []string{"--apps", apps}})
	base := "http://" + c.public
	// Everything alice starts goes to w-e2e1, the worker that will stall.
	c.adminPost("/api/v1/workers/w-e2e2/drain")
	alice := newUser(t, base)
	chatPath := lastHop(t, alice.open("/chat"))
	notesPath := lastHop(t, alice.open("/notes"))
	room, notes := instanceOf(t, chatPath), instanceOf(t, notesPath)
	if !strings.HasPrefix(room, "w-e2e1.") || !strings.HasPrefix(notes, "w-e2e1.") {
		t.Fatalf("not on w-e2e1: %s %s", room, notes)
	}
	conn := dialSocket(t, alice, "ws://"+c.public+chatPath+"/ws")
	waitMessage(t, conn, "hello", "")
	c.adminPost("/api/v1/workers/w-e2e2/undrain")

	stalled := c.workers["w-e2e1"]
	if err := syscall.Kill(stalled.pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(stalled.pid(), syscall.SIGCONT)
		}
	}
	defer resume()
	c.waitFor("the stalled worker's instances placed again", 20*time.Second, func(st *wire.ClusterStatus) bool {
		return instanceWorker(st, room) == "w-e2e2" && instanceWorker(st, notes) == "w-e2e2"
	})
	// New users arrive meanwhile and join the moved instances.
	bob := newUser(t, base)
	if got := instanceOf(t, lastHop(t, bob.open("/chat"))); got != room {
		t.Fatalf("bob in room %s, want the moved %s", got, room)
	}
	if got := instanceOf(t, lastHop(t, alice.open("/notes"))); got != notes {
		t.Fatalf("alice's notes while w-e2e1 is stalled: %s, want %s", got, notes)
	}
	// Alice's socket to the stalled copy ended at the master's verdict:
	// the proxy closed it (or, had it not held it, the resumed worker
	// would send her on with "moved"); never a hang.
	endedOrMoved(t, conn)
	time.Sleep(time.Until(stopped.Add(3 * time.Second)))
	resume()
	c.waitFor("the stalled worker back", 20*time.Second, func(st *wire.ClusterStatus) bool {
		for _, w := range st.Workers {
			if w.ID == "w-e2e1" && w.State == "connected" {
				return true
			}
		}
		return false
	})
	st := c.mustStatus()
	rooms, perOwner := 0, map[string]int{}
	for _, in := range st.Instances {
		switch in.App {
		case "chat":
			rooms++
		case "notes":
			perOwner[in.Owner]++
		}
	}
	if rooms != 1 || instanceWorker(st, room) != "w-e2e2" {
		t.Fatalf("%d chat rooms (want 1, on w-e2e2): %+v", rooms, st.Instances)
	}
	for owner, n := range perOwner {
		if n != 1 {
			t.Fatalf("%s owns %d notes instances", owner, n)
		}
	}
	if got := instanceOf(t, lastHop(t, alice.open("/chat"))); got != room {
		t.Fatalf("alice in room %s, bob in %s", got, room)
	}
	// Her old Browser URL works again, on the new worker.
	if h := alice.get(chatPath); h.status != 200 || h.worker != "w-e2e2" {
		t.Fatalf("alice's old Browser URL: %d on %q", h.status, h.worker)
	}
	again := dialSocket(t, alice, "ws://"+c.public+chatPath+"/ws")
	waitMessage(t, again, "hello", "")
}

// lastHop is the path a redirect chain ended at, which must be a page.
func lastHop(t *testing.T, hs []hop) string {
	t.Helper()
	last := hs[len(hs)-1]
	if last.status != 200 {
		t.Fatalf("chain ended with %d: %+v", last.status, hs)
	}
	return last.path
}

// instanceOf is the instance id in a Browser or App-instance path.
func instanceOf(t *testing.T, path string) string {
	t.Helper()
	parts := strings.Split(strings.Trim(path, "/"), "/")
	if len(parts) < 3 || parts[1] != "a" {
		t.Fatalf("no instance in %s", path)
	}
	return parts[2]
}

// endedOrMoved reads conn until it ends or says "moved" (within 20 s).
func endedOrMoved(t *testing.T, conn *websocket.Conn) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	defer conn.SetReadDeadline(time.Time{})
	for {
		_, data, err := conn.ReadMessage()
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			t.Fatalf("the socket to the stalled copy neither ended nor said moved: %v", err)
		case err != nil:
			return
		case strings.Contains(string(data), `"t":"moved"`):
			return
		}
	}
}
