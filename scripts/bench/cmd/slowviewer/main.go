// Command slowviewer types into a virtual browser at a steady rate, as a
// user on a slow link would (scripts/bench/slow-viewer.sh runs it in a
// network namespace behind a shaped link), and measures how stale the
// screen is: for each key, the time until a frame painted after the key
// arrives. Frames painted earlier that were still on their way do not count,
// which is the point: a queue of old frames is what a viewer on a slow link
// suffers. With -ack it acknowledges each frame as the client engine does
// once it has drawn it, so the worker paces frames (worker/pace.go).
package main

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"slices"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/scripts/bench/internal/engineclient"
)

func main() {
	public := flag.String("public", "http://127.0.0.1:8080", "public (proxy) URL")
	app := flag.String("app", "typing", "app mount point (an input at 20..320 x 40..80)")
	keys := flag.Int("keys", 100, "keys to type")
	rate := flag.Float64("rate", 5, "keys per second")
	ack := flag.Bool("ack", true, "acknowledge frames as the client engine does")
	label := flag.String("label", "", "row label")
	flag.Parse()
	if err := run(*public, *app, *keys, *rate, *ack, *label); err != nil {
		log.Fatalf("slowviewer: %v", err)
	}
}

// arrival is one frame: when it was painted (the worker's clock, which is
// this machine's) and when it arrived.
type arrival struct {
	painted, at time.Time
	bytes       int
}

func run(public, app string, keys int, rate float64, ack bool, label string) error {
	path, cookies, err := engineclient.Open(public, app)
	if err != nil {
		return err
	}
	host := public[len("http://"):]
	conn, err := engineclient.Dial(host, path, cookies, nil)
	if err != nil {
		return err
	}
	defer conn.Close()

	var wmu sync.Mutex // gorilla allows one writer at a time
	write := func(m map[string]any) error {
		wmu.Lock()
		defer wmu.Unlock()
		return conn.WriteJSON(m)
	}
	var (
		mu       sync.Mutex
		arrivals []arrival
	)
	readErr := make(chan error, 1)
	go func() {
		for {
			typ, data, err := conn.ReadMessage()
			if err != nil {
				readErr <- err
				return
			}
			if typ != websocket.BinaryMessage || len(data) < 4 {
				continue
			}
			n := binary.BigEndian.Uint32(data)
			var hdr struct {
				Seq uint64 `json:"seq"`
				TS  int64  `json:"ts"`
			}
			if int(n)+4 > len(data) || json.Unmarshal(data[4:4+n], &hdr) != nil {
				readErr <- fmt.Errorf("malformed frame")
				return
			}
			mu.Lock()
			arrivals = append(arrivals, arrival{painted: time.UnixMilli(hdr.TS), at: time.Now(), bytes: len(data)})
			mu.Unlock()
			if ack {
				if err := write(map[string]any{"t": "ack", "seq": hdr.Seq}); err != nil {
					readErr <- err
					return
				}
			}
		}
	}()
	input := func(m map[string]any) error { m["t"] = "input"; return write(m) }
	_ = input(map[string]any{"type": "resize", "width": 1000, "height": 700})
	_ = input(map[string]any{"type": "mousedown", "x": 300, "y": 60, "button": "left", "buttons": 1, "clickCount": 1})
	_ = input(map[string]any{"type": "mouseup", "x": 300, "y": 60, "button": "left", "clickCount": 1})
	time.Sleep(2 * time.Second) // the first frames of the page: not measured

	every := time.Duration(float64(time.Second) / rate)
	sent := make([]time.Time, 0, keys)
	tick := time.NewTicker(every)
	defer tick.Stop()
	start := time.Now()
	for i := range keys {
		select {
		case <-tick.C:
		case err := <-readErr:
			return err
		}
		k := string(rune('a' + i%26))
		if i%20 == 19 {
			k = "Backspace" // keep the text short
		}
		sent = append(sent, time.Now())
		ev := map[string]any{"type": "keydown", "key": k}
		if len(k) == 1 {
			ev["text"] = k
		}
		if err := input(ev); err != nil {
			return err
		}
		if err := input(map[string]any{"type": "keyup", "key": k}); err != nil {
			return err
		}
	}
	typing := time.Since(start)
	// Frames painted after the last key may take a while on a slow link.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		done := len(arrivals) > 0 && !arrivals[len(arrivals)-1].painted.Before(sent[len(sent)-1].Truncate(time.Millisecond))
		mu.Unlock()
		if done {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}

	mu.Lock()
	defer mu.Unlock()
	var lat []time.Duration
	missing := 0
	for _, t0 := range sent {
		// The ms resolution of ts: a frame painted in the key's millisecond
		// counts (it may or may not show the key; it is at most 1 ms early).
		i := slices.IndexFunc(arrivals, func(a arrival) bool { return !a.painted.Before(t0.Truncate(time.Millisecond)) })
		if i < 0 {
			missing++
			continue
		}
		lat = append(lat, arrivals[i].at.Sub(t0))
	}
	if len(lat) == 0 {
		return fmt.Errorf("no frame painted after any key (%d frames)", len(arrivals))
	}
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
	var bytes int
	frames := 0
	for _, a := range arrivals {
		if !a.at.Before(start) {
			bytes += a.bytes
			frames++
		}
	}
	secs := typing.Seconds()
	fmt.Printf("%-10s ack=%-5v keys=%d p50_ms=%.0f p95_ms=%.0f max_ms=%.0f frames_per_s=%.1f KiB_per_s=%.0f no_frame=%d\n",
		label, ack, len(sent), pct(.5), pct(.95), pct(1), float64(frames)/secs, float64(bytes)/1024/secs, missing)
	return nil
}
