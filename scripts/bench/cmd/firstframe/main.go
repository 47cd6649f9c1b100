// Command firstframe measures a new user's first painted frame: in one
// already-running headless Chromium it opens, N times, a fresh incognito
// browser context, navigates to an Application URL and waits until the
// client engine has drawn the first screencast frame on its canvas. Each
// visit is broken down by step from the page's Navigation Timing, the
// client engine's performance marks (web/static/engine.js) and the
// Server-Timing headers of the proxy and the worker.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

func main() {
	public := flag.String("public", "http://127.0.0.1:8080", "public (proxy) URL")
	app := flag.String("app", "notes", "app mount point; its strategy should give every new user a new browser")
	n := flag.Int("n", 20, "visits measured")
	warmup := flag.Int("warmup", 1, "visits made first and not counted (the Chromium of the driver warms up)")
	chrome := flag.String("chromium", "/usr/bin/chromium", "Chromium executable")
	verbose := flag.Bool("v", false, "print every visit")
	flag.Parse()
	if err := run(*public, *app, *chrome, *n, *warmup, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "firstframe:", err)
		os.Exit(1)
	}
}

// steps, in the order of a visit. Server-side ones are parts of the
// client-side "redirect" and "page" steps.
var steps = []struct{ key, desc string }{
	{"redirect", "Application URL → 302 (proxy + placement)"},
	{"  route", "  proxy: master route lookup (Server-Timing)"},
	{"  place", "  worker: placement at the master, all in (Server-Timing)"},
	{"  master", "    placement without the browser (place − browser)"},
	{"  browser", "    browser: lease + app API + policy + entry nav"},
	{"    lease", "      lease (Server-Timing)"},
	{"    nav", "      navigation to the app's entry (Server-Timing)"},
	{"page", "Browser URL → engine page loaded"},
	{"engine", "page loaded → engine.js running (assets)"},
	{"ws", "engine running → WebSocket open"},
	{"  wsSend", "  engine running → handshake sent (CDP: the driver's Chromium)"},
	{"  handshake", "  handshake sent → 101 received (CDP: proxy + worker)"},
	{"  wsOpen", "  101 received → onopen (page main thread)"},
	{"frame", "WebSocket open → first frame received"},
	{"  frameNet", "  WebSocket open → frame's bytes in (CDP: worker sends)"},
	{"  frameJS", "  bytes in → engine's handler (page main thread)"},
	{"draw", "first frame received → drawn"},
	{"total", "navigation start → first frame drawn (page clock)"},
	{"wall", "driver: Navigate → first frame seen"},
}

func run(public, app, chrome string, n, warmup int, verbose bool) error {
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox,
		chromedp.Flag("headless", true), chromedp.WindowSize(1280, 800))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	if err := chromedp.Do(bctx); err != nil { // starts Chromium
		return fmt.Errorf("start chromium: %w", err)
	}
	res := map[string][]float64{}
	for i := -warmup; i < n; i++ {
		v, err := visit(bctx, strings.TrimRight(public, "/")+"/"+app)
		if err != nil {
			return fmt.Errorf("visit %d: %w", i, err)
		}
		if verbose {
			fmt.Fprintf(os.Stderr, "visit %d: total %.0f ms %v\n", i, v["total"], v)
		}
		if i < 0 {
			continue
		}
		for k, x := range v {
			res[k] = append(res[k], x)
		}
	}
	fmt.Printf("first frame, %d visits (after %d warm-up), app /%s\n", n, warmup, app)
	fmt.Printf("%-60s %9s %9s %9s %7s\n", "step", "p50_ms", "p95_ms", "max_ms", "p50/tot")
	tot := pct(res["total"], .5)
	for _, s := range steps {
		k := strings.TrimSpace(s.key)
		xs := res[k]
		if len(xs) == 0 {
			continue
		}
		fmt.Printf("%-60s %9.1f %9.1f %9.1f %7.2f\n", s.desc, pct(xs, .5), pct(xs, .95), pct(xs, 1), pct(xs, .5)/tot)
	}
	fmt.Printf("visits whose engine sent a link hint (a fresh first frame, not the precast one): %d of %d\n",
		len(slices.DeleteFunc(slices.Clone(res["link"]), func(x float64) bool { return x == 0 })), len(res["link"]))
	fmt.Printf("summary p50_ms=%.1f p95_ms=%.1f max_ms=%.1f\n", tot, pct(res["total"], .95), pct(res["total"], 1))
	return nil
}

func pct(xs []float64, p float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return math.NaN()
	}
	return s[int(math.Round(p*float64(len(s)-1)))]
}

// pageTimes is what the page reports about itself.
type pageTimes struct {
	RedirectStart float64            `json:"redirectStart"`
	RedirectEnd   float64            `json:"redirectEnd"`
	FetchStart    float64            `json:"fetchStart"`
	ResponseEnd   float64            `json:"responseEnd"`
	Redirects     int                `json:"redirectCount"`
	ServerTiming  map[string]float64 `json:"serverTiming"`
	Marks         map[string]float64 `json:"marks"`
	Link          float64            `json:"link"` // the engine's link hint, kbit/s (0: none)
}

const firstFrameJS = `new Promise(function (resolve) {
  (function check() {
    if (performance.getEntriesByName("cb-first-frame").length) { resolve(true); return; }
    setTimeout(check, 2);
  })();
})`

const timesJS = `(function () {
  var n = performance.getEntriesByType("navigation")[0];
  var st = {}, marks = {};
  (n.serverTiming || []).forEach(function (e) { st[e.name] = (st[e.name] || 0) + e.duration; });
  performance.getEntriesByType("mark").forEach(function (m) { marks[m.name] = m.startTime; });
  return {redirectStart: n.redirectStart, redirectEnd: n.redirectEnd, fetchStart: n.fetchStart,
    responseEnd: n.responseEnd, redirectCount: n.redirectCount, serverTiming: st, marks: marks,
    link: Number(document.body.dataset.link || 0)};
})()`

// visit opens the Application URL in a new incognito context and returns
// its steps in milliseconds.
func visit(parent context.Context, appURL string) (map[string]float64, error) {
	ctx, cancel := chromedp.NewContext(parent, chromedp.WithNewBrowserContext())
	defer cancel()
	ctx, tcancel := context.WithTimeout(ctx, 60*time.Second)
	defer tcancel()
	// The redirect's own Server-Timing is not in the page's Navigation
	// Timing (that holds the final response's): read it from the network.
	// The WebSocket's handshake is timed on the protocol's monotonic
	// clock, placed on the page's by the first request (navigation start
	// is within a millisecond of it).
	var (
		mu                   sync.Mutex
		redirectTiming       = map[string]float64{}
		navAt, hsSent, hsGot float64
		frameIn              float64
	)
	if err := chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			if navAt == 0 {
				navAt = e.Timestamp.Float64()
			}
			if e.RedirectResponse == nil {
				return
			}
			for k, v := range e.RedirectResponse.Headers {
				if strings.EqualFold(k, "Server-Timing") {
					s, _ := v.(string)
					parseServerTiming(s, redirectTiming)
				}
			}
		case *network.EventWebSocketWillSendHandshakeRequest:
			if hsSent == 0 {
				hsSent = e.Timestamp.Float64()
			}
		case *network.EventWebSocketHandshakeResponseReceived:
			if hsGot == 0 {
				hsGot = e.Timestamp.Float64()
			}
		case *network.EventWebSocketFrameReceived:
			if frameIn == 0 && e.Response != nil && e.Response.Opcode == 2 {
				frameIn = e.Timestamp.Float64()
			}
		}
	}); err != nil { // creates the tab
		return nil, fmt.Errorf("new tab: %w", err)
	}
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		return nil, fmt.Errorf("network events: %w", err)
	}
	t0 := time.Now()
	err := chromedp.Do(ctx, chromedp.Navigate(appURL))
	if err == nil {
		_, err = chromedp.Run(ctx, chromedp.Evaluate[bool](firstFrameJS, chromedp.EvalAwaitPromise))
	}
	wall := time.Since(t0)
	if err != nil {
		return nil, err
	}
	pt, err := chromedp.Run(ctx, chromedp.Evaluate[pageTimes](timesJS))
	if err != nil {
		return nil, err
	}
	if pt.Redirects == 0 {
		return nil, fmt.Errorf("no redirect: did %s answer with its Browser URL? %s", appURL, mustJSON(pt))
	}
	mu.Lock()
	defer mu.Unlock()
	m := pt.Marks
	v := map[string]float64{
		"redirect": pt.RedirectEnd - pt.RedirectStart,
		"page":     pt.ResponseEnd - pt.RedirectEnd,
		"engine":   m["cb-engine"] - pt.ResponseEnd,
		"ws":       m["cb-ws-open"] - m["cb-engine"],
		"frame":    m["cb-frame-received"] - m["cb-ws-open"],
		"draw":     m["cb-first-frame"] - m["cb-frame-received"],
		"total":    m["cb-first-frame"],
		"wall":     float64(wall.Microseconds()) / 1000,
		"link":     pt.Link,
	}
	if navAt > 0 && hsSent > 0 && hsGot > 0 {
		v["wsSend"] = (hsSent-navAt)*1000 - m["cb-engine"]
		v["handshake"] = (hsGot - hsSent) * 1000
		v["wsOpen"] = m["cb-ws-open"] - (hsGot-navAt)*1000
	}
	if navAt > 0 && frameIn > 0 {
		v["frameNet"] = (frameIn-navAt)*1000 - m["cb-ws-open"]
		v["frameJS"] = m["cb-frame-received"] - (frameIn-navAt)*1000
	}
	if x, ok := redirectTiming["route"]; ok {
		v["route"] = x
	}
	if x, ok := redirectTiming["place"]; ok {
		v["place"] = x
		b := pt.ServerTiming["lease"] + pt.ServerTiming["api"] + pt.ServerTiming["policy"] + pt.ServerTiming["nav"]
		v["browser"], v["master"] = b, x-b
		v["lease"], v["nav"] = pt.ServerTiming["lease"], pt.ServerTiming["nav"]
	}
	return v, nil
}

// parseServerTiming adds the durations of a Server-Timing value (entries
// separated by commas, or newlines where Chromium joined repeated headers).
func parseServerTiming(s string, into map[string]float64) {
	for _, e := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' }) {
		parts := strings.Split(strings.TrimSpace(e), ";")
		for _, p := range parts[1:] {
			if d, ok := strings.CutPrefix(strings.TrimSpace(p), "dur="); ok {
				if x, err := strconv.ParseFloat(d, 64); err == nil {
					into[strings.TrimSpace(parts[0])] += x
				}
			}
		}
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
