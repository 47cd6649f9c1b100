//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package proxy

import (
	"context"
	"net"
	"testing"

	"github.com/cloudbrowser-go/cloudbrowser/internal/reserve"
)

func TestListenReusePort(t *testing.T) {
	ctx := context.Background()
	ln1, err := Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln1.Close()
	addr := ln1.Addr().String()
	ln2, err := Listen(ctx, "tcp", addr)
	if err != nil {
		t.Fatalf("second listener on %s: %v", addr, err)
	}
	defer ln2.Close()

	// The kernel hashes each connection to one listener; dial until both
	// have accepted one. 2^-63 odds of a false failure.
	accepted := make(chan int, 128)
	for i, ln := range []net.Listener{ln1, ln2} {
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
				accepted <- i
			}
		}()
	}
	seen := [2]bool{}
	for n := 0; n < 64 && !(seen[0] && seen[1]); n++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		seen[<-accepted] = true
		c.Close()
	}
	if !seen[0] || !seen[1] {
		t.Fatalf("accepted by listener 1: %v, listener 2: %v", seen[0], seen[1])
	}

	// Without the option a plain listener cannot join the group.
	if l, err := net.Listen("tcp", addr); err == nil {
		l.Close()
		t.Fatal("plain listen on a SO_REUSEPORT port should fail")
	}
}

func TestListenError(t *testing.T) {
	if _, err := Listen(context.Background(), "tcp", "256.0.0.1:0"); err == nil {
		t.Fatal("want error for bad address")
	}
}

// TestReservedPort: a port held by internal/reserve is refused to ordinary
// listeners, taken by our SO_REUSEPORT listeners, never answers
// connections itself, and is free again after Close.
func TestReservedPort(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		t.Run(addr, func(t *testing.T) {
			r, err := reserve.Bind(addr)
			if err != nil {
				if addr == "[::1]:0" {
					t.Skipf("no IPv6 loopback: %v", err)
				}
				t.Fatal(err)
			}
			host, port, _ := net.SplitHostPort(r.Addr())
			if want, _, _ := net.SplitHostPort(addr); host != want || port == "0" {
				t.Fatalf("Addr() = %s, want host %s and a real port", r.Addr(), want)
			}
			if ln, err := net.Listen("tcp", r.Addr()); err == nil {
				ln.Close()
				r.Close()
				t.Fatal("a plain listener took the reserved port")
			}
			// Nobody listens yet: a connection is refused, not queued on
			// the reservation.
			if c, err := net.Dial("tcp", r.Addr()); err == nil {
				c.Close()
				t.Fatal("the reservation accepted a connection")
			}
			ln, err := Listen(context.Background(), "tcp", r.Addr())
			if err != nil {
				t.Fatalf("our shared listener on the reserved port: %v", err)
			}
			for range 20 { // every connection reaches the listener
				c, err := net.Dial("tcp", r.Addr())
				if err != nil {
					t.Fatal(err)
				}
				a, err := ln.Accept()
				if err != nil {
					t.Fatal(err)
				}
				a.Close()
				c.Close()
			}
			ln.Close()
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
			ln2, err := net.Listen("tcp", r.Addr())
			if err != nil {
				t.Fatalf("port not released after Close: %v", err)
			}
			ln2.Close()
		})
	}
}

func TestBoundAddr(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	for _, tc := range []struct{ listen, want string }{
		{"127.0.0.1:0", "127.0.0.1:" + port},
		{":0", ":" + port},
		{"localhost:0", "localhost:" + port},
	} {
		if got := BoundAddr(tc.listen, ln); got != tc.want {
			t.Errorf("BoundAddr(%q) = %q, want %q", tc.listen, got, tc.want)
		}
	}
}
