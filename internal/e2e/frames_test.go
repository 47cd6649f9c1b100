package e2e

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// TestStaticPageSendsNoFrames: a viewer of a page that does not change
// gets its first frames and then none (docs/benchmarks.md, bytes per
// viewer: an idle page costs nothing; typing and scrolling do). The typing
// app's page is static until someone types: nothing is focused, so no
// caret blinks.
func TestStaticPageSendsNoFrames(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	needChromium(t)
	apps, _ := filepath.Abs("testdata/apps")
	c := startCluster(t, clusterOpts{proxies: 1, workers: 1, runtime: "chromium", extra: []string{"--apps", apps}})
	u := newUser(t, "http://"+c.public)
	path := lastHop(t, u.open("/typing"))
	conn := dialSocket(t, u, "ws://"+c.public+path+"/ws")
	defer conn.Close()
	// One reader: a read that times out leaves a gorilla connection
	// unusable, so deadlines cannot be the clock here.
	frames := make(chan struct{}, 256)
	go func() {
		defer close(frames)
		for {
			mt, _, err := conn.ReadMessage()
			if err != nil {
				return
			}
			if mt == websocket.BinaryMessage {
				frames <- struct{}{}
			}
		}
	}()
	// frameWithin reports whether a frame arrives within d.
	frameWithin := func(d time.Duration) bool {
		select {
		case _, ok := <-frames:
			if !ok {
				t.Fatal("socket closed")
			}
			return true
		case <-time.After(d):
			return false
		}
	}
	if !frameWithin(30 * time.Second) {
		t.Fatal("no first frame")
	}
	// The page settles (fonts, first layouts): a second without frames.
	settled := false
	for range 30 {
		if !frameWithin(time.Second) {
			settled = true
			break
		}
	}
	if !settled {
		t.Fatal("frames keep coming for a static page: never a second without one in 30 frames")
	}
	if frameWithin(5 * time.Second) {
		t.Fatal("a frame for a page that did not change")
	}
}
