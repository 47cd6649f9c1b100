package proxy

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock/clocktest"
)

// TestHandoffBackoff: a handoff socket that failed (on the net/http path
// or the edge's) is not tried again until handoffBackoff has passed on the
// proxy's clock.
func TestHandoffBackoff(t *testing.T) {
	failed := func(p *Proxy, socket string) { p.handoffs.failed(socket) }
	for _, tc := range []struct {
		name  string
		fail  func(p *Proxy, socket string)
		after time.Duration
		want  bool
	}{
		{"never failed", func(*Proxy, string) {}, 0, true},
		{"just failed", failed, 0, false},
		{"edge's failure", func(p *Proxy, s string) { (*edgeHost)(p).HandoffFailed(s) }, 0, false},
		{"within the backoff", failed, handoffBackoff - time.Nanosecond, false},
		{"backoff over", failed, handoffBackoff, true},
		{"another socket failed", func(p *Proxy, _ string) { p.handoffs.failed("/other.sock") }, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktest.New(time.Unix(1_700_000_000, 0))
			p := New(Config{Router: &fakeRouter{}, Clock: clk})
			route := Route{WorkerID: testWorker, Addr: "127.0.0.1:1", Handoff: "/w.sock", Host: p.handoffs.hostID}
			tc.fail(p, route.Handoff)
			clk.Advance(tc.after)
			if got := p.handoffs.allows(route); got != tc.want {
				t.Fatalf("handoffs.allows = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestUpstreamIdleExpiry: a pooled connection is reused until it has been
// idle idleFor on the clock; then it is closed and a new one dialed.
func TestUpstreamIdleExpiry(t *testing.T) {
	const idleFor = 90 * time.Second
	for _, tc := range []struct {
		name   string
		idle   time.Duration
		reused bool
	}{
		{"fresh", 0, true},
		{"just under", idleFor - time.Nanosecond, true},
		{"too old", idleFor, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktest.New(time.Unix(1_700_000_000, 0))
			u := newUpstreams(&net.Dialer{}, 4, idleFor, clk)
			var ends []net.Conn
			u.dial = func(context.Context, string, string) (net.Conn, error) {
				a, b := net.Pipe()
				ends = append(ends, b)
				return a, nil
			}
			defer func() {
				u.close()
				for _, b := range ends {
					b.Close()
				}
			}()
			first, err := u.get(context.Background(), "w:1")
			if err != nil {
				t.Fatal(err)
			}
			u.put(first)
			clk.Advance(tc.idle)
			c, err := u.get(context.Background(), "w:1")
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if got := c == first; got != tc.reused || c.reused != tc.reused {
				t.Fatalf("reused %v (flag %v), want %v", got, c.reused, tc.reused)
			}
			if !tc.reused {
				// The stale one was closed: its peer end reads EOF.
				if _, err := ends[0].Read(make([]byte, 1)); err == nil {
					t.Fatal("the expired connection is still open")
				}
			}
		})
	}
}
