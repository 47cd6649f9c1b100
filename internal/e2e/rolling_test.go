package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// chatter is a user of the chat sample driving their browser through the
// client engine's protocol, as the engine would: it types a message every
// so often, keeps the ones the page acknowledged (the page's title shows
// the last stored message), and reconnects to its Browser URL whenever the
// socket ends or the server says the instance moved.
type chatter struct {
	u    *user
	url  string // ws://…/b/<bid>/ws
	name string

	mu    sync.Mutex
	acked map[string]bool
	moved int
	live  bool // connected and greeted
}

func (ch *chatter) isLive() bool {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.live
}

// dial opens the client engine's socket with the user's cookies; nil when
// the cluster answered something else (or nothing) this time.
func (ch *chatter) dial(ctx context.Context) *websocket.Conn {
	h := http.Header{"Origin": {ch.u.base}}
	for _, ck := range ch.u.c.Jar.Cookies(mustURL(ch.u.base)) {
		h.Add("Cookie", ck.String())
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, resp, err := websocket.DefaultDialer.DialContext(dctx, ch.url, h)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		return nil
	}
	return conn
}

func (ch *chatter) run(ctx context.Context, t *testing.T) {
	n := 0
	for ctx.Err() == nil {
		conn := ch.dial(ctx)
		if conn == nil { // moving, restarting: try again, as the engine does
			time.Sleep(250 * time.Millisecond)
			continue
		}
		done := make(chan struct{})
		go func() { // read: page titles and moves
			defer close(done)
			for {
				mt, data, err := conn.ReadMessage()
				if err != nil {
					return
				}
				if mt != websocket.TextMessage {
					continue
				}
				var m struct{ T, Title string }
				if json.Unmarshal(data, &m) != nil {
					continue
				}
				ch.mu.Lock()
				switch m.T {
				case "moved":
					ch.moved++
					ch.live = false
				case "hello":
					ch.live = true
				}
				switch m.T {
				case "page", "hello":
					if _, text, ok := strings.Cut(m.Title, ": "); ok && strings.HasPrefix(text, ch.name+"-") {
						ch.acked[text] = true
					}
				}
				ch.mu.Unlock()
			}
		}()
	send:
		for ctx.Err() == nil {
			n++
			msg := fmt.Sprintf("%s-%d", ch.name, n)
			for _, ev := range []map[string]any{{"t": "input", "type": "inserttext", "text": msg},
				{"t": "input", "type": "keydown", "key": "Enter"}, {"t": "input", "type": "keyup", "key": "Enter"}} {
				if conn.WriteJSON(ev) != nil {
					break send
				}
			}
			select {
			case <-done:
				break send
			case <-ctx.Done():
			case <-time.After(2 * time.Second):
			}
		}
		conn.Close()
		<-done
		ch.mu.Lock()
		ch.live = false
		ch.mu.Unlock()
	}
}

// TestRollingRestart: every worker of a 3-worker cluster is restarted in
// turn (SIGTERM, then started again) while 10 connected users chat. No
// instance is lost, every message a user saw acknowledged is stored, and
// every user is still in the one room.
func TestRollingRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	needChromium(t)
	apps, _ := filepath.Abs("../../apps")
	c := startCluster(t, clusterOpts{proxies: 1, workers: 3, runtime: "chromium", extra: []string{"--apps", apps}})
	base := "http://" + c.public
	var chatters []*chatter
	for i := range 10 {
		u := newUser(t, base)
		path := lastHop(t, u.open("/chat"))
		lastHop(t, u.open("/notes")) // an instance of their own too
		chatters = append(chatters, &chatter{u: u, url: "ws://" + c.public + path + "/ws", name: fmt.Sprintf("u%d", i), acked: map[string]bool{}})
	}
	before := c.mustStatus()
	room := ""
	for _, in := range before.Instances {
		if in.App == "chat" {
			room = in.ID
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, ch := range chatters {
		wg.Add(1)
		go func() { defer wg.Done(); ch.run(ctx, t) }()
	}
	time.Sleep(2 * time.Second)
	for _, id := range []string{"w-e2e1", "w-e2e2", "w-e2e3"} {
		t0 := time.Now()
		c.workers[id].stop() // SIGTERM: it hands its instances over first
		t.Logf("%s stopped after %v", id, time.Since(t0))
		c.startWorker(id)
		c.waitFor(id+" back", 30*time.Second, func(st *wire.ClusterStatus) bool { return connected(st) == 3 })
		// An operator restarts the next one when everyone is served again.
		deadline := time.Now().Add(60 * time.Second)
		for _, ch := range chatters {
			for !ch.isLive() {
				if time.Now().After(deadline) {
					t.Fatalf("%s not connected again after %s restarted", ch.name, id)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
	time.Sleep(2 * time.Second)
	cancel()
	wg.Wait()

	after := c.mustStatus()
	for _, in := range before.Instances {
		if instanceWorker(after, in.ID) == "" {
			t.Errorf("instance %s (%s) lost in the rolling restart", in.ID, in.App)
		}
	}
	// The room keeps its last 200 messages: a user's acknowledged message
	// must be stored unless it is older than the user's oldest kept one.
	stored, oldest := map[string]bool{}, map[string]int{}
	for _, m := range storedMessages(t, c, room) {
		stored[m] = true
		if name, k, ok := messageNumber(m); ok && (oldest[name] == 0 || k < oldest[name]) {
			oldest[name] = k
		}
	}
	acked, moved := 0, 0
	for _, ch := range chatters {
		ch.mu.Lock()
		for m := range ch.acked {
			acked++
			if _, k, _ := messageNumber(m); !stored[m] && (len(stored) < 200 || k >= oldest[ch.name]) {
				t.Errorf("acknowledged message %q is not stored", m)
			}
		}
		moved += ch.moved
		ch.mu.Unlock()
	}
	if acked < len(chatters) {
		t.Fatalf("only %d acknowledged messages seen", acked)
	}
	t.Logf("%d acknowledged messages, all stored; %d moves followed by clients", acked, moved)
}

// messageNumber splits "u3-17" into "u3" and 17.
func messageNumber(m string) (string, int, bool) {
	name, num, ok := strings.Cut(m, "-")
	var k int
	if _, err := fmt.Sscanf(num, "%d", &k); !ok || err != nil {
		return "", 0, false
	}
	return name, k, true
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}
