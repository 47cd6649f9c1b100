// Command cdpbench measures the automation endpoint against CDP spoken
// straight to a Chromium of this host, in the same run:
//   - a command's round trip (Runtime.evaluate "1" in the page, one at a
//     time): through the public address, the proxy and the worker's gate,
//     vs a raw connection to a Chromium's DevTools port;
//   - a session's start (POST /api/v1/sessions, connect, attach to its
//     page, first answer) vs a new browser context and page in that
//     Chromium (Target.createBrowserContext, createTarget, attach, first
//     answer): what an automation client waits for either way.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gorilla/websocket"
)

func main() {
	public := flag.String("public", "http://127.0.0.1:8080", "public URL (the API is there with cloudbrowser up)")
	tokenFile := flag.String("token-file", "", "the automation token's file (<data-dir>/automation.token)")
	app := flag.String("app", "reading", "app whose browsers the sessions open")
	chromium := flag.String("chromium", "chromium-headless-shell", "Chromium binary of the direct baseline")
	rounds := flag.Int("rounds", 5, "sessions (and baseline contexts) measured")
	n := flag.Int("n", 300, "round trips measured per session")
	flag.Parse()
	tok, err := os.ReadFile(*tokenFile)
	if err != nil {
		log.Fatalf("cdpbench: -token-file: %v", err)
	}
	if err := run(*public, strings.TrimSpace(string(tok)), *app, *chromium, *rounds, *n); err != nil {
		log.Fatalf("cdpbench: %v", err)
	}
}

func run(public, token, app, chromium string, rounds, n int) error {
	direct, stop, err := startChromium(chromium)
	if err != nil {
		return err
	}
	defer stop()
	var dRTT, gRTT []time.Duration
	var dStart, gStart []time.Duration
	for r := range rounds {
		// Alternate who goes first: the host's noise falls on both.
		steps := []func() error{
			func() error {
				start, rtt, err := directRound(direct, n)
				dStart, dRTT = append(dStart, start), append(dRTT, rtt...)
				return err
			},
			func() error {
				start, rtt, err := gatedRound(public, token, app, n)
				gStart, gRTT = append(gStart, start), append(gRTT, rtt...)
				return err
			},
		}
		if r%2 == 1 {
			slices.Reverse(steps)
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return err
			}
		}
	}
	fmt.Printf("CDP through the automation endpoint vs straight to a Chromium, %d rounds of %d round trips\n", rounds, n)
	fmt.Printf("%-34s %12s %12s %8s\n", "", "direct", "gated", "ratio")
	for _, q := range []float64{0.5, 0.99} {
		d, g := quantile(dRTT, q), quantile(gRTT, q)
		fmt.Printf("%-34s %12s %12s %7.2fx\n", fmt.Sprintf("round trip p%g", q*100), d.Round(time.Microsecond), g.Round(time.Microsecond), float64(g)/float64(d))
	}
	d, g := quantile(dStart, 0.5), quantile(gStart, 0.5)
	fmt.Printf("%-34s %12s %12s %7.2fx\n", "session start (median)", d.Round(time.Millisecond), g.Round(time.Millisecond), float64(g)/float64(d))
	return nil
}

// startChromium runs a Chromium with a DevTools port and returns its
// browser endpoint.
func startChromium(bin string) (string, func(), error) {
	dir, err := os.MkdirTemp("", "cdpbench")
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(bin, "--headless", "--no-sandbox", "--disable-background-networking", "--no-first-run",
		"--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1", "--user-data-dir="+filepath.Join(dir, "profile"), "about:blank")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start %s: %w", bin, err)
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); _ = os.RemoveAll(dir) }
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "DevTools listening on "); ok {
				found <- u
			}
		}
	}()
	select {
	case u := <-found:
		return u, stop, nil
	case <-time.After(20 * time.Second):
		stop()
		return "", nil, errors.New("chromium printed no DevTools address")
	}
}

// conn is a raw CDP connection, one command at a time.
type conn struct {
	ws   *websocket.Conn
	next int
}

func dial(u string) (*conn, error) {
	ws, _, err := websocket.DefaultDialer.Dial(u, nil)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	ws.SetReadLimit(64 << 20)
	return &conn{ws: ws}, nil
}

// call sends one command and reads up to its answer (events are skipped).
func (c *conn) call(session, method string, params any, result any) error {
	c.next++
	m := map[string]any{"id": c.next, "method": method}
	if params != nil {
		m["params"] = params
	}
	if session != "" {
		m["sessionId"] = session
	}
	if err := c.ws.WriteJSON(m); err != nil {
		return err
	}
	for {
		var r struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		_, raw, err := c.ws.ReadMessage()
		if err != nil {
			return err
		}
		if json.Unmarshal(raw, &r) != nil || r.ID != c.next {
			continue
		}
		if r.Error != nil {
			return fmt.Errorf("%s: %s", method, r.Error.Message)
		}
		if result != nil {
			return json.Unmarshal(r.Result, result)
		}
		return nil
	}
}

// roundTrips measures n evaluations in session.
func (c *conn) roundTrips(session string, n int) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		if err := c.call(session, "Runtime.evaluate", map[string]any{"expression": "1", "returnByValue": true}, nil); err != nil {
			return nil, err
		}
		out = append(out, time.Since(t0))
	}
	return out, nil
}

// attach attaches to target and returns the session.
func (c *conn) attach(target string) (string, error) {
	var a struct {
		SessionID string `json:"sessionId"`
	}
	err := c.call("", "Target.attachToTarget", map[string]any{"targetId": target, "flatten": true}, &a)
	return a.SessionID, err
}

func directRound(browserURL string, n int) (time.Duration, []time.Duration, error) {
	t0 := time.Now()
	c, err := dial(browserURL)
	if err != nil {
		return 0, nil, err
	}
	defer c.ws.Close()
	var bc struct {
		BrowserContextID string `json:"browserContextId"`
	}
	if err := c.call("", "Target.createBrowserContext", map[string]any{"disposeOnDetach": true}, &bc); err != nil {
		return 0, nil, err
	}
	var tg struct {
		TargetID string `json:"targetId"`
	}
	if err := c.call("", "Target.createTarget", map[string]any{"url": "about:blank", "browserContextId": bc.BrowserContextID}, &tg); err != nil {
		return 0, nil, err
	}
	s, err := c.attach(tg.TargetID)
	if err != nil {
		return 0, nil, err
	}
	if err := c.call(s, "Runtime.evaluate", map[string]any{"expression": "1"}, nil); err != nil {
		return 0, nil, err
	}
	start := time.Since(t0)
	rtt, err := c.roundTrips(s, n)
	_ = c.call("", "Target.disposeBrowserContext", map[string]any{"browserContextId": bc.BrowserContextID}, nil)
	return start, rtt, err
}

func gatedRound(public, token, app string, n int) (time.Duration, []time.Duration, error) {
	t0 := time.Now()
	body, _ := json.Marshal(map[string]any{"app": app})
	req, _ := http.NewRequest("POST", public+"/api/v1/sessions", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	var s struct {
		ID     string `json:"id"`
		CDPURL string `json:"cdpUrl"`
		Error  string `json:"error"`
	}
	err = json.NewDecoder(resp.Body).Decode(&s)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated {
		return 0, nil, fmt.Errorf("POST /api/v1/sessions: %d %s %v", resp.StatusCode, s.Error, err)
	}
	c, err := dial(s.CDPURL)
	if err != nil {
		return 0, nil, err
	}
	defer c.ws.Close() // the session ends with its client (no keep-alive)
	var ts struct {
		TargetInfos []struct {
			TargetID string `json:"targetId"`
			Type     string `json:"type"`
		} `json:"targetInfos"`
	}
	if err := c.call("", "Target.getTargets", nil, &ts); err != nil {
		return 0, nil, err
	}
	page := ""
	for _, ti := range ts.TargetInfos {
		if ti.Type == "page" {
			page = ti.TargetID
		}
	}
	if page == "" {
		return 0, nil, errors.New("the session shows no page")
	}
	sid, err := c.attach(page)
	if err != nil {
		return 0, nil, err
	}
	if err := c.call(sid, "Runtime.evaluate", map[string]any{"expression": "1"}, nil); err != nil {
		return 0, nil, err
	}
	start := time.Since(t0)
	rtt, err := c.roundTrips(sid, n)
	return start, rtt, err
}

func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}
