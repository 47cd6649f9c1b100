package proxy

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
)

// TestHandedShutdownReachesClient: the master's verdict on a worker ends
// every socket handed to it, and each client sees the end of its stream,
// even though the watcher closes the proxy's descriptor as soon as the
// shutdown wakes it (it once did so between the read and the write half,
// and the client never got its FIN). The worker's descriptor stays open
// throughout, as a stalled worker's would.
func TestHandedShutdownReachesClient(t *testing.T) {
	h := newHandedSockets(zerolog.Nop())
	defer h.stop()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const rounds, perRound = 20, 10
	for round := 0; round < rounds; round++ {
		var clients []net.Conn
		for i := 0; i < perRound; i++ {
			client, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			kept, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			worker, err := kept.(*net.TCPConn).File() // the stalled worker's descriptor
			if err != nil {
				t.Fatal(err)
			}
			defer worker.Close()
			if !h.add(kept, "w1", 0) {
				t.Fatal("not watched")
			}
			clients = append(clients, client)
		}
		if n := h.closeWorker("w1"); n != perRound {
			t.Fatalf("round %d: closed %d, want %d", round, n, perRound)
		}
		for i, c := range clients {
			_ = c.SetReadDeadline(time.Now().Add(testutil.Scale(5 * time.Second)))
			var ne net.Error
			if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
				if errors.As(err, &ne) && ne.Timeout() {
					t.Fatalf("round %d client %d: no end of stream", round, i)
				}
				t.Fatalf("round %d client %d: %v, want EOF", round, i, err)
			}
		}
		testutil.Eventually(t, testutil.Scale(5*time.Second), testutil.Cond("descriptors let go", func() bool { return h.count() == 0 }))
	}
}
