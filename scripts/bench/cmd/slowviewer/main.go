// Command slowviewer types into a virtual browser at a steady rate, as a
// user on a slow link would (scripts/bench/slow-viewer.sh runs it in a
// network namespace behind a shaped link), and measures how stale the
// screen is: for each key, the time until a frame painted after the key
// arrives. Frames painted earlier that were still on their way do not count,
// which is the point: a queue of old frames is what a viewer on a slow link
// suffers. With -ack it acknowledges each frame as the client engine does
// once it has drawn it, so the worker paces frames (worker/engine/pace.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/scripts/bench/internal/engineclient"
)

func main() {
	public := flag.String("public", "http://127.0.0.1:8080", "public (proxy) URL")
	app := flag.String("app", "typing", "app mount point (an input at 20..320 x 40..80)")
	keys := flag.Int("keys", 100, "keys to type")
	rate := flag.Float64("rate", 5, "keys per second")
	ack := flag.Bool("ack", true, "acknowledge frames as the client engine does")
	label := flag.String("label", "", "row label")
	link := flag.String("link", "auto", `the link hint sent on connecting, in kbit/s: "auto" measures it as the client engine does (its asset's transfer), "0" sends none`)
	flag.Parse()
	if err := run(*public, *app, *keys, *rate, *ack, *label, *link); err != nil {
		log.Fatalf("slowviewer: %v", err)
	}
}

func run(public, app string, keys int, rate float64, ack bool, label, link string) error {
	ctx := context.Background()
	path, cookies, err := engineclient.Open(ctx, public, app)
	if err != nil {
		return err
	}
	pu, err := url.Parse(public)
	if err != nil {
		return err
	}
	kbps := 0
	switch link {
	case "auto":
		if kbps, err = measureLink(ctx, public, path, cookies); err != nil {
			return err
		}
	default:
		if kbps, err = strconv.Atoi(link); err != nil || kbps < 0 {
			return fmt.Errorf("-link: %q is not auto or a number of kbit/s", link)
		}
	}
	wsPath := path
	if kbps > 0 {
		wsPath += "?link=" + strconv.Itoa(kbps)
	}
	connected := time.Now()
	s, err := engineclient.Connect(ctx, pu.Host, wsPath, cookies, nil, ack)
	if err != nil {
		return err
	}
	defer s.Close()
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	first, err := s.WaitShown(wctx, time.Time{})
	cancel()
	if err != nil {
		return fmt.Errorf("first frame: %w", err)
	}
	if err := s.Focus(ctx, 1000, 700); err != nil {
		return err
	}
	time.Sleep(2 * time.Second) // the first frames of the page: not measured

	every := time.Duration(float64(time.Second) / rate)
	sent := make([]time.Time, 0, keys)
	tick := time.NewTicker(every)
	defer tick.Stop()
	start := time.Now()
	for i := range keys {
		select {
		case <-tick.C:
		case <-s.Done():
			return s.Err()
		}
		sent = append(sent, time.Now())
		if err := s.Type(engineclient.TypingKey(i)); err != nil {
			return err
		}
	}
	typing := time.Since(start)
	// Frames painted after the last key may take a while on a slow link.
	wctx, cancel = context.WithTimeout(ctx, 30*time.Second)
	_, _ = s.WaitShown(wctx, sent[len(sent)-1]) // what did not come is counted below
	cancel()

	arrivals := s.Frames(start)
	lat, missing := engineclient.Latencies(sent, arrivals)
	if len(lat) == 0 {
		return fmt.Errorf("no frame painted after any key (%d frames)", len(arrivals))
	}
	slices.Sort(lat)
	pct := func(p float64) float64 { return engineclient.Ms(engineclient.Percentile(lat, p)) }
	var bytes int
	for _, a := range arrivals {
		bytes += a.Bytes
	}
	secs := typing.Seconds()
	fmt.Printf("%-10s ack=%-5v link=%d first_frame_ms=%.0f first_KiB=%.1f keys=%d p50_ms=%.0f p95_ms=%.0f max_ms=%.0f frames_per_s=%.1f KiB_per_s=%.0f no_frame=%d\n",
		label, ack, kbps, engineclient.Ms(first.At.Sub(connected)), float64(first.Bytes)/1024,
		len(sent), pct(.5), pct(.95), pct(1), float64(len(arrivals))/secs, float64(bytes)/1024/secs, missing)
	return nil
}

var engineJS = regexp.MustCompile(`src="([^"]*engine\.js[^"]*)"`)

// measureLink estimates the link as the client engine does on a first
// visit (web/static/engine.js, linkKbps): the engine script's compressed
// bytes after the first packet over the time from its first byte to its
// last; 0 when that took under 20 ms.
func measureLink(ctx context.Context, public, path string, cookies []*http.Cookie) (int, error) {
	get := func(u string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept-Encoding", "gzip")
		for _, c := range cookies {
			req.AddCookie(c)
		}
		return (&http.Transport{DisableCompression: true}).RoundTrip(req)
	}
	resp, err := get(public + path)
	if err != nil {
		return 0, err
	}
	page, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return 0, err
	}
	m := engineJS.FindSubmatch(page)
	if m == nil {
		return 0, fmt.Errorf("no engine.js in %s", path)
	}
	resp, err = get(public + string(m[1]))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	firstByte := time.Now() // the head is in
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return 0, err
	}
	dt := time.Since(firstByte)
	size := n + 300 // and the head, roughly, as transferSize counts it
	if dt < 20*time.Millisecond || size < 2048 {
		return 0, nil
	}
	return int(float64(size-1460) * 8 / (float64(dt) / float64(time.Millisecond))), nil
}
