// Command chromiumdensity measures how many idle virtual browsers a
// Chromium runtime holds: PSS per browser at several browser counts, and
// the cold creation time of a browser (browser context + page + first
// painted frame).
//
//	chromiumdensity -name default -counts 1,10,30
//	chromiumdensity -name dense -renderer-limit 1 -flags "--enable-low-end-device-mode"
//	chromiumdensity -rest   # also: every browser resting, and the wake time
//
// It prints one tab-separated result line per count (and a header with
// -header).
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
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/procfs"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium"
)

// page is a small but realistic app page: styled form, list and a script.
const page = `<!doctype html><html><head><title>Todo</title><style>
body{font:15px system-ui,sans-serif;margin:2em;background:#f6f7f9}
.card{background:#fff;border-radius:8px;box-shadow:0 1px 4px #0002;padding:1em;max-width:40em}
li{padding:.3em 0;border-bottom:1px solid #eee} button{padding:.4em 1em}
</style></head><body><div class=card><h1>Todo</h1>
<form id=f><input id=t placeholder="What needs doing?"> <button>Add</button></form>
<ul id=l></ul></div><script>
const l = document.getElementById('l');
for (let i = 0; i < 20; i++) { const li = document.createElement('li'); li.textContent = 'Item ' + i; l.append(li); }
document.getElementById('f').onsubmit = e => { e.preventDefault(); const li = document.createElement('li'); li.textContent = t.value; l.append(li); t.value = ''; };
</script></body></html>`

func main() {
	name := flag.String("name", "default", "label of this configuration")
	counts := flag.String("counts", "1,10,30", "browser counts to measure at")
	flags := flag.String("flags", "", "extra Chromium flags, space separated")
	rendererLimit := flag.Int("renderer-limit", 0, "--renderer-process-limit (0 = Chromium default)")
	settle := flag.Duration("settle", 3*time.Second, "idle time before each memory sample")
	header := flag.Bool("header", false, "print the column header first")
	rest := flag.Bool("rest", false, "at each count, also measure with every browser resting (SetResting), then wake each and time its first frame")
	flag.Parse()

	var ns []int
	for _, s := range strings.Split(*counts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			log.Fatalf("bad count %q", s)
		}
		ns = append(ns, n)
	}
	slices.Sort(ns)

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, page)
	}))
	defer srv.Close()

	ctx := context.Background()
	rt, err := chromium.New(ctx, chromium.Config{
		RendererProcessLimit: *rendererLimit,
		ExtraFlags:           strings.Fields(*flags),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()

	time.Sleep(*settle)
	base, baseUSS := sample(ctx, rt)

	if *header {
		fmt.Println("config\tbrowsers\tprocesses\tpss_MiB\tpss_base_MiB\tpss_per_browser_MiB\tuss_per_browser_MiB\tcreate_p50_ms\tcreate_p95_ms\twake_p50_ms\twake_p95_ms")
	}
	var open []browser.Browser
	var creates []time.Duration
	for _, n := range ns {
		for len(open) < n {
			b, d, err := create(ctx, rt, srv.URL)
			if err != nil {
				log.Fatalf("browser %d: %v", len(open)+1, err)
			}
			open = append(open, b)
			creates = append(creates, d)
		}
		time.Sleep(*settle)
		report(ctx, rt, *name, n, base, baseUSS, creates, nil)
		if !*rest {
			continue
		}
		for _, b := range open {
			if err := b.SetResting(ctx, true); err != nil {
				log.Fatalf("rest: %v", err)
			}
		}
		time.Sleep(*settle)
		report(ctx, rt, *name+"/resting", n, base, baseUSS, creates, func() []time.Duration { return wakeAll(ctx, open) })
	}
	for _, b := range open {
		b.Close(ctx)
	}
}

// report samples memory with n browsers open and prints one result line;
// wake, if the browsers rest, wakes them after the sample and its times
// fill the last two columns.
func report(ctx context.Context, rt browser.Runtime, name string, n int, base browser.Stats, baseUSS uint64, creates []time.Duration, wake func() []time.Duration) {
	st, uss := sample(ctx, rt)
	var wakes []time.Duration
	if wake != nil {
		wakes = wake()
	}
	per := (float64(st.PSS) - float64(base.PSS)) / float64(n)
	perUSS := (float64(uss) - float64(baseUSS)) / float64(n)
	wake50, wake95 := "-", "-"
	if wakes != nil {
		wake50, wake95 = fmt.Sprintf("%.0f", ms(percentile(wakes, 50))), fmt.Sprintf("%.0f", ms(percentile(wakes, 95)))
	}
	fmt.Printf("%s\t%d\t%d\t%.0f\t%.0f\t%.1f\t%.1f\t%.0f\t%.0f\t%s\t%s\n", name, n, st.Processes,
		mib(float64(st.PSS)), mib(float64(base.PSS)), mib(per), mib(perUSS),
		ms(percentile(creates, 50)), ms(percentile(creates, 95)), wake50, wake95)
}

// wakeAll wakes each resting browser in turn, as a returning viewer would,
// and times SetResting(false) until its first screencast frame.
func wakeAll(ctx context.Context, bs []browser.Browser) []time.Duration {
	var out []time.Duration
	for _, b := range bs {
		d, err := firstFrame(ctx, b, time.Now(), func() error { return b.SetResting(ctx, false) })
		if err != nil {
			log.Fatalf("wake: %v", err)
		}
		out = append(out, d)
	}
	return out
}

// create makes a browser and waits for its first painted frame.
func create(ctx context.Context, rt browser.Runtime, url string) (browser.Browser, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	t0 := time.Now()
	b, err := rt.NewBrowser(ctx, browser.Options{URL: url})
	if err != nil {
		return nil, 0, err
	}
	took, err := firstFrame(ctx, b, t0, nil)
	if err != nil {
		b.Close(ctx)
		return nil, 0, err
	}
	return b, took, nil
}

// firstFrame runs before (if any), then waits for b's next screencast
// frame and returns the time since t0.
func firstFrame(ctx context.Context, b browser.Browser, t0 time.Time, before func() error) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if before != nil {
		if err := before(); err != nil {
			return 0, err
		}
	}
	cctx, stop := context.WithCancel(ctx)
	var took time.Duration
	err := b.Screencast(cctx, browser.ScreencastOptions{}, func(browser.Frame) {
		if took == 0 {
			took = time.Since(t0)
		}
		stop()
	})
	stop()
	if took == 0 {
		return 0, fmt.Errorf("no frame: %w", err)
	}
	return took, nil
}

// sample takes the lowest of a few readings a second apart, to skip
// transient spikes (GC, compositor). Besides the runtime's PSS it reads the
// USS (private memory) of all our descendants: unlike PSS it does not
// depend on other Chromium instances sharing the binary's pages.
func sample(ctx context.Context, rt browser.Runtime) (browser.Stats, uint64) {
	var best browser.Stats
	var bestUSS uint64
	for i := range 3 {
		if i > 0 {
			time.Sleep(time.Second)
		}
		st, err := rt.Stats(ctx)
		if err != nil {
			log.Fatal(err)
		}
		uss := descendantsUSS()
		if i == 0 || st.PSS < best.PSS {
			best = st
		}
		if i == 0 || uss < bestUSS {
			bestUSS = uss
		}
	}
	return best, bestUSS
}

// descendantsUSS sums Private_Clean+Private_Dirty over every descendant of
// this process (the Chromium trees).
func descendantsUSS() uint64 {
	procs, err := procfs.ReadAll()
	if err != nil {
		log.Fatal(err)
	}
	var total uint64
	for _, pid := range procfs.Tree(procs, os.Getpid())[1:] { // [0] is this process
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) >= 2 && (f[0] == "Private_Clean:" || f[0] == "Private_Dirty:") {
				kb, _ := strconv.ParseUint(f[1], 10, 64)
				total += kb << 10
			}
		}
	}
	return total
}

func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, (len(s)*p+99)/100-1)]
}

func mib(b float64) float64      { return b / (1 << 20) }
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func init()                      { log.SetFlags(0); log.SetOutput(os.Stderr) }
