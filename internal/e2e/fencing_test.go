package e2e

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// TestStalledWorker: a worker stalled for 3 s (SIGSTOP) is declared dead,
// and users who arrive meanwhile get new instances elsewhere. When it
// resumes, the master keeps one instance per strategy key: there is one
// chat room and one notes instance per user, everyone is in the same room,
// and the users of the fenced room are told where to go (never silently
// split), with real Chromium behind the instances.
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
	oldRoom, oldNotes := instanceOf(t, chatPath), instanceOf(t, notesPath)
	if !strings.HasPrefix(oldRoom, "w-e2e1.") || !strings.HasPrefix(oldNotes, "w-e2e1.") {
		t.Fatalf("not on w-e2e1: %s %s", oldRoom, oldNotes)
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
	c.waitFor("the stalled worker declared dead", 10*time.Second, func(st *wire.ClusterStatus) bool {
		return instanceWorker(st, oldRoom) == ""
	})
	// New users arrive meanwhile: bob gets a new room, alice new notes.
	bob := newUser(t, base)
	newRoom := instanceOf(t, lastHop(t, bob.open("/chat")))
	newNotes := instanceOf(t, lastHop(t, alice.open("/notes")))
	if newRoom == oldRoom || newNotes == oldNotes {
		t.Fatalf("no new instances while the worker was stalled: %s %s", newRoom, newNotes)
	}
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

	// Alice's socket to the old room is told where the room went.
	waitMessage(t, conn, "closed", "/chat")
	st := c.mustStatus()
	rooms, notes := 0, map[string]int{}
	for _, in := range st.Instances {
		switch in.App {
		case "chat":
			rooms++
		case "notes":
			notes[in.Owner]++
		}
	}
	if rooms != 1 {
		t.Fatalf("%d chat rooms, want 1: %+v", rooms, st.Instances)
	}
	for owner, n := range notes {
		if n != 1 {
			t.Fatalf("%s owns %d notes instances", owner, n)
		}
	}
	// Everyone is in the same room; the old URLs say what happened.
	if got := instanceOf(t, lastHop(t, alice.open("/chat"))); got != newRoom {
		t.Fatalf("alice in room %s, bob in %s", got, newRoom)
	}
	if got := instanceOf(t, lastHop(t, alice.open("/notes"))); got != newNotes {
		t.Fatalf("alice's notes: %s, want %s", got, newNotes)
	}
	if h := alice.get(chatPath); h.status != 410 || !strings.Contains(h.body, "replaced") || !strings.Contains(h.body, `href="/chat"`) {
		t.Fatalf("old room's URL: %d %s", h.status, h.body)
	}
	// The client engine's reconnection to the old room learns the same.
	again, status := dialStatus(t, alice, "ws://"+c.public+chatPath+"/ws")
	if again == nil {
		t.Fatalf("reconnecting to the old room: status %d, want a closed notice", status)
	}
	waitMessage(t, again, "closed", "replaced")
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
