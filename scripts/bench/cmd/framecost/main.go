// Command framecost measures what a screencast frame costs Chromium: N
// virtual browsers, each typing into a focused input at a fixed rate with
// its screencast on, and the CPU time of the Chromium processes divided by
// the frames they sent. Several screencast settings run in turn, in
// rounds, and each is reported as a ratio to the first (the baseline) from
// the same rounds, so a noisy machine moves them all alike.
//
//	framecost -n 8 -rate 5 -window 10s -rounds 3 \
//	  -configs "base=q80;q50=q50;half=q80,s0.5"
//
// A config is name=settings, settings comma separated: qN (JPEG quality),
// sF (frames scaled by F, e.g. s0.5 for half width and height), nN (every
// n-th painted frame), off (no screencast: CPU per key is then reported
// per frame as if each key had painted one). -render-scale runs the whole
// comparison on a runtime that draws pages small (chromium.Config
// .RenderScale); compare it with another run's, alternated.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/procfs"
	"github.com/cloudbrowser-go/cloudbrowser/scripts/bench/internal/engineclient"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium"
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
	off  bool // no screencast: what typing costs the page alone
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
			if f == "off" {
				c.off = true
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
			default:
				return nil, fmt.Errorf("config %q: unknown setting %q (q, s, n)", name, f)
			}
		}
		out = append(out, c)
	}
	return out, nil
}

type result struct {
	frames       int64
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
	configs := flag.String("configs", "base=q80;q50=q50;half=q80,s0.5", "screencast settings to compare; the first is the baseline")
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
	rt, err := chromium.New(ctx, chromium.Config{ExtraFlags: strings.Fields(*flags), RenderScale: *renderScale})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
	var bs []browser.Browser
	for range *n {
		b, err := rt.NewBrowser(ctx, browser.Options{URL: srv.URL, Width: *width, Height: *height})
		if err != nil {
			log.Fatal(err)
		}
		defer b.Close(ctx)
		bs = append(bs, b)
	}

	sums := make([]result, len(cfgs))
	for r := range *rounds {
		for i, c := range cfgs {
			res := run(ctx, bs, c, *rate, *warm, *window)
			log.Printf("round %d %s: %d frames, %.1f ms CPU/frame, %.1f KiB/frame", r+1, c.name, res.frames,
				perFrame(res.cpu, res.frames), float64(res.bytes)/1024/float64(max(1, res.frames)))
			s := &sums[i]
			s.frames += res.frames
			s.bytes += res.bytes
			s.cpu += res.cpu
			s.selfCPU += res.selfCPU
			s.window += res.window
			s.latencies = append(s.latencies, res.latencies...)
		}
	}
	fmt.Println("| config | settings | frames/s | Chromium ms CPU/frame | ÷ baseline | KiB/frame | ÷ baseline | key→frame p50 ms | p95 ms |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	base := sums[0]
	for i, s := range sums {
		slices.Sort(s.latencies)
		cpf, bcpf := perFrame(s.cpu, s.frames), perFrame(base.cpu, base.frames)
		kpf, bkpf := float64(s.bytes)/float64(max(1, s.frames)), float64(base.bytes)/float64(max(1, base.frames))
		fmt.Printf("| %s | %s | %.1f | %.2f | %.2f | %.1f | %.2f | %.1f | %.1f |\n", cfgs[i].name, describe(cfgs[i].opts),
			float64(s.frames)/s.window.Seconds(), cpf, cpf/bcpf, kpf/1024, kpf/bkpf,
			engineclient.Ms(engineclient.Percentile(s.latencies, .5)), engineclient.Ms(engineclient.Percentile(s.latencies, .95)))
	}
}

func describe(o browser.ScreencastOptions) string {
	q := o.Quality
	if q == 0 {
		q = 80
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

// run screencasts every browser with opts, types into each at rate, and
// measures the window after warm.
func run(ctx context.Context, bs []browser.Browser, c config, rate float64, warm, window time.Duration) result {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var counting atomic.Bool
	var frames, bytes atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	period := time.Duration(float64(time.Second) / rate)
	for i, b := range bs {
		// lastKey is when the key not yet shown was sent (0 = none).
		var lastKey atomic.Int64
		wg.Add(2)
		go func() {
			defer wg.Done()
			if c.off {
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
				if c.off && counting.Load() {
					frames.Add(1) // keys stand in for frames
				}
				lastKey.Store(time.Now().UnixNano())
				_ = b.Input(ctx, browser.InputEvent{Type: browser.InputKeyDown, Key: key})
				_ = b.Input(ctx, browser.InputEvent{Type: browser.InputKeyUp, Key: key})
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
	return result{frames: frames.Load(), bytes: bytes.Load(), cpu: c1 - c0, selfCPU: s1 - s0, window: took, latencies: lat}
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

func perFrame(d time.Duration, frames int64) float64 {
	return engineclient.Ms(d) / float64(max(1, frames))
}

func init() { log.SetFlags(0); log.SetOutput(os.Stderr) }
