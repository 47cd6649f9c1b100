package proxy

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// silentRouter is a master's Router that answers reports until told to
// go silent, then answers nothing (as a master behind a network cut,
// whose connection does not break).
type silentRouter struct {
	silent  atomic.Bool
	release chan struct{}
}

func (s *silentRouter) ProxyReport(ctx context.Context, r wire.ProxyReport) error {
	if s.silent.Load() {
		<-s.release // not even the deadline's error: nothing comes back
	}
	return nil
}

// TestMasterSilenceClosesConnection: reports the master answers, or
// answers with an error, keep the connection; silentReports reports in a
// row without any answer close it, so questions fail fast until a new
// connection (which the client dials at once).
func TestMasterSilenceClosesConnection(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	master, err := rmi.New(rmi.Config{Name: "m", Secret: secret, Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	router := &silentRouter{release: make(chan struct{})}
	defer close(router.release) // before master.Close waits for the method
	if err := master.Register(wire.ObjRouter, router); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = master.Serve(context.Background(), ln) }()
	node, err := rmi.New(rmi.Config{Name: "p", Secret: secret, Logger: testutil.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	var dials atomic.Int32
	client := node.NewClient(ln.Addr().String(), func(context.Context, *rmi.Conn) error { dials.Add(1); return nil })
	ctx := context.Background()
	first, err := client.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := masterSilence{client: client, log: testutil.Logger(t)}
	for range 2 * silentReports {
		m.report(ctx, wire.ProxyReport{})
	}
	if first.Err() != nil || m.misses != 0 {
		t.Fatalf("answered reports: connection %v, misses %d", first.Err(), m.misses)
	}

	router.silent.Store(true)
	for i := 1; i < silentReports; i++ {
		m.report(ctx, wire.ProxyReport{})
		if first.Err() != nil || m.misses != i {
			t.Fatalf("after %d unanswered reports: connection %v, misses %d", i, first.Err(), m.misses)
		}
	}
	m.report(ctx, wire.ProxyReport{})
	select {
	case <-first.Done():
	case <-time.After(testutil.Scale(10 * time.Second)):
		t.Fatal("the silent connection stayed open")
	}
	router.silent.Store(false)
	testutil.Eventually(t, 10*time.Second, testutil.Cond("a new connection", func() bool {
		c, err := client.Conn(ctx)
		return err == nil && c != first && dials.Load() == 2
	}))
}
