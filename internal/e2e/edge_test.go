package e2e

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestEdgeServesPageLoads: the embedded proxy's event-loop edge relays a
// user's page load itself (the Application URL, whose placement it asks of
// the master off the loop, the Browser URL, the engine's assets, requests
// pipelined on one connection) and hands the WebSocket upgrade to net/http,
// which relays it as before. The metrics show which did what.
func TestEdgeServesPageLoads(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	apps, _ := filepath.Abs("testdata/apps")
	c := startCluster(t, clusterOpts{proxies: 0, workers: 1, extra: []string{"--apps", apps}})
	metricsURL := "http://" + c.admin + "/metrics"
	m0 := scrape(t, metricsURL, "")

	u := newUser(t, "http://"+c.public)
	page, js := openEngine(t, u, "/typing")
	if h := u.get(js); h.status != 200 || !strings.Contains(h.body, "WebSocket") {
		t.Fatalf("engine.js: %d %.100q", h.status, h.body)
	}

	// Three requests pipelined on one connection, with the user's cookies:
	// three answers, in order.
	conn, err := net.Dial("tcp", c.public)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var cookies []string
	for _, ck := range u.c.Jar.Cookies(mustURL("http://" + c.public + page.path)) {
		cookies = append(cookies, ck.Name+"="+ck.Value)
	}
	req := "GET " + page.path + " HTTP/1.1\r\nHost: " + c.public + "\r\nCookie: " + strings.Join(cookies, "; ") + "\r\n\r\n"
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, req+req+req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	for i := 0; i < 3; i++ {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("pipelined answer %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), "engine.js") || resp.Header.Get("X-Request-Id") == "" {
			t.Fatalf("pipelined answer %d: %d %.200q", i, resp.StatusCode, b)
		}
	}

	// The WebSocket: handed over, relayed, the page's hello arrives.
	ws := dialSocket(t, u, "ws://"+c.public+page.path+"/ws")
	if msg, err := readText(t, ws); err != nil || msg["t"] != "hello" {
		t.Fatalf("socket: %v %v", msg, err)
	}
	ws.Close()

	m1 := scrape(t, metricsURL, "")
	edge := value(m1, "cloudbrowser_proxy_edge_requests_total", nil) - value(m0, "cloudbrowser_proxy_edge_requests_total", nil)
	if edge < 2+1+3 { // redirect and page, engine.js, the pipelined three
		t.Errorf("the edge relayed %v requests, want at least 6", edge)
	}
	upgrades := value(m1, "cloudbrowser_proxy_edge_handoffs_total", map[string]string{"reason": "framing"}) -
		value(m0, "cloudbrowser_proxy_edge_handoffs_total", map[string]string{"reason": "framing"})
	if upgrades < 1 {
		t.Errorf("the WebSocket upgrade was not handed over (framing hand-offs +%v)", upgrades)
	}
}
