// Command poollease measures browser pools on real Chromium, in one run:
//
//   - lease latency from a warm specific pool (a free browser already
//     logged in and on the search page) vs cold creation with the same
//     initialization sequence (a new browser context + login), p50/p95 and
//     the ratio of the medians;
//   - lease/return cycles per second through a pool with a back sequence
//     (each return navigates back to the search page before the browser is
//     free again).
//
// The site is served by the program: a login form that sets a session
// cookie and a search page behind it.
//
//	poollease -cold 20 -warm 200 -browsers 2 -clients 4 -duration 10s
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/sequence"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium"
	"github.com/cloudbrowser-go/cloudbrowser/worker/pool"
	"github.com/cloudbrowser-go/cloudbrowser/worker/seqrun"
)

const password = "bench-password"

// site: GET/POST /login, GET /search (needs the session cookie).
func site() http.Handler {
	var mu sync.Mutex
	sessions := map[string]bool{}
	mux := http.NewServeMux()
	page := func(w http.ResponseWriter, title, body string) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><title>%s</title><style>body{font:15px sans-serif;margin:2em}</style><body>%s</body>`, title, body)
	}
	mux.HandleFunc("GET /login", func(w http.ResponseWriter, r *http.Request) {
		page(w, "Login", `<form method=post action=/login><input id=user name=user> <input id=pass name=pass type=password> <button id=go>Log in</button></form>`)
	})
	mux.HandleFunc("POST /login", func(w http.ResponseWriter, r *http.Request) {
		if r.FormValue("user") != "demo" || r.FormValue("pass") != password {
			page(w, "Denied", "denied")
			return
		}
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		sid := hex.EncodeToString(b)
		mu.Lock()
		sessions[sid] = true
		mu.Unlock()
		http.SetCookie(w, &http.Cookie{Name: "sid", Value: sid, Path: "/"})
		http.Redirect(w, r, "/search", http.StatusSeeOther)
	})
	mux.HandleFunc("GET /search", func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie("sid")
		mu.Lock()
		ok := err == nil && sessions[c.Value]
		mu.Unlock()
		if !ok {
			http.Redirect(w, r, "/login", http.StatusSeeOther)
			return
		}
		page(w, "Search", `<p>logged in</p><form action=/results><input id=q name=q> <button>Search</button></form>`)
	})
	return mux
}

func main() {
	cold := flag.Int("cold", 20, "cold leases (new browser + init sequence) to time")
	warm := flag.Int("warm", 200, "warm leases to time")
	browsers := flag.Int("browsers", 2, "pool size for the throughput test")
	clients := flag.Int("clients", 0, "concurrent clients in the throughput test (0 = one per browser; more get\n\"maximum number of browsers in the specific pool\" while all are leased)")
	duration := flag.Duration("duration", 10*time.Second, "length of the throughput test")
	verbose := flag.Bool("v", false, "log pool events")
	flag.Parse()
	if *clients <= 0 {
		*clients = *browsers
	}

	logger := zerolog.Nop()
	if *verbose {
		logger = zerolog.New(zerolog.NewConsoleWriter(func(w *zerolog.ConsoleWriter) { w.Out = os.Stderr })).Level(zerolog.InfoLevel)
	}
	srv := httptest.NewServer(site())
	defer srv.Close()
	ctx := context.Background()
	rt, err := chromium.New(ctx, chromium.Config{Logger: logger})
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
	m, err := pool.NewManager(pool.ManagerConfig{
		Types:   map[string]pool.BrowserType{pool.TypeChromium: {Factory: rt, Max: 2 + *browsers}},
		Runner:  &seqrun.Runner{Secrets: sequence.MapSecrets(map[string]string{"PW": password})},
		Logger:  logger,
		Options: func(string) (browser.Options, error) { return browser.Options{}, nil },
	})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close(context.Background())

	init := sequence.Sequence{
		sequence.Navigate(srv.URL + "/login"),
		sequence.Type("#user", "demo"),
		sequence.Type("#pass", "${secret:PW}"),
		sequence.Click("#go"),
		sequence.WaitURL("/search"),
		sequence.WaitVisible("#q"),
	}
	back := sequence.Sequence{sequence.Navigate(srv.URL + "/search"), sequence.WaitVisible("#q")}
	// Cold: no free browser, no back sequence: every lease makes a browser
	// and logs in; every return destroys it.
	coldCfg := &pool.Config{Enabled: true, MinSize: 0, MaxSize: 1, Init: init}
	warmCfg := &pool.Config{Enabled: true, MinSize: 1, MaxSize: 1, Init: init, Back: back}
	cycleCfg := &pool.Config{Enabled: true, MinSize: *browsers, MaxSize: *browsers, Init: init, Back: back}

	// waitPool waits until app's pool has no background work.
	waitPool := func(app string, free int) {
		for {
			for _, p := range m.Stats().Pools {
				if p.App == app && p.Busy == 0 && p.Free == free && p.Locked == 0 {
					return
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	lease := func(app string, cfg *pool.Config) (*pool.Lease, time.Duration) {
		start := time.Now()
		l, err := m.Lease(ctx, app, cfg)
		took := time.Since(start)
		if err != nil {
			log.Fatalf("lease %s: %v", app, err)
		}
		return l, took
	}

	// Warm the pools up (and Chromium itself) before timing.
	l, _ := lease("warm", warmCfg)
	l.Return()
	waitPool("warm", 1)
	l, _ = lease("cold", coldCfg)
	l.Return()
	waitPool("cold", 0)

	var colds, warms []time.Duration
	// Interleaved, so both see the same machine state.
	for i := 0; i < max(*cold, *warm); i++ {
		if i < *cold {
			l, took := lease("cold", coldCfg)
			colds = append(colds, took)
			l.Return()
			waitPool("cold", 0)
		}
		if i < *warm {
			l, took := lease("warm", warmCfg)
			warms = append(warms, took)
			l.Return()
			waitPool("warm", 1)
		}
	}

	// Throughput: clients lease, read the title, return; the next lease
	// of a browser waits for its back sequence.
	l, _ = lease("cycle", cycleCfg)
	l.Return()
	waitPool("cycle", *browsers)
	var cycles atomic.Int64
	var wg sync.WaitGroup
	tctx, cancel := context.WithTimeout(ctx, *duration)
	start := time.Now()
	for range *clients {
		wg.Go(func() {
			for tctx.Err() == nil {
				l, err := m.Lease(tctx, "cycle", cycleCfg)
				if errors.Is(err, pool.ErrPoolMax) {
					time.Sleep(time.Millisecond) // all leased: the document's error, retry
					continue
				}
				if err != nil {
					if tctx.Err() == nil {
						log.Fatalf("lease: %v", err)
					}
					continue
				}
				var title string
				if err := l.Browser().Evaluate(ctx, "document.title", &title); err != nil || title != "Search" {
					log.Fatalf("leased browser not on the search page: %q %v", title, err)
				}
				l.Return()
				cycles.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cancel()

	st := m.Stats()
	fmt.Printf("cold lease (new browser + init, n=%d)\tp50 %s\tp95 %s\n", len(colds), ms(pct(colds, 50)), ms(pct(colds, 95)))
	fmt.Printf("warm lease (free browser, n=%d)\tp50 %s\tp95 %s\n", len(warms), ms(pct(warms, 50)), ms(pct(warms, 95)))
	fmt.Printf("cold/warm p50 ratio\t%.0fx\n", float64(pct(colds, 50))/float64(max(pct(warms, 50), time.Nanosecond)))
	fmt.Printf("lease/return cycles with back sequence (%d browsers, %d clients, %s)\t%.1f cycles/s\n",
		*browsers, *clients, elapsed.Round(time.Millisecond), float64(cycles.Load())/elapsed.Seconds())
	fmt.Printf("sequence failures %v, lease failures %v\n", st.SequenceFailures, st.LeaseFailures)
}

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)*p/100]
}

func ms(d time.Duration) string {
	if d < time.Millisecond {
		return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}
