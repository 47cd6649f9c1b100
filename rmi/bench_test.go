package rmi_test

import (
	"context"
	"io"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// benchConn returns a worker->master conn over loopback TCP with logging off.
func benchConn(b *testing.B) *rmi.Conn {
	b.Helper()
	mk := func(name string) *rmi.Node {
		n, err := rmi.New(rmi.Config{Name: name, Secret: testSecret, Logger: zerolog.Nop()})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = n.Close() })
		return n
	}
	master, worker := mk("master"), mk("w-1")
	if err := master.Register("master", newMasterAPI()); err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = master.Serve(ctx, ln) }()
	b.Cleanup(func() { cancel(); <-done })
	c, err := worker.Dial(context.Background(), ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	return c
}

func reportRate(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
}

// BenchmarkCallRoundTrip: one caller, small args, loopback TCP.
func BenchmarkCallRoundTrip(b *testing.B) {
	c := benchConn(b)
	ctx := context.Background()
	b.ReportAllocs()
	var sum int
	for i := 0; b.Loop(); i++ {
		if err := c.Call(ctx, "master", "Add", &sum, i, 1); err != nil {
			b.Fatal(err)
		}
	}
	reportRate(b)
}

// BenchmarkCallParallel: many concurrent callers multiplexed on one conn.
func BenchmarkCallParallel(b *testing.B) {
	c := benchConn(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(8) // 8 callers per GOMAXPROCS
	b.RunParallel(func(pb *testing.PB) {
		var sum int
		for i := 0; pb.Next(); i++ {
			if err := c.Call(ctx, "master", "Add", &sum, i, 1); err != nil {
				b.Error(err)
				return
			}
		}
	})
	reportRate(b)
}

// BenchmarkCallLatency records each round trip and reports percentiles.
func BenchmarkCallLatency(b *testing.B) {
	c := benchConn(b)
	ctx := context.Background()
	lat := make([]time.Duration, 0, 1<<16)
	var sum int
	for i := 0; b.Loop(); i++ {
		t0 := time.Now()
		if err := c.Call(ctx, "master", "Add", &sum, i, 1); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Nanoseconds()) }
	b.ReportMetric(pct(0.50), "p50-ns")
	b.ReportMetric(pct(0.99), "p99-ns")
	reportRate(b)
}

// BenchmarkTCPEchoBaseline is the floor for a round trip on this machine:
// 16 bytes written and echoed on a loopback TCP connection, no encoding.
// scripts/bench/rmi.sh reports RMI latency as a ratio to it.
func BenchmarkTCPEchoBaseline(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 16)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 16)
	lat := make([]time.Duration, 0, 1<<16)
	for b.Loop() {
		t0 := time.Now()
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[int(0.99*float64(len(lat)-1))].Nanoseconds()), "p99-ns")
	reportRate(b)
}

// BenchmarkSealing measures what frame sealing (AES-256-GCM) costs: the same
// calls with sealing off (protocol v1's plaintext frames) and on, in one
// run, so scripts/bench/rmi.sh can report sealed÷plaintext.
func BenchmarkSealing(b *testing.B) {
	blob := make([]byte, 64<<10)
	cases := []struct {
		name string
		run  func(b *testing.B, c *rmi.Conn)
	}{
		{"roundtrip", func(b *testing.B, c *rmi.Conn) {
			var sum int
			for i := 0; b.Loop(); i++ {
				if err := c.Call(context.Background(), "master", "Add", &sum, i, 1); err != nil {
					b.Fatal(err)
				}
			}
		}},
		{"parallel", func(b *testing.B, c *rmi.Conn) {
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				var sum int
				for i := 0; pb.Next(); i++ {
					if err := c.Call(context.Background(), "master", "Add", &sum, i, 1); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}},
		{"64KiB", func(b *testing.B, c *rmi.Conn) {
			b.SetBytes(int64(len(blob)))
			for b.Loop() {
				if err := c.Call(context.Background(), "master", "Sink", nil, blob); err != nil {
					b.Fatal(err)
				}
			}
		}},
	}
	for _, tc := range cases {
		for _, mode := range []string{"plaintext", "sealed"} {
			b.Run(tc.name+"/"+mode, func(b *testing.B) {
				rmi.SetPlaintextFrames(mode == "plaintext")
				defer rmi.SetPlaintextFrames(false)
				c := benchConn(b) // the mode is fixed at the handshake
				b.ReportAllocs()
				tc.run(b, c)
				reportRate(b)
			})
		}
	}
}

// BenchmarkHandshake: a dial and handshake over loopback TCP, proving the
// cluster secret (the baseline), a role key, or a key bound to the
// client's name (tried first, so it costs one derivation per handshake).
func BenchmarkHandshake(b *testing.B) {
	roleKey := []byte("worker-role-key-0123456789abcdef")
	nameKey := func(name string) []byte { return append([]byte("name-key-0123456789-"), name...) }
	for _, tc := range []struct {
		name string
		key  []byte
	}{{"cluster-secret", testSecret}, {"role-key", roleKey}, {"name-key", nameKey("w-1")}} {
		b.Run(tc.name, func(b *testing.B) {
			srv, err := rmi.New(rmi.Config{Name: "master", Secret: testSecret, Logger: zerolog.Nop(),
				RoleSecrets: map[string][]byte{"worker": roleKey},
				NameSecret:  func(role, name string) []byte { return nameKey(name) }})
			if err != nil {
				b.Fatal(err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = srv.Serve(ctx, ln) }()
			defer func() { cancel(); <-done; _ = srv.Close() }()
			cl, err := rmi.New(rmi.Config{Name: "w-1", Role: "worker", Secret: tc.key, Logger: zerolog.Nop()})
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			for b.Loop() {
				c, err := cl.Dial(context.Background(), ln.Addr().String())
				if err != nil {
					b.Fatal(err)
				}
				_ = c.Close()
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "handshakes/s")
		})
	}
}
