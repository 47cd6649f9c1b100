// Command benchworker is a stand-in CloudBrowser worker for proxy
// benchmarks: a tiny HTTP responder plus a WebSocket echo on every path.
//
//	benchworker -addr 127.0.0.1:0 -addr-file /tmp/w.addr
//	benchworker -free-port   # prints a free loopback port and exits
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/handoff"
	"github.com/cloudbrowser-go/cloudbrowser/scripts/bench/internal/addrfile"
	"github.com/gorilla/websocket"
)

var upgrader = websocket.Upgrader{
	ReadBufferSize:  64 << 10,
	WriteBufferSize: 64 << 10,
	CheckOrigin:     func(*http.Request) bool { return true },
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	addrFile := flag.String("addr-file", "", "write the bound address to this file once listening")
	freePort := flag.Bool("free-port", false, "print a free loopback TCP port and exit")
	handoffPath := flag.String("handoff", "", "also take connections handed over by a proxy on this unix socket (internal/handoff)")
	unixPath := flag.String("unix", "", "also serve HTTP on this unix socket (nginx's unix upstream)")
	flag.Parse()

	if *freePort {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(ln.Addr().(*net.TCPAddr).Port)
		ln.Close()
		return
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	if err := addrfile.Write(*addrFile, ln.Addr().String()); err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(serve), ReadHeaderTimeout: 10 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if *unixPath != "" {
		_ = os.Remove(*unixPath)
		ul, err := net.Listen("unix", *unixPath)
		if err != nil {
			log.Fatal(err)
		}
		go func() { _ = srv.Serve(ul) }()
	}
	if *handoffPath != "" {
		hl, err := handoff.Listen(*handoffPath, func(err error) { log.Print(err) })
		if err != nil {
			log.Fatal(err)
		}
		go func() { _ = srv.Serve(hl) }()
	}
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

func serve(w http.ResponseWriter, r *http.Request) {
	if !websocket.IsWebSocketUpgrade(r) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "hello from benchworker\n")
		return
	}
	c, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer c.Close()
	for {
		mt, msg, err := c.ReadMessage()
		if err != nil {
			return
		}
		if err := c.WriteMessage(mt, msg); err != nil {
			return
		}
	}
}
