// Command benchproxy runs proxy.New with a static Router that sends every
// request to one worker, isolating the proxy's own cost in benchmarks.
//
//	benchproxy -addr 127.0.0.1:0 -addr-file /tmp/p.addr -worker 127.0.0.1:9001
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/handoff"
	"github.com/cloudbrowser-go/cloudbrowser/internal/hop"
	"github.com/cloudbrowser-go/cloudbrowser/internal/tlsfront"
	"github.com/cloudbrowser-go/cloudbrowser/proxy"
	"github.com/cloudbrowser-go/cloudbrowser/scripts/bench/internal/addrfile"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address (SO_REUSEPORT)")
	addrFile := flag.String("addr-file", "", "write the bound address to this file once listening")
	worker := flag.String("worker", "", "worker host:port")
	cache := flag.Bool("cache", true, "wrap the router in a CachingRouter (as in production)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile here until exit")
	memProfile := flag.String("memprofile", "", "write an allocation profile here at exit (go tool pprof -sample_index=alloc_space)")
	signHops := flag.Bool("hop", true, "sign every relayed request (X-CB-Hop), as in production")
	edge := flag.Bool("edge", true, "serve through the event-loop edge (as in production); false: net/http alone")
	edgeLoops := flag.Int("edge-loops", 0, "the edge's event loops (0: one per CPU)")
	handoffPath := flag.String("handoff", "", "the worker's handoff socket (benchworker -handoff): WebSockets are handed to it, not relayed")
	tlsCert := flag.String("tls-cert", "", "serve HTTPS with this certificate chain (as cloudbrowser --tls-cert; WebSockets are then relayed, never handed off)")
	tlsKey := flag.String("tls-key", "", "the key of -tls-cert")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	if *worker == "" {
		log.Fatal("-worker is required")
	}

	to := proxy.Route{WorkerID: "w-bench", Addr: *worker}
	if *handoffPath != "" {
		to.Handoff, to.Host = *handoffPath, handoff.HostID()
	}
	var router proxy.Router = proxy.StaticRouter{To: to}
	if *cache {
		router = proxy.NewCachingRouter(router, time.Minute)
	}
	logger := zerolog.New(os.Stderr).Level(zerolog.WarnLevel).With().Timestamp().Logger()
	cfg := proxy.Config{Router: router, Logger: logger, DisableEdge: !*edge, EdgeLoops: *edgeLoops}
	if *tlsCert != "" {
		store, err := tlsfront.New(tlsfront.Files{Cert: *tlsCert, Key: *tlsKey}, logger)
		if err != nil {
			log.Fatal(err)
		}
		cfg.TLS = store.ServerConfig()
	}
	if *signHops {
		key := make([]byte, hop.KeyLen)
		if _, err := rand.Read(key); err != nil {
			log.Fatal(err)
		}
		cfg.HopKey = func() []byte { return key }
	}
	p := proxy.New(cfg)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := proxy.Listen(ctx, "tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	if err := addrfile.Write(*addrFile, ln.Addr().String()); err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		p.Shutdown(sctx)
		s := p.Stats()
		fmt.Fprintf(os.Stderr, "benchproxy: requests=%d edge_requests=%d edge_handoffs=%v ws_total=%d bytes_up=%d bytes_down=%d\n",
			s.Requests, s.EdgeRequests, p.EdgeHandoffs(), s.WebSocketsTotal, s.BytesUp, s.BytesDown)
	}()
	if err := p.Serve(srv, ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Print(err)
		stop()
	}
	<-done
	if *memProfile != "" {
		f, err := os.Create(*memProfile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
			log.Fatal(err)
		}
		f.Close()
	}
}
