// Command viewerbytes measures what one viewer of a virtual browser
// receives: bytes and frames per second while the page is idle, while the
// user types and while they scroll. It opens the reading benchmark app as a
// user would (cookie jar, redirects) and speaks the client engine's
// protocol over the proxy.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/scripts/bench/internal/engineclient"
)

func main() {
	public := flag.String("public", "http://127.0.0.1:8080", "public (proxy) URL")
	app := flag.String("app", "reading", "app mount point (an input at 20..320 x 40..80, a long page)")
	phase := flag.Duration("phase", 10*time.Second, "length of each measured phase")
	width := flag.Int("width", 1280, "the viewer's window width")
	height := flag.Int("height", 720, "the viewer's window height")
	focus := flag.Bool("focus", true, "click into the input first (its caret blinks while idle)")
	scale := flag.Float64("scale", 1, "the viewer's device pixel ratio (2: a HiDPI screen)")
	tiles := flag.Bool("tiles", false, `say the engine composes tile updates ({"t":"caps","tiles":true}; the worker sends them with --frame-tiles)`)
	flag.IntVar(&workerPid, "worker-pid", 0, "the worker process, whose CPU time (its own, not Chromium's) per frame is reported per phase (0 = not measured)")
	flag.Parse()
	if err := run(*public, *app, *phase, *width, *height, *scale, *focus, *tiles); err != nil {
		log.Fatalf("viewerbytes: %v", err)
	}
}

// workerPid is the worker process measured (-worker-pid).
var workerPid int

// cpuTicks is the worker's user+system CPU time in clock ticks (100 a
// second on Linux), from /proc; 0 if not measured.
func cpuTicks() int64 {
	if workerPid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", workerPid))
	if err != nil {
		return 0
	}
	// Fields after the command's closing parenthesis: state is the 3rd
	// field, utime the 14th, stime the 15th.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return u + s
}

// counter counts what the socket delivers.
type counter struct {
	frames, frameBytes, otherBytes atomic.Int64
}

func (c *counter) snapshot() (frames, frameBytes, otherBytes int64) {
	return c.frames.Load(), c.frameBytes.Load(), c.otherBytes.Load()
}

func run(public, app string, phase time.Duration, width, height int, scale float64, focus, tiles bool) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	path, cookies, err := engineclient.Open(ctx, public, app)
	if err != nil {
		return err
	}
	pu, err := url.Parse(public)
	if err != nil {
		return err
	}
	conn, err := engineclient.Dial(ctx, pu.Host, path, cookies, nil)
	if err != nil {
		return err
	}
	defer conn.Close()
	if tiles {
		if err := conn.WriteJSON(engineclient.TilesCaps()); err != nil {
			return err
		}
	}
	var c counter
	readErr := make(chan error, 1)
	go func() {
		for {
			typ, data, err := conn.ReadMessage()
			if err != nil {
				readErr <- err
				return
			}
			if typ == websocket.BinaryMessage {
				c.frames.Add(1)
				c.frameBytes.Add(int64(len(data)))
				continue
			}
			c.otherBytes.Add(int64(len(data)))
			if err := engineclient.CheckHello(data); err != nil {
				readErr <- err
				return
			}
		}
	}()
	send := func(m map[string]any) error { m["t"] = "input"; return conn.WriteJSON(m) }
	if err := send(map[string]any{"type": "resize", "width": width, "height": height, "scale": scale}); err != nil {
		return err
	}
	if focus {
		// After the first frames: a click sent before the page is shown
		// may be lost (engineclient.Session.Focus), and typing would then
		// paint nothing.
		time.Sleep(2 * time.Second)
		_ = send(map[string]any{"type": "mousedown", "x": 300, "y": 60, "button": "left", "buttons": 1, "clickCount": 1})
		_ = send(map[string]any{"type": "mouseup", "x": 300, "y": 60, "button": "left", "clickCount": 1})
	}

	type result struct {
		name                        string
		secs                        float64
		frames, frameBytes, textLen int64
		cpuTicks                    int64
	}
	var results []result
	// every runs act every interval for one phase and records the counts.
	measure := func(name string, interval time.Duration, act func(i int) error) error {
		f0, b0, o0 := c.snapshot()
		t0, cpu0 := time.Now(), cpuTicks()
		deadline := time.After(phase)
		var tick <-chan time.Time
		if act != nil {
			tk := time.NewTicker(interval)
			defer tk.Stop()
			tick = tk.C
		}
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case err := <-readErr:
				return err
			case <-deadline:
				f1, b1, o1 := c.snapshot()
				results = append(results, result{name, time.Since(t0).Seconds(), f1 - f0, b1 - b0, o1 - o0, cpuTicks() - cpu0})
				return nil
			case <-tick:
				if err := act(i); err != nil {
					return err
				}
			}
		}
	}
	time.Sleep(3 * time.Second) // the first frames and the page settle
	if err := measure("idle", 0, nil); err != nil {
		return err
	}
	if err := measure("typing (5 keys/s)", 200*time.Millisecond, func(i int) error {
		down, up := engineclient.KeyEvents(engineclient.TypingKey(i))
		if err := conn.WriteJSON(down); err != nil {
			return err
		}
		return conn.WriteJSON(up)
	}); err != nil {
		return err
	}
	if err := measure("scrolling (5 wheel/s)", 200*time.Millisecond, func(i int) error {
		dy := 120
		if (i/20)%2 == 1 {
			dy = -120 // down, then back up: the page never runs out
		}
		return send(map[string]any{"type": "wheel", "x": width / 2, "y": height / 2, "deltaX": 0, "deltaY": dy})
	}); err != nil {
		return err
	}
	if err := measure("idle again", 0, nil); err != nil {
		return err
	}
	kind := "whole frames"
	if tiles {
		kind = "tile updates if the worker sends them"
	}
	fmt.Printf("\nbytes to one viewer, %dx%d window at scale %g, JPEG screencast (worker default quality 80), %v phases, %s\n", width, height, scale, phase, kind)
	fmt.Printf("%-22s %10s %10s %12s %12s %14s\n", "phase", "frames/s", "KiB/s", "KiB/frame", "other_B/s", "worker_ms/frame")
	for _, r := range results {
		perFrame := 0.0
		if r.frames > 0 {
			perFrame = float64(r.frameBytes) / float64(r.frames) / 1024
		}
		cpu := "-"
		if workerPid != 0 && r.frames > 0 {
			cpu = fmt.Sprintf("%.1f", float64(r.cpuTicks)*10/float64(r.frames)) // 10 ms a tick
		}
		fmt.Printf("%-22s %10.2f %10.1f %12.1f %12.0f %14s\n", r.name, float64(r.frames)/r.secs,
			float64(r.frameBytes)/r.secs/1024, perFrame, float64(r.textLen)/r.secs, cpu)
	}
	return nil
}
