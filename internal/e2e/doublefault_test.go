package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// TestDoubleFaultE2E: kill -9 of the worker hosting the chat room and of
// the master together, then a master restart. The room comes back under
// its id on the other worker with every acknowledged message; its user's
// engine is live again at the same Browser URL; a user who opens /chat
// meanwhile joins that room, never a new empty one.
func TestDoubleFaultE2E(t *testing.T) {
	r := newChatRoom(t)
	c, opts, base, users, alice, alicePath, iid := r.c, r.opts, r.base, r.users, r.alice, r.path, r.iid
	const n = 12
	want := sendChat(t, alice, n)

	victim := instanceWorker(c.mustStatus(), iid)
	c.workers[victim].kill()
	c.master.kill()
	killed := time.Now()
	c.startMaster(opts)

	liveOn(t, alice, base, alicePath, c.movedOff(iid, victim), want)
	t.Logf("fault-to-live double-fault: %v (worker and master kill -9, alice live again with %d messages)", time.Since(killed), n)
	bob, bobPath := chatUser(t, users, base)
	if got := instanceOf(t, bobPath); got != iid {
		t.Fatalf("a returning user got room %s, want %s", got, iid)
	}
	eventually(t, bob, "bob sees the room's messages", "document.title", want)
	if got := storedMessages(t, c, iid); len(got) != n {
		t.Fatalf("stored %d messages, want %d", len(got), n)
	}
}

// TestQuickRestartE2E: the worker hosting the chat room is killed -9 and
// started again under the same id at once, before the master declared it
// dead. It registers with no instances: the room fails over at once (not
// after minutes of 503), its user is live again with every message, and
// the admin can close it (200, not 502).
func TestQuickRestartE2E(t *testing.T) {
	r := newChatRoom(t)
	c, alice, iid := r.c, r.alice, r.iid
	const n = 5
	want := sendChat(t, alice, n)
	victim := instanceWorker(c.mustStatus(), iid)
	old := c.mustStatus()
	var epoch uint64
	for _, in := range old.Instances {
		if in.ID == iid {
			epoch = in.Epoch
		}
	}
	c.workers[victim].kill()
	killed := time.Now()
	c.startWorker(victim)
	c.waitFor("the room placed again under a new epoch", 60*time.Second, func(st *wire.ClusterStatus) bool {
		for _, in := range st.Instances {
			if in.ID == iid {
				return in.Epoch > epoch
			}
		}
		return false
	})
	eventually(t, alice, "the room restored", "document.title", want)
	eventually(t, alice, "engine live again", "document.body.dataset.status", "live")
	t.Logf("fault-to-live quick-restart: %v (kill -9 and restart under the same id)", time.Since(killed))
	if got := storedMessages(t, c, iid); len(got) != n {
		t.Fatalf("stored %d messages, want %d", len(got), n)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+c.admin+"/api/v1/instances/"+iid+"/close", nil)
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("admin close after the restart: %s", resp.Status)
	}
}

// TestMasterKilledAfterMigrationE2E: the room is migrated by a drain and
// the master is killed -9 right after. The restarted master knows the room
// from its store and the worker it moved to reports it (under the newer
// epoch): alice's engine stays live on the new copy, a user who opens
// /chat joins the same room (no new, empty one; the migrated copy is not
// closed as "merged"), and every message is kept.
func TestMasterKilledAfterMigrationE2E(t *testing.T) {
	r := newChatRoom(t)
	c, opts, base, users, alice, alicePath, iid := r.c, r.opts, r.base, r.users, r.alice, r.path, r.iid
	want := sendChat(t, alice, 4)
	from := instanceWorker(c.mustStatus(), iid)
	c.adminPost("/api/v1/workers/" + from + "/drain?migrate=true")
	c.master.kill()
	c.startMaster(opts)
	to := c.movedOff(iid, from)
	liveOn(t, alice, base, alicePath, to, want)
	bob, bobPath := chatUser(t, users, base)
	if got := instanceOf(t, bobPath); got != iid {
		t.Fatalf("a user after the restart got room %s, want %s", got, iid)
	}
	eventually(t, bob, "bob sees the room's messages", "document.title", want)
	if got := storedMessages(t, c, iid); len(got) != 4 {
		t.Fatalf("stored %d messages, want 4", len(got))
	}
}
