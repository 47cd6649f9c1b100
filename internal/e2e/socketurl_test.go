package e2e

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// TestSocketURL: a worker started with --socket-url (a proxy on its own
// host, here a second proxy process) has the client engines of its
// browsers open their WebSockets there, with a one-time ticket, instead
// of at the origin of their page, which would relay them from another
// host. A real user's Chromium loads the page from the cluster's proxy,
// its socket goes to the socket URL (handed to the worker there), and the
// user's click reaches the page. The ticket works once and only for the
// page's origin. With the socket URL out of reach, engines fall back to
// their page's origin.
func TestSocketURL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	needChromium(t)
	apps, _ := filepath.Abs("testdata/apps")
	c := startCluster(t, clusterOpts{proxies: 1, workers: 0, runtime: "chromium", extra: []string{"--apps", apps}})
	px := c.start("proxy-s", "proxy", "--master", c.rmi, "--listen", anyPort, "--admin", anyPort,
		"--secret-file", filepath.Join(c.dir, "data", "cluster.secret"), "--name", "socket-proxy")
	pa := px.addrs(t)
	c.waitFor("proxy subscribed", 20*time.Second, func(st *wire.ClusterStatus) bool { return len(st.Proxies) == 2 })
	waitHTTP(t, "http://"+pa["admin"]+"/readyz", 20*time.Second)
	c.workerArgs = []string{"--socket-url", "http://" + pa["public"]}
	c.startWorker("w-e2e1")
	c.waitFor("the worker registered", 60*time.Second, func(st *wire.ClusterStatus) bool { return connected(st) == 1 })

	users := userBrowsers(t)
	alice := open(t, users, "http://"+c.public+"/typing")
	eventually(t, alice, "the engine connects", "document.body.dataset.status", "live")
	eventually(t, alice, "frames", "Number(document.body.dataset.frames || 0) > 0", "true")
	eventually(t, alice, "the socket went to the socket URL", "document.body.dataset.socketHost", pa["public"])
	eventually(t, alice, "a frame of the page at the window's size",
		"Math.abs(Number(document.body.dataset.pageWidth) - document.querySelector('canvas').clientWidth) <= 2", "true")
	x0, y0 := canvasOrigin(t, alice)
	click(t, alice, x0+80, y0+140)
	eventually(t, alice, "the click reached the button", "document.title.includes('|clicks:1')", "true")

	m := scrape(t, "http://"+pa["admin"]+"/metrics", "")
	if v := value(m, "cloudbrowser_proxy_websockets_handed_off_total", nil); v != 1 {
		t.Errorf("the socket URL's proxy handed off %v sockets, want 1", v)
	}

	// The page's ticket was used by its engine; a forged one is refused,
	// and no socket opens at the socket URL without one (no cookie of the
	// page's origin goes there).
	var page struct{ Socket, Ticket string }
	if err := alice.Evaluate(context.Background(), `({Socket: document.body.dataset.socketAt, Ticket: document.body.dataset.ticket})`, &page); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(page.Socket, "ws://"+pa["public"]+"/") || page.Ticket == "" {
		t.Fatalf("engine page: socket URL %q, ticket %q", page.Socket, page.Ticket)
	}
	origin := http.Header{"Origin": {"http://" + c.public}}
	for name, protocols := range map[string][]string{
		"the page's ticket again": {"cb.v1", "cb-ticket." + page.Ticket},
		"a forged ticket":         {"cb.v1", "cb-ticket.e30." + strings.Repeat("A", 43)},
		"no ticket":               nil,
	} {
		d := websocket.Dialer{Subprotocols: protocols, HandshakeTimeout: 20 * time.Second}
		conn, resp, err := d.Dial(page.Socket, origin)
		if err == nil {
			conn.Close()
			t.Errorf("%s: the socket opened", name)
		} else if resp == nil || resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: %v, want 403", name, err)
		}
	}

	// The socket URL's proxy gone, a new user's engine cannot reach it
	// and connects at its page's origin instead.
	px.kill()
	bob := open(t, users, "http://"+c.public+"/typing")
	eventually(t, bob, "the engine connects at its page's origin", "document.body.dataset.socketHost", c.public)
	eventually(t, bob, "the engine connects", "document.body.dataset.status", "live")
	eventually(t, bob, "frames", "Number(document.body.dataset.frames || 0) > 0", "true")
	// Alice's socket was handed to the worker: it outlives that proxy.
	eventually(t, alice, "alice still live", "document.body.dataset.status", "live")
}
