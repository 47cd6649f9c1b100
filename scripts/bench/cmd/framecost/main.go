// Command framecost measures what a screencast frame costs Chromium: N
// virtual browsers, each typing into a focused input at a fixed rate with
// its screencast on, and the CPU time of the Chromium processes divided by
// the frames they sent. Several screencast settings run in turn, in
// rounds, and each is reported as a ratio to the first (the baseline) from
// the same rounds, so a noisy machine moves them all alike: the ratio of
// the sums and the range of the rounds' own ratios.
//
//	framecost -n 8 -rate 5 -window 10s -rounds 3 \
//	  -configs "base=q80;q50=q50;half=q80,s0.5;shot=shot;clip=clip,fast"
//
// A config is name=settings, settings comma separated: qN (JPEG quality),
// sF (frames scaled by F, e.g. s0.5 for half width and height), nN (every
// n-th painted frame), off (no screencast: CPU per key is then reported
// per frame as if each key had painted one). Instead of the screencast a
// config can capture with Page.captureScreenshot right after each key
// (over a CDP session of its own on the DevTools port): shot (the
// viewport, JPEG of quality qN), clip (only the input's box, the damage a
// worker that knew it would capture), hF (only the viewport's top F of its
// height, e.g. h0.5: a larger damage), fast (optimizeForSpeed), webp (WebP
// instead of JPEG), view (fromSurface false); any of them means a capture
// per key, and its latency is from the key to the image; a browser's next
// key waits for its capture. CPU per key typed is reported too: on a busy
// machine a screencast frame may show several keys. -render-scale
// runs the whole comparison on a runtime that draws pages small
// (chromium.Config.RenderScale); compare it with another run's,
// alternated.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/cdpraw"
	"github.com/cloudbrowser-go/cloudbrowser/internal/procfs"
	"github.com/cloudbrowser-go/cloudbrowser/scripts/bench/internal/engineclient"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium"
	"github.com/gorilla/websocket"
)

// page is a text-heavy page with a focused input at the top, like a form
// someone fills in while reading.
var page = `<!doctype html><html><head><meta charset="utf-8"><title>type</title><style>
body{margin:0;font:16px system-ui,sans-serif;background:#fafafa}
#t{position:fixed;left:20px;top:20px;width:600px;height:36px;font-size:18px}
main{margin:80px 20px;max-width:60em;line-height:1.5;color:#222}
</style></head><body><input id=t autofocus><main>` +
	strings.Repeat("<p>The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs. "+
		"How vexingly quick daft zebras jump. Sphinx of black quartz, judge my vow.</p>", 30) +
	`</main><script>var t=document.getElementById("t");t.focus();
t.addEventListener("input",function(){if(t.value.length>40)t.value=""});</script></body></html>`

type config struct {
	name string
	opts browser.ScreencastOptions
	off  bool  // no screencast: what typing costs the page alone
	shot *shot // a Page.captureScreenshot per key instead of the screencast
}

// shot says how a config captures after each key.
type shot struct {
	webp      bool    // WebP, not JPEG
	clip      bool    // only the input's box
	top       float64 // only the viewport's top fraction (0 = all)
	fast      bool    // optimizeForSpeed
	noSurface bool    // fromSurface false
}

func parseConfigs(s string, w, h int) ([]config, error) {
	var out []config
	for _, part := range strings.Split(s, ";") {
		name, spec, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("config %q: want name=settings", part)
		}
		c := config{name: name}
		for _, f := range strings.Split(spec, ",") {
			f = strings.TrimSpace(f)
			if f == "" {
				continue
			}
			switch f {
			case "off":
				c.off = true
				continue
			case "shot", "clip", "fast", "webp", "view":
				if c.shot == nil {
					c.shot = &shot{}
				}
				c.shot.clip = c.shot.clip || f == "clip"
				c.shot.fast = c.shot.fast || f == "fast"
				c.shot.webp = c.shot.webp || f == "webp"
				c.shot.noSurface = c.shot.noSurface || f == "view"
				continue
			}
			v, err := strconv.ParseFloat(f[1:], 64)
			if err != nil {
				return nil, fmt.Errorf("config %q: setting %q: %w", name, f, err)
			}
			switch f[0] {
			case 'q':
				c.opts.Quality = int(v)
			case 's':
				c.opts.MaxWidth, c.opts.MaxHeight = int(float64(w)*v), int(float64(h)*v)
			case 'n':
				c.opts.EveryNthFrame = int(v)
			case 'h':
				if c.shot == nil {
					c.shot = &shot{}
				}
				c.shot.top = v
			default:
				return nil, fmt.Errorf("config %q: unknown setting %q (q, s, n, h, off, shot, clip, fast, webp, view)", name, f)
			}
		}
		if c.shot != nil && (c.off || c.opts.MaxWidth > 0 || c.opts.EveryNthFrame > 0) {
			return nil, fmt.Errorf("config %q: a capture per key takes no off, s or n", name)
		}
		out = append(out, c)
	}
	return out, nil
}

type result struct {
	frames, keys int64
	bytes        int64
	cpu, selfCPU time.Duration
	window       time.Duration
	latencies    []time.Duration
}

func main() {
	n := flag.Int("n", 8, "browsers, each typing")
	rate := flag.Float64("rate", 5, "keys per second per browser")
	window := flag.Duration("window", 10*time.Second, "measured time per config and round")
	warm := flag.Duration("warm", 2*time.Second, "typing before each window")
	rounds := flag.Int("rounds", 3, "rounds over all configs")
	configs := flag.String("configs", "base=q80;q50=q50;half=q80,s0.5", "screencast (or capture) settings to compare, see the doc comment; the first is the baseline")
	width := flag.Int("width", 1280, "viewport width")
	height := flag.Int("height", 720, "viewport height")
	flags := flag.String("flags", "", "extra Chromium flags, space separated")
	renderScale := flag.Float64("render-scale", 0, "Chromium draws pages at this fraction of their pixels (chromium.Config.RenderScale; 0 = off)")
	flag.Parse()
	cfgs, err := parseConfigs(*configs, *width, *height)
	if err != nil {
		log.Fatal(err)
	}

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, page)
	}))
	defer srv.Close()
	ctx := context.Background()
	shots := slices.ContainsFunc(cfgs, func(c config) bool { return c.shot != nil })
	rt, err := chromium.New(ctx, chromium.Config{ExtraFlags: strings.Fields(*flags), RenderScale: *renderScale, DevTools: shots})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
	var bs []browser.Browser
	var sessions []*cdpSession
	for range *n {
		b, err := rt.NewBrowser(ctx, browser.Options{URL: srv.URL, Width: *width, Height: *height})
		if err != nil {
			log.Fatal(err)
		}
		defer b.Close(ctx)
		bs = append(bs, b)
		if shots {
			s, err := openSession(ctx, b, *width, *height)
			if err != nil {
				log.Fatal(err)
			}
			defer s.close()
			sessions = append(sessions, s)
		}
	}

	all := make([][]result, *rounds) // by round, then config
	for r := range *rounds {
		for _, c := range cfgs {
			res := run(ctx, bs, sessions, c, *rate, *warm, *window)
			log.Printf("round %d %s: %d frames, %.1f ms CPU/frame, %.1f KiB/frame", r+1, c.name, res.frames,
				perFrame(res.cpu, res.frames), float64(res.bytes)/1024/float64(max(1, res.frames)))
			all[r] = append(all[r], res)
		}
	}
	sums := make([]result, len(cfgs))
	for _, round := range all {
		for i, res := range round {
			s := &sums[i]
			s.frames += res.frames
			s.keys += res.keys
			s.bytes += res.bytes
			s.cpu += res.cpu
			s.selfCPU += res.selfCPU
			s.window += res.window
			s.latencies = append(s.latencies, res.latencies...)
		}
	}
	fmt.Println("| config | settings | frames/s | Chromium ms CPU/frame | ÷ baseline | rounds | ms CPU/key | KiB/frame | ÷ baseline | key→frame p50 ms | p95 ms |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|")
	base := sums[0]
	for i, s := range sums {
		slices.Sort(s.latencies)
		cpf, bcpf := perFrame(s.cpu, s.frames), perFrame(base.cpu, base.frames)
		kpf, bkpf := float64(s.bytes)/float64(max(1, s.frames)), float64(base.bytes)/float64(max(1, base.frames))
		// The range of the ratios each round gives on its own.
		lo, hi := 0.0, 0.0
		for r, round := range all {
			x := perFrame(round[i].cpu, round[i].frames) / perFrame(round[0].cpu, round[0].frames)
			if r == 0 || x < lo {
				lo = x
			}
			if r == 0 || x > hi {
				hi = x
			}
		}
		fmt.Printf("| %s | %s | %.1f | %.2f | %.2f | %.2f–%.2f | %.2f | %.1f | %.2f | %.1f | %.1f |\n", cfgs[i].name, describe(cfgs[i]),
			float64(s.frames)/s.window.Seconds(), cpf, cpf/bcpf, lo, hi, perFrame(s.cpu, s.keys), kpf/1024, kpf/bkpf,
			engineclient.Ms(engineclient.Percentile(s.latencies, .5)), engineclient.Ms(engineclient.Percentile(s.latencies, .95)))
	}
}

func describe(c config) string {
	if c.off {
		return "no screencast"
	}
	o := c.opts
	q := o.Quality
	if q == 0 {
		q = 80
	}
	if c.shot != nil {
		s := fmt.Sprintf("captureScreenshot per key, JPEG %d", q)
		if c.shot.webp {
			s = fmt.Sprintf("captureScreenshot per key, WebP %d", q)
		}
		if c.shot.clip {
			s += ", the input's box"
		} else if c.shot.top > 0 {
			s += fmt.Sprintf(", the top %.0f%% of the viewport", c.shot.top*100)
		}
		if c.shot.fast {
			s += ", optimizeForSpeed"
		}
		if c.shot.noSurface {
			s += ", fromSurface false"
		}
		return s
	}
	s := fmt.Sprintf("quality %d", q)
	if o.MaxWidth > 0 {
		s += fmt.Sprintf(", ≤%d×%d", o.MaxWidth, o.MaxHeight)
	}
	if o.EveryNthFrame > 1 {
		s += fmt.Sprintf(", every %d", o.EveryNthFrame)
	}
	return s
}

// run screencasts every browser with opts (or captures after each key,
// over its session), types into each at rate, and measures the window
// after warm.
func run(ctx context.Context, bs []browser.Browser, sessions []*cdpSession, c config, rate float64, warm, window time.Duration) result {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var counting atomic.Bool
	var frames, bytes, keys atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	var failed sync.Once
	period := time.Duration(float64(time.Second) / rate)
	for i, b := range bs {
		// lastKey is when the key not yet shown was sent (0 = none).
		var lastKey atomic.Int64
		wg.Add(2)
		go func() {
			defer wg.Done()
			if c.off || c.shot != nil {
				return
			}
			_ = b.Screencast(ctx, c.opts, func(f browser.Frame) {
				if !counting.Load() {
					return
				}
				frames.Add(1)
				bytes.Add(int64(len(f.Data)))
				if k := lastKey.Swap(0); k != 0 {
					mu.Lock()
					lat = append(lat, time.Since(time.Unix(0, k)))
					mu.Unlock()
				}
			})
		}()
		go func() {
			defer wg.Done()
			// Spread the browsers over the period.
			select {
			case <-time.After(period * time.Duration(i) / time.Duration(len(bs))):
			case <-ctx.Done():
				return
			}
			tick := time.NewTicker(period)
			defer tick.Stop()
			for k := 0; ; k++ {
				key := string(rune('a' + k%26))
				if counting.Load() {
					keys.Add(1)
					if c.off {
						frames.Add(1) // keys stand in for frames
					}
				}
				sent := time.Now()
				lastKey.Store(sent.UnixNano())
				_ = b.Input(ctx, browser.InputEvent{Type: browser.InputKeyDown, Key: key})
				_ = b.Input(ctx, browser.InputEvent{Type: browser.InputKeyUp, Key: key})
				if c.shot != nil {
					// Input returns once the renderer has handled the key;
					// a capture from the surface draws a new frame first.
					data, err := sessions[i].capture(c.opts.Quality, *c.shot)
					switch {
					case err != nil && ctx.Err() == nil:
						failed.Do(func() { log.Printf("%s: %v", c.name, err) })
					case err == nil && counting.Load():
						frames.Add(1)
						bytes.Add(int64(len(data)))
						mu.Lock()
						lat = append(lat, time.Since(sent))
						mu.Unlock()
					}
				}
				select {
				case <-tick.C:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	time.Sleep(warm)
	c0, s0 := cpu()
	t0 := time.Now()
	counting.Store(true)
	time.Sleep(window)
	counting.Store(false)
	c1, s1 := cpu()
	took := time.Since(t0)
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	return result{frames: frames.Load(), keys: keys.Load(), bytes: bytes.Load(), cpu: c1 - c0, selfCPU: s1 - s0, window: took, latencies: lat}
}

// cpu returns the CPU time of this process's descendants (Chromium) and of
// this process.
func cpu() (children, self time.Duration) {
	procs, err := procfs.ReadAll()
	if err != nil {
		log.Fatal(err)
	}
	tick := time.Second / procfs.TicksPerSecond
	tree := procfs.Tree(procs, os.Getpid())
	for i, pid := range tree {
		st := procs[pid]
		d := time.Duration(st.UTime+st.STime) * tick
		if i == 0 {
			self = d
		} else {
			children += d
		}
	}
	return children, self
}

// cdpSession is a CDP session of its own on a browser's page, over
// Chromium's DevTools port, for the captures (the browser.Browser API has
// no clip or optimizeForSpeed). It enables no domain: it costs the page
// nothing between commands.
type cdpSession struct {
	cdp     cdpraw.Conn
	session string
	box     map[string]float64 // the input's box, CSS pixels
	// width and height of the viewport, CSS pixels
	width, height float64
}

func openSession(ctx context.Context, b browser.Browser, width, height int) (*cdpSession, error) {
	dt, ok := b.(browser.DevTools)
	if !ok {
		return nil, fmt.Errorf("the browser has no DevTools endpoint")
	}
	e, ok := dt.DevTools()
	if !ok {
		return nil, fmt.Errorf("the browser's DevTools port is not open")
	}
	var r [4]float64
	// The page may still be loading.
	box := `new Promise(function f(ok){const t=document.getElementById("t");if(!t)return setTimeout(f,50,ok);
const r=t.getBoundingClientRect();ok([r.x,r.y,r.width,r.height])})`
	if err := b.Evaluate(ctx, box, &r); err != nil {
		return nil, err
	}
	ws, _, err := websocket.DefaultDialer.DialContext(ctx, e.URL, nil)
	if err != nil {
		return nil, fmt.Errorf("devtools: %w", err)
	}
	ws.SetReadLimit(64 << 20)
	// 4 pixels more each side: the focus ring.
	s := &cdpSession{cdp: cdpraw.Conn{WS: ws, Timeout: 30 * time.Second}, box: map[string]float64{"x": r[0] - 4, "y": r[1] - 4, "width": r[2] + 8, "height": r[3] + 8, "scale": 1},
		width: float64(width), height: float64(height)}
	var a struct {
		SessionID string `json:"sessionId"`
	}
	if err := s.call("Target.attachToTarget", map[string]any{"targetId": e.Page, "flatten": true}, &a); err != nil {
		ws.Close()
		return nil, err
	}
	s.session = a.SessionID
	return s, nil
}

func (s *cdpSession) close() { s.cdp.WS.Close() }

// capture takes one screenshot as sh says.
func (s *cdpSession) capture(quality int, sh shot) ([]byte, error) {
	if quality == 0 {
		quality = 80
	}
	p := map[string]any{"format": "jpeg", "quality": quality}
	if sh.webp {
		p["format"] = "webp"
	}
	switch {
	case sh.clip:
		p["clip"] = s.box
	case sh.top > 0:
		p["clip"] = map[string]float64{"x": 0, "y": 0, "width": s.width, "height": math.Round(s.height * sh.top), "scale": 1}
	}
	if sh.fast {
		p["optimizeForSpeed"] = true
	}
	if sh.noSurface {
		p["fromSurface"] = false
	}
	var res struct {
		Data []byte `json:"data"` // base64 in the JSON
	}
	err := s.call("Page.captureScreenshot", p, &res)
	return res.Data, err
}

// call sends one command to the page and reads up to its answer.
func (s *cdpSession) call(method string, params, result any) error {
	return s.cdp.Call(s.session, method, params, result)
}

func perFrame(d time.Duration, frames int64) float64 {
	return engineclient.Ms(d) / float64(max(1, frames))
}

func init() { log.SetFlags(0); log.SetOutput(os.Stderr) }
