package e2e

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// TestWebSocketHandoff: a proxy process on the worker's host hands a
// client engine's WebSocket to the worker instead of relaying it (counted
// in its metrics), and the session goes on after that proxy is killed; its
// page requests reach the worker over a unix socket pair.
func TestWebSocketHandoff(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	c := startCluster(t, clusterOpts{proxies: 0, workers: 1})
	px := c.start("proxy-h", "proxy", "--master", c.rmi, "--listen", anyPort, "--admin", anyPort,
		"--secret-file", filepath.Join(c.dir, "data", "cluster.secret"), "--name", "handoff-proxy")
	pa := px.addrs(t)
	c.waitFor("proxy subscribed", 20*time.Second, func(st *wire.ClusterStatus) bool { return len(st.Proxies) == 2 })
	waitHTTP(t, "http://"+pa["admin"]+"/readyz", 20*time.Second)

	u := newUser(t, "http://"+pa["public"])
	ws := dialSocket(t, u, "ws://"+pa["public"]+lastHop(t, u.open("/hello"))+"/ws")
	var hello struct{ T string }
	_ = ws.SetReadDeadline(time.Now().Add(20 * time.Second))
	if err := ws.ReadJSON(&hello); err != nil || hello.T != "hello" {
		t.Fatalf("first message %+v, %v", hello, err)
	}
	m := scrape(t, "http://"+pa["admin"]+"/metrics", "")
	if v := value(m, "cloudbrowser_proxy_websockets_handed_off_total", nil); v != 1 {
		t.Errorf("handed off: %v, want 1", v)
	}
	if v := value(m, "cloudbrowser_proxy_websockets_total", nil); v != 0 {
		t.Errorf("relayed: %v, want 0", v)
	}
	// The page requests went to the worker over a unix socket pair.
	if v := value(m, "cloudbrowser_proxy_worker_pairs_total", nil); v < 1 {
		t.Errorf("worker connections over a socket pair: %v, want at least 1", v)
	}

	px.kill() // the proxy the socket came through
	if err := ws.WriteJSON(map[string]any{"t": "ping", "seq": 7, "data": "after the proxy"}); err != nil {
		t.Fatal(err)
	}
	for {
		var msg struct {
			T    string
			Seq  int
			Data string
		}
		_ = ws.SetReadDeadline(time.Now().Add(20 * time.Second))
		if err := ws.ReadJSON(&msg); err != nil {
			t.Fatalf("the session ended with its proxy: %v", err)
		}
		if msg.T == "pong" {
			if msg.Seq != 7 || msg.Data != "after the proxy" {
				t.Fatalf("pong %+v", msg)
			}
			return
		}
	}
}
