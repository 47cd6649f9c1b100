// Command tlshs measures new TLS connections per second: each of N
// connections in a loop dials, completes a TLS handshake, sends one
// request with Connection: close, reads the answer and closes. Without
// -resume every handshake is a full one (no session cache); with it, the
// client resumes the session it was given (tickets).
//
//	tlshs -addr 127.0.0.1:8443 -path /bench/a/w-bench.x/b/b1/r -conns 8 -duration 5s
//
// Output is one line of key=value pairs for scripts to parse. The server
// certificate is not checked (test certificates): what is measured is the
// server's cost, the client's verification aside.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	addr := flag.String("addr", "", "host:port of a TLS server")
	path := flag.String("path", "/", "request path")
	conns := flag.Int("conns", 8, "connections made concurrently")
	duration := flag.Duration("duration", 5*time.Second, "measurement time")
	resume := flag.Bool("resume", false, "resume sessions (TLS session tickets) instead of full handshakes")
	x25519 := flag.Bool("x25519", false, "offer X25519 only (default: Go's, with the X25519MLKEM768 hybrid first, as browsers)")
	label := flag.String("label", "", "label printed with the result")
	flag.Parse()
	if *addr == "" || *conns < 1 {
		flag.Usage()
		log.Fatal("-addr is required")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()
	// A dial or read can time out on the deadline a moment before ctx
	// says it ended: that is the end of the run, not a failure.
	end, _ := ctx.Deadline()
	over := func() bool { return ctx.Err() != nil || !time.Now().Before(end) }
	var (
		done, failed atomic.Int64
		mu           sync.Mutex
		lat          []time.Duration
		firstErr     atomic.Value
		group        atomic.Value
		resumed      atomic.Int64
		wg           sync.WaitGroup
	)
	start := time.Now()
	for range *conns {
		wg.Go(func() {
			cfg := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}} //nolint:gosec // see above
			if *resume {
				cfg.ClientSessionCache = tls.NewLRUClientSessionCache(4)
			}
			if *x25519 {
				cfg.CurvePreferences = []tls.CurveID{tls.X25519}
			}
			var mine []time.Duration
			for !over() {
				t0 := time.Now()
				did, err := exchange(ctx, *addr, *path, cfg)
				if err != nil {
					if !over() {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err)
					}
					continue
				}
				mine = append(mine, time.Since(t0))
				done.Add(1)
				group.Store(did.CurveID.String())
				if did.DidResume {
					resumed.Add(1)
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	if v := firstErr.Load(); v != nil && failed.Load() > done.Load()/100 {
		log.Fatalf("%d of %d exchanges failed: %v", failed.Load(), failed.Load()+done.Load(), v)
	}
	slices.Sort(lat)
	q := func(p float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	g, _ := group.Load().(string)
	fmt.Printf("RESULT label=%s conns=%d secs=%.2f handshakes=%d hs_per_s=%.0f p50_ms=%.2f p99_ms=%.2f resumed=%d failed=%d group=%s\n",
		*label, *conns, secs, done.Load(), float64(done.Load())/secs, q(0.50), q(0.99), resumed.Load(), failed.Load(), g)
}

// exchange is one connection: handshake, one request, its answer.
func exchange(ctx context.Context, addr, path string, cfg *tls.Config) (tls.ConnectionState, error) {
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(10 * time.Second))
	c := tls.Client(raw, cfg)
	if err := c.HandshakeContext(ctx); err != nil {
		return tls.ConnectionState{}, err
	}
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: "+addr+"\r\nConnection: close\r\n\r\n"); err != nil {
		return tls.ConnectionState{}, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %s", resp.Status)
	}
	// The session ticket of TLS 1.3 arrives after the handshake, read with
	// the answer: the next dial can resume it.
	return c.ConnectionState(), err
}
