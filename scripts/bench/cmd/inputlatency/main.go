// Command inputlatency measures input-to-frame latency of a virtual browser:
// it opens the typing test app as a user would (cookie jar, redirects),
// connects the client-engine WebSocket through the proxy and directly to the
// worker, types into the page and times each key event to the first frame
// that shows it (engineclient.Frame.Shows: with one key in flight, the first
// frame painted after it). It also counts frames/s while typing continuously.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/http"
	"net/url"
	"os"
	"slices"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/hop"
	"github.com/cloudbrowser-go/cloudbrowser/scripts/bench/internal/engineclient"
	"github.com/cloudbrowser-go/cloudbrowser/scripts/bench/internal/hopsign"
)

func main() {
	public := flag.String("public", "http://127.0.0.1:8080", "public (proxy) URL")
	worker := flag.String("worker", "", "the worker's HTTP address (host:port) for the direct run")
	app := flag.String("app", "typing", "app mount point (an input at 20..320 x 40..80)")
	n := flag.Int("n", 200, "key presses per run")
	secretFile := flag.String("secret-file", "", "the cluster secret: the direct run signs its handshake as a proxy would (workers refuse unsigned requests)")
	flag.BoolVar(&tiles, "tiles", false, `ask for tile updates ({"t":"caps","tiles":true}): a key's frame is then the worker's update`)
	flag.Parse()
	if *secretFile != "" {
		var err error
		if hopKey, err = hopsign.Key(*secretFile); err != nil {
			log.Fatal(err)
		}
	}
	if err := run(*public, *worker, *app, *n); err != nil {
		fmt.Fprintln(os.Stderr, "inputlatency:", err)
		os.Exit(1)
	}
}

func run(public, worker, app string, n int) error {
	ctx := context.Background()
	path, cookies, err := engineclient.Open(ctx, public, app)
	if err != nil {
		return err
	}
	pu, _ := url.Parse(public)
	type target struct{ name, host string }
	targets := []target{{"proxy", pu.Host}}
	if worker != "" {
		targets = append(targets, target{"direct", worker})
	}
	res := map[string][]time.Duration{}
	fps := map[string]float64{}
	for _, tg := range targets {
		lat, f, err := measure(ctx, tg.host, path, cookies, n)
		if err != nil {
			return fmt.Errorf("%s: %w", tg.name, err)
		}
		res[tg.name], fps[tg.name] = lat, f
	}
	fmt.Printf("\ninput-to-frame latency, %d key presses per target\n", n)
	fmt.Printf("%-8s %10s %10s %10s %12s %10s\n", "target", "p50_ms", "p95_ms", "fps_typing", "p50_vs_direct", "p95_vs_direct")
	pct := func(l []time.Duration, p float64) float64 { return engineclient.Ms(engineclient.Percentile(l, p)) }
	for _, tg := range targets {
		l := res[tg.name]
		r50, r95 := "-", "-"
		if d, ok := res["direct"]; ok {
			r50 = fmt.Sprintf("%.2f", pct(l, .5)/pct(d, .5))
			r95 = fmt.Sprintf("%.2f", pct(l, .95)/pct(d, .95))
		}
		fmt.Printf("%-8s %10.2f %10.2f %10.1f %12s %10s\n", tg.name, pct(l, .5), pct(l, .95), fps[tg.name], r50, r95)
	}
	return nil
}

// hopKey signs the direct run's handshake (-secret-file).
var hopKey []byte

// tiles: the client asks for tile updates (-tiles).
var tiles bool

func measure(ctx context.Context, host, path string, cookies []*http.Cookie, n int) ([]time.Duration, float64, error) {
	h := http.Header{}
	if hopKey != nil {
		// Proxies sign what they relay; straight to a worker, the tool does.
		h.Set(hop.Header, hopsign.Sign(hopKey, http.MethodGet, host, path+"/ws"))
	}
	// No acknowledgements: frames are not paced (as before pacing existed;
	// the figures stay comparable).
	s, err := engineclient.Connect(ctx, host, path, cookies, h, false)
	if err != nil {
		return nil, 0, err
	}
	defer s.Close()
	if tiles {
		if err := s.AskTiles(); err != nil {
			return nil, 0, err
		}
	}
	if err := s.Focus(ctx, 1000, 700); err != nil {
		return nil, 0, err
	}
	time.Sleep(time.Second)
	var lat []time.Duration
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if err := s.Type(engineclient.TypingKey(i)); err != nil {
			return nil, 0, err
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		f, err := s.WaitShown(wctx, t0)
		cancel()
		if err != nil {
			return nil, 0, fmt.Errorf("no frame after key %d: %w", i, err)
		}
		lat = append(lat, f.At.Sub(t0))
		time.Sleep(40 * time.Millisecond) // let the page settle: one key, one measurement
	}
	// Frames per second while typing continuously (a key every 10 ms).
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	for i := 0; time.Since(start) < 3*time.Second; i++ {
		select {
		case <-tick.C:
			if err := s.Type(engineclient.TypingKey(i)); err != nil {
				return nil, 0, err
			}
		case <-s.Done():
			return nil, 0, s.Err()
		}
	}
	fps := float64(len(s.Frames(start))) / time.Since(start).Seconds()
	slices.Sort(lat)
	return lat, fps, nil
}
