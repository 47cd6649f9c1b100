// Command wsload measures WebSocket echo throughput: N connections each keep
// a window of binary messages in flight against an echo endpoint for a fixed
// duration, and the echoed payload is counted.
//
//	wsload -url ws://127.0.0.1:8080/bench/a/w-bench.x/b/b1/ws -conns 4 -size 65536 -duration 5s
//	wsload -url wss://127.0.0.1:8443/bench/a/w-bench.x/b/b1/ws -insecure   # over TLS
//
// Output is one line of key=value pairs for scripts to parse.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

func main() {
	url := flag.String("url", "", "ws:// URL of an echo endpoint")
	conns := flag.Int("conns", 4, "parallel connections")
	size := flag.Int("size", 64<<10, "message size in bytes")
	window := flag.Int("window", 8, "messages in flight per connection")
	duration := flag.Duration("duration", 5*time.Second, "measurement time")
	label := flag.String("label", "", "label printed with the result")
	insecure := flag.Bool("insecure", false, "wss://: accept any server certificate (test certificates)")
	flag.Parse()
	if *url == "" || *conns < 1 || *size < 1 || *window < 1 {
		flag.Usage()
		os.Exit(2)
	}

	dialer := websocket.Dialer{
		HandshakeTimeout: 5 * time.Second,
		ReadBufferSize:   64 << 10,
		WriteBufferSize:  *size + 16, // one frame per message
	}
	if *insecure {
		dialer.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // benchmarks against test certificates
	}
	cs := make([]*websocket.Conn, *conns)
	for i := range cs {
		c, _, err := dialer.Dial(*url, nil)
		if err != nil {
			log.Fatalf("dial %s: %v", *url, err)
		}
		cs[i] = c
	}

	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()
	var msgs, bytesIn atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for _, c := range cs {
		wg.Add(2)
		credits := make(chan struct{}, *window)
		for range *window {
			credits <- struct{}{}
		}
		go func() { // writer
			defer wg.Done()
			payload := bytes.Repeat([]byte{0x5a}, *size)
			for {
				select {
				case <-ctx.Done():
					return
				case <-credits:
				}
				if err := c.WriteMessage(websocket.BinaryMessage, payload); err != nil {
					if ctx.Err() == nil {
						failed.Store(err)
					}
					return
				}
			}
		}()
		go func() { // reader
			defer wg.Done()
			for {
				_, r, err := c.NextReader()
				if err != nil {
					if ctx.Err() == nil {
						failed.Store(err)
					}
					return
				}
				n, err := io.Copy(io.Discard, r)
				if err != nil {
					if ctx.Err() == nil {
						failed.Store(err)
					}
					return
				}
				if ctx.Err() != nil {
					return
				}
				msgs.Add(1)
				bytesIn.Add(n)
				credits <- struct{}{}
			}
		}()
	}
	<-ctx.Done()
	elapsed := time.Since(start)
	for _, c := range cs {
		c.Close() // unblocks the reader/writer
	}
	wg.Wait()
	if v := failed.Load(); v != nil {
		if err := v.(error); !errors.Is(err, io.EOF) {
			log.Fatalf("connection failed during the run: %v", err)
		}
	}
	secs := elapsed.Seconds()
	fmt.Printf("RESULT label=%s conns=%d size=%d secs=%.2f msgs=%d msgs_per_s=%.0f MB_per_s=%.1f\n",
		*label, *conns, *size, secs, msgs.Load(), float64(msgs.Load())/secs, float64(bytesIn.Load())/secs/1e6)
}
