package worker

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gorilla/websocket"

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
}

// TestFramePacing: through a real socket, a client that acknowledges frames
// gets two ahead of its acknowledgements, then, on its next ack, the newest.
func TestFramePacing(t *testing.T) {
	f := newHubFixture(t, RoleReader)
	fb := f.rt.last()
	conn, _ := f.dial(t, true)
	feed := func(from, to int) {
		for i := from; i <= to; i++ {
			fb.frames <- browser.Frame{Data: []byte{0xff, 0xd8}, Width: 10, Height: 10, Seq: uint64(i), Timestamp: time.Now()}
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
			var hdr frameHeader
			n := binary.BigEndian.Uint32(data)
			if err := json.Unmarshal(data[4:4+n], &hdr); err != nil {
				t.Fatal(err)
			}
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
	sentBefore := f.w.frames.sent.Load()
	sent := func(n uint64) func() error {
		return func() error {
			if got := f.w.frames.sent.Load() - sentBefore; got != n {
				return fmt.Errorf("%d frames sent, want %d", got, n)
			}
			return nil
		}
	}
	feed(2, 2)
	testutil.Eventually(t, 5*time.Second, sent(1))
	feed(3, 3)
	testutil.Eventually(t, 5*time.Second, sent(2))
	droppedBefore := f.w.frames.dropped.Load()
	feed(4, 10) // two in flight: these wait in the slot, the newest wins
	testutil.Eventually(t, 5*time.Second, func() error {
		if f.w.frames.held.Load() == 0 {
			return errors.New("no frame held yet")
		}
		// 5..10 each replaced the one before in the slot: 10 waits there.
		if d := f.w.frames.dropped.Load() - droppedBefore; d != 6 {
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
