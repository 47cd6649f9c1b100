// Command inputlatency measures input-to-frame latency of a virtual browser:
// it opens the typing test app as a user would (cookie jar, redirects),
// connects the client-engine WebSocket through the proxy and directly to the
// worker, types into the page and times each key event to the first frame
// after it. It also counts frames/s while typing continuously.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"net/url"
	"os"
	"slices"
	"time"

	"github.com/gorilla/websocket"

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
	path, cookies, err := engineclient.Open(public, app)
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
		lat, f, err := measure(tg.host, path, cookies, n)
		if err != nil {
			return fmt.Errorf("%s: %w", tg.name, err)
		}
		res[tg.name], fps[tg.name] = lat, f
	}
	fmt.Printf("\ninput-to-frame latency, %d key presses per target\n", n)
	fmt.Printf("%-8s %10s %10s %10s %12s %10s\n", "target", "p50_ms", "p95_ms", "fps_typing", "p50_vs_direct", "p95_vs_direct")
	pct := func(l []time.Duration, p float64) float64 {
		return float64(l[int(p*float64(len(l)-1))].Microseconds()) / 1000
	}
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

type msg map[string]any

// hopKey signs the direct run's handshake (-secret-file).
var hopKey []byte

func measure(host, path string, cookies []*http.Cookie, n int) ([]time.Duration, float64, error) {
	h := http.Header{}
	if hopKey != nil {
		// Proxies sign what they relay; straight to a worker, the tool does.
		h.Set(hop.Header, hopsign.Sign(hopKey, http.MethodGet, host, path+"/ws"))
	}
	conn, err := engineclient.Dial(host, path, cookies, h)
	if err != nil {
		return nil, 0, err
	}
	defer conn.Close()
	frames := make(chan time.Time, 1024)
	errc := make(chan error, 1)
	go func() {
		for {
			typ, data, err := conn.ReadMessage()
			if err != nil {
				errc <- err
				close(frames)
				return
			}
			if typ == websocket.BinaryMessage {
				frames <- time.Now()
			} else {
				var m msg
				_ = json.Unmarshal(data, &m)
				if m["t"] == "hello" && m["readOnly"] == true {
					errc <- fmt.Errorf("connected read-only: the cookie did not make us the owner")
				}
			}
		}
	}()
	send := func(m msg) error { m["t"] = "input"; return conn.WriteJSON(m) }
	_ = send(msg{"type": "resize", "width": 1000, "height": 700})
	_ = send(msg{"type": "mousedown", "x": 300, "y": 60, "button": "left", "buttons": 1, "clickCount": 1})
	_ = send(msg{"type": "mouseup", "x": 300, "y": 60, "button": "left", "clickCount": 1})
	drain := func(d time.Duration) {
		t := time.After(d)
		for {
			select {
			case <-frames:
			case <-t:
				return
			}
		}
	}
	drain(time.Second)
	var lat []time.Duration
	for i := 0; i < n; i++ {
		k := string(rune('a' + i%26))
		if i%40 == 39 {
			k = "Backspace" // keep the text short
		}
		t0 := time.Now()
		ev := msg{"type": "keydown", "key": k}
		if len(k) == 1 {
			ev["text"] = k
		}
		if err := send(ev); err != nil {
			return nil, 0, err
		}
		_ = send(msg{"type": "keyup", "key": k})
		select {
		case at, ok := <-frames:
			if !ok {
				return nil, 0, <-errc
			}
			lat = append(lat, at.Sub(t0))
		case err := <-errc:
			return nil, 0, err
		case <-time.After(5 * time.Second):
			return nil, 0, fmt.Errorf("no frame within 5s after key %d", i)
		}
		drain(40 * time.Millisecond) // let the page settle: one key, one measurement
	}
	// Frames per second while typing continuously (a key every 10 ms).
	count, stop := 0, time.After(3*time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
loop:
	for i := 0; ; i++ {
		select {
		case <-tick.C:
			k := string(rune('a' + i%26))
			if i%40 == 39 {
				k = "Backspace"
			}
			_ = send(msg{"type": "keydown", "key": k, "text": k})
			_ = send(msg{"type": "keyup", "key": k})
		case <-frames:
			count++
		case <-stop:
			break loop
		}
	}
	slices.Sort(lat)
	return lat, float64(count) / time.Since(start).Seconds(), nil
}
