//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package proxy

import (
	"context"
	"net"
	"testing"
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
