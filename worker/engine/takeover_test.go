package engine

import (
	"sync"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
)

// TestTakeoverShownAndHandedBack: every viewer, and one joining later, is
// shown who drives; a writer's Hand back reaches OnHandBack, a read-only
// viewer's is refused, and one while nobody drives is ignored.
func TestTakeoverShownAndHandedBack(t *testing.T) {
	var mu sync.Mutex
	var backs []string
	f := newHubFixture(t, func(c *Config) {
		c.OnHandBack = func(user string) { mu.Lock(); backs = append(backs, user); mu.Unlock() }
	})
	handBacks := func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), backs...) }
	w, _ := f.dial(t, AccessWrite)
	ro, _ := f.dial(t, AccessRead)

	// Nobody drives: a Hand back changes nothing.
	if err := w.WriteJSON(map[string]any{"t": "handBack"}); err != nil {
		t.Fatal(err)
	}
	getsNone(t, w, "a writer while nobody drives", "takeover", "error")

	AnnounceTakeover(f.h, "ann")
	if m := nextOf(t, w, "takeover"); m["user"] != "ann" {
		t.Fatalf("the writer was shown %v", m)
	}
	if m := nextOf(t, ro, "takeover"); m["user"] != "ann" {
		t.Fatalf("the reader was shown %v", m)
	}
	late, _ := f.dial(t, AccessRead)
	if m := nextOf(t, late, "takeover"); m["user"] != "ann" {
		t.Fatalf("a viewer joining was shown %v", m)
	}
	AnnounceTakeover(f.h, "ann") // again: nothing new
	getsNone(t, w, "the writer, told twice", "takeover")

	if err := ro.WriteJSON(map[string]any{"t": "handBack"}); err != nil {
		t.Fatal(err)
	}
	if m := nextOf(t, ro, "error"); m["message"] == nil {
		t.Fatalf("a reader's hand back: %v", m)
	}
	if err := w.WriteJSON(map[string]any{"t": "handBack"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, testutil.Cond("the writer's hand back", func() bool {
		b := handBacks()
		return len(b) == 1 && b[0] == "u"
	}))

	AnnounceTakeover(f.h, "")
	if m := nextOf(t, late, "takeover"); m["user"] != "" {
		t.Fatalf("handed back: %v", m)
	}
	again, _ := f.dial(t, AccessWrite)
	getsNone(t, again, "a viewer joining after the hand back", "takeover")
}
