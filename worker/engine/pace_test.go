package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock/clocktest"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

func TestPacer(t *testing.T) {
	type step struct {
		op   string // "write", "ack", "may"
		seq  uint64
		want bool // for "may"
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"never acknowledged: never held", []step{
			{op: "write", seq: 1}, {op: "write", seq: 2}, {op: "write", seq: 3}, {op: "may", want: true}}},
		{"held at two in flight", []step{
			{op: "ack", seq: 0}, {op: "write", seq: 1}, {op: "may", want: true}, {op: "write", seq: 2}, {op: "may", want: false}}},
		{"an ack releases", []step{
			{op: "ack", seq: 0}, {op: "write", seq: 1}, {op: "write", seq: 2}, {op: "ack", seq: 1}, {op: "may", want: true}}},
		{"a later ack covers skipped frames", []step{
			{op: "ack", seq: 0}, {op: "write", seq: 5}, {op: "write", seq: 9}, {op: "ack", seq: 9}, {op: "write", seq: 12}, {op: "may", want: true}}},
		{"a stale ack releases nothing", []step{
			{op: "ack", seq: 0}, {op: "write", seq: 5}, {op: "write", seq: 9}, {op: "ack", seq: 3}, {op: "may", want: false}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &pacer{wait: time.Hour}
			defer p.stop()
			for i, s := range tc.steps {
				switch s.op {
				case "write":
					p.wrote(s.seq)
				case "ack":
					p.acked(s.seq)
				case "may":
					if got := p.mayWrite(func() {}); got != s.want {
						t.Fatalf("step %d: mayWrite = %v, want %v", i, got, s.want)
					}
				}
			}
		})
	}
}

// A client that stops acknowledging gets frames again after the wait: a
// lost ack never freezes a screen.
func TestPacerGivesUpWaiting(t *testing.T) {
	p := &pacer{wait: 20 * time.Millisecond}
	defer p.stop()
	p.acked(0)
	p.wrote(1)
	p.wrote(2)
	woken := make(chan struct{})
	if p.mayWrite(func() { close(woken) }) {
		t.Fatal("not held at two frames in flight")
	}
	<-woken
	if !p.mayWrite(func() {}) {
		t.Fatal("still held after the wait")
	}
	// A late ack still times the link (a slow link's acks come after the
	// wait), and pacing holds again after it.
	p.wrote(3)
	p.wrote(4)
	p.acked(2)
	if _, n := p.transfer(); n != 1 {
		t.Fatalf("a late ack gave %d transfer samples, want 1", n)
	}
	if p.mayWrite(func() {}) {
		t.Fatal("not held at two frames in flight after the late ack")
	}
}

// A client that never acknowledges again gets two frames per wait, however
// long it stays silent (past the frames the pacer remembers).
func TestPacerSilentClientStaysPaced(t *testing.T) {
	p := &pacer{wait: time.Millisecond}
	defer p.stop()
	p.acked(0)
	seq := uint64(0)
	for round := range maxPending {
		for range maxInFlight {
			if !p.mayWrite(func() {}) {
				t.Fatalf("round %d: held before two frames", round)
			}
			seq++
			p.wrote(seq)
		}
		woken := make(chan struct{})
		if p.mayWrite(func() { close(woken) }) {
			t.Fatalf("round %d: not held at two frames in flight (%d remembered)", round, len(p.pending))
		}
		<-woken
	}
}

// TestFramePacing: through a real socket, a client that acknowledges frames
// gets two ahead of its acknowledgements, then, on its next ack, the newest.
func TestFramePacing(t *testing.T) {
	f := newHubFixture(t)
	fb := f.fb
	conn, _ := f.dial(t, AccessOwner)
	feed := func(from, to int) {
		for i := from; i <= to; i++ {
			fb.Frames <- browser.Frame{Data: []byte{0xff, 0xd8}, Width: 10, Height: 10, Seq: uint64(i), Timestamp: time.Now()}
		}
	}
	// next returns the next frame's seq, or the pong's for a ping.
	next := func() (seq uint64, pong bool) {
		t.Helper()
		for {
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			typ, data, err := conn.ReadMessage()
			if err != nil {
				t.Fatal(err)
			}
			if typ == websocket.TextMessage {
				var m struct {
					T string `json:"t"`
				}
				if json.Unmarshal(data, &m) == nil && m.T == "pong" {
					return 0, true
				}
				continue
			}
			hdr, _ := frameOf(t, data)
			return hdr.Seq, false
		}
	}
	send := func(m map[string]any) {
		if err := conn.WriteJSON(m); err != nil {
			t.Fatal(err)
		}
	}

	feed(1, 1)
	if seq, _ := next(); seq != 1 {
		t.Fatalf("first frame %d", seq)
	}
	// Messages are handled in order: once the pong is back, so is the ack.
	send(map[string]any{"t": "ack", "seq": 1})
	send(map[string]any{"t": "ping", "seq": 1})
	if _, pong := next(); !pong {
		t.Fatal("a frame came unasked")
	}
	sentBefore := f.h.frames.sent.Load()
	sent := func(n uint64) func() error {
		return func() error {
			if got := f.h.frames.sent.Load() - sentBefore; got != n {
				return fmt.Errorf("%d frames sent, want %d", got, n)
			}
			return nil
		}
	}
	feed(2, 2)
	testutil.Eventually(t, 5*time.Second, sent(1))
	feed(3, 3)
	testutil.Eventually(t, 5*time.Second, sent(2))
	droppedBefore := f.h.frames.dropped.Load()
	feed(4, 10) // two in flight: these wait in the slot, the newest wins
	testutil.Eventually(t, 5*time.Second, func() error {
		if f.h.frames.held.Load() == 0 {
			return errors.New("no frame held yet")
		}
		// 5..10 each replaced the one before in the slot: 10 waits there.
		if d := f.h.frames.dropped.Load() - droppedBefore; d != 6 {
			return fmt.Errorf("%d frames replaced in the slot, want 6", d)
		}
		return sent(maxInFlight)()
	})
	a, _ := next()
	b, _ := next()
	if a != 2 || b != 3 {
		t.Fatalf("frames %d, %d; want 2, 3", a, b)
	}
	send(map[string]any{"t": "ack", "seq": b})
	if c, _ := next(); c != 10 {
		t.Fatalf("after the ack: frame %d, want the newest (10)", c)
	}
}

// The transfer time of a frame runs from its write, or from the ack
// before it if the link was still busy then, to its ack; a moving average.
func TestPacerTransfer(t *testing.T) {
	t0 := time.Unix(1000, 0)
	clk := clocktest.New(t0)
	p := &pacer{wait: time.Hour, clk: clk}
	defer p.stop()
	at := func(ms int) { clk.Set(t0.Add(time.Duration(ms) * time.Millisecond)) }
	if x, n := p.transfer(); x != 0 || n != 0 {
		t.Fatalf("before any ack: %v %d", x, n)
	}
	p.acked(0) // the client acknowledges: pacing on
	for _, s := range []struct {
		op   string
		ms   int
		seq  uint64
		want time.Duration // after an ack
	}{
		{"write", 0, 1, 0},
		{"ack", 100, 1, 100 * time.Millisecond},
		{"write", 100, 2, 0},
		{"write", 150, 3, 0},
		{"ack", 400, 2, 300 * time.Millisecond}, // from its write
		{"ack", 600, 3, 200 * time.Millisecond}, // from the ack before (the link was busy)
		{"write", 700, 5, 0},
		{"write", 710, 6, 0},
		{"ack", 720, 6, 10 * time.Millisecond}, // covers 5: 6's own time
	} {
		at(s.ms)
		switch s.op {
		case "write":
			p.wrote(s.seq)
		case "ack":
			p.acked(s.seq)
			if x, _ := p.transfer(); x != s.want {
				t.Fatalf("ack %d at %d ms: transfer %v, want %v", s.seq, s.ms, x, s.want)
			}
		}
	}
	if _, n := p.transfer(); n != 4 {
		t.Fatalf("%d samples, want 4 (the first ack had no frame)", n)
	}
}

// The first frame is timed by the first ack, which a hinted link step
// waits for; until that ack the client is not paced.
func TestPacerTimesTheFirstFrame(t *testing.T) {
	t0 := time.Unix(1000, 0)
	clk := clocktest.New(t0)
	p := &pacer{wait: time.Hour, clk: clk}
	defer p.stop()
	for seq := uint64(1); seq <= 3; seq++ {
		if !p.mayWrite(func() {}) {
			t.Fatalf("frame %d held before the client ever acknowledged", seq)
		}
		p.wrote(seq)
	}
	clk.Set(t0.Add(40 * time.Millisecond))
	p.acked(1)
	if x, n := p.transfer(); x != 40*time.Millisecond || n != 1 {
		t.Fatalf("first ack: transfer %v (%d samples), want 40ms (1)", x, n)
	}
	if p.mayWrite(func() {}) {
		t.Fatal("frames 2 and 3 are in flight: not held")
	}
}
