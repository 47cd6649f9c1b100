package rmi_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

func TestMain(m *testing.M) { testutil.Main(m) }

var testSecret = []byte("0123456789abcdef-cluster-secret")

// recv receives from ch; the bound only guards against a hung test.
func recv[T any](t testing.TB, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting on channel")
		panic("unreachable")
	}
}

type nodeOpt func(*rmi.Config)

func withSecret(s string) nodeOpt { return func(c *rmi.Config) { c.Secret = []byte(s) } }
func withMaxFrame(n int) nodeOpt  { return func(c *rmi.Config) { c.MaxFrame = n } }
func withHandshake(d time.Duration) nodeOpt {
	return func(c *rmi.Config) { c.HandshakeTimeout = d }
}
func withOnConnect(f func(*rmi.Conn)) nodeOpt { return func(c *rmi.Config) { c.OnConnect = f } }

// newNode returns a node whose logs are kept for assertions and mirrored
// to t's log.
func newNode(t testing.TB, name string, opts ...nodeOpt) (*rmi.Node, *testutil.SyncBuffer) {
	t.Helper()
	sink := &testutil.SyncBuffer{}
	cfg := rmi.Config{Name: name, Secret: testSecret, Logger: zerolog.New(io.MultiWriter(sink, testutil.LogWriter(t))).Level(zerolog.DebugLevel)}
	for _, o := range opts {
		o(&cfg)
	}
	n, err := rmi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	return n, sink
}

// serve runs n.Serve on a fresh loopback listener (or addr) until cleanup.
func serve(t testing.TB, n *rmi.Node, addr string) string {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, rmi.ErrClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// pair is a master node serving and a worker node dialed into it, with both
// ends of the connection.
type pair struct {
	master, worker       *rmi.Node
	masterLog, workerLog *testutil.SyncBuffer
	addr                 string
	toMaster, toWorker   *rmi.Conn // worker's dialed conn; master's accepted conn
	masterObj            *masterAPI
	workerObj            *workerAPI
}

func newPair(t *testing.T, masterOpts, workerOpts []nodeOpt) *pair {
	t.Helper()
	p := &pair{masterObj: newMasterAPI(), workerObj: &workerAPI{}}
	accepted := make(chan *rmi.Conn, 1)
	masterOpts = append([]nodeOpt{withOnConnect(func(c *rmi.Conn) { accepted <- c })}, masterOpts...)
	p.master, p.masterLog = newNode(t, "master", masterOpts...)
	p.worker, p.workerLog = newNode(t, "w-1", workerOpts...)
	if err := p.master.Register("master", p.masterObj); err != nil {
		t.Fatal(err)
	}
	if err := p.worker.Register("worker", p.workerObj); err != nil {
		t.Fatal(err)
	}
	p.addr = serve(t, p.master, "")
	c, err := p.worker.Dial(testCtx(t), p.addr)
	if err != nil {
		t.Fatal(err)
	}
	p.toMaster = c
	select {
	case p.toWorker = <-accepted:
	case <-testCtx(t).Done():
		t.Fatal("no accepted conn")
	}
	return p
}

// ---- test objects ----

type Inner struct {
	X     int            `codec:"x"`
	Label string         `codec:"label"`
	Attrs map[string]int `codec:"attrs"`
}

type Payload struct {
	Name  string            `codec:"name"`
	Big   uint64            `codec:"big"`
	Neg   int64             `codec:"neg"`
	F     float64           `codec:"f"`
	When  time.Time         `codec:"when"`
	Data  []byte            `codec:"data"`
	Tags  []string          `codec:"tags"`
	Meta  map[string]string `codec:"meta"`
	Inner *Inner            `codec:"inner"`
	Items []Inner           `codec:"items"`
	Skip  string            `codec:"-"`
}

type WorkerInfo struct {
	ID   string `codec:"id"`
	Addr string `codec:"addr"`
}

// codedErr carries an application error code across the wire.
type codedErr struct{ code, msg string }

func (e *codedErr) Error() string   { return e.msg }
func (e *codedErr) RMICode() string { return e.code }

type masterAPI struct {
	mu         sync.Mutex
	workers    map[string]*rmi.Ref
	registered chan string
	blocked    chan struct{}      // Block signals it started
	blockErr   chan error         // Block reports its ctx error
	deadline   chan time.Duration // Block reports remaining time, -1 if none
}

func newMasterAPI() *masterAPI {
	return &masterAPI{
		workers:    make(map[string]*rmi.Ref),
		registered: make(chan string, 16),
		blocked:    make(chan struct{}, 16),
		blockErr:   make(chan error, 16),
		deadline:   make(chan time.Duration, 16),
	}
}

func (m *masterAPI) Add(_ context.Context, a, b int) (int, error) { return a + b, nil }

func (m *masterAPI) Echo(_ context.Context, p Payload) (Payload, error) { return p, nil }

func (m *masterAPI) WhoAmI(ctx context.Context) (string, error) {
	return rmi.ConnFrom(ctx).PeerName(), nil
}

// Register is the worker's registration: it passes its app manager by
// reference for the master to call later.
func (m *masterAPI) Register(_ context.Context, info WorkerInfo, apps *rmi.Ref) error {
	if apps == nil {
		return errors.New("nil app manager")
	}
	m.mu.Lock()
	m.workers[info.ID] = apps
	m.mu.Unlock()
	m.registered <- info.ID
	return nil
}

func (m *masterAPI) worker(id string) *rmi.Ref {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.workers[id]
}

// PingBack calls the caller's "worker" object over the incoming conn.
func (m *masterAPI) PingBack(ctx context.Context, msg string) (string, error) {
	var out string
	err := rmi.ConnFrom(ctx).Call(ctx, "worker", "Ping", &out, msg)
	return "master saw " + out, err
}

func (m *masterAPI) Block(ctx context.Context) error {
	if dl, ok := ctx.Deadline(); ok {
		m.deadline <- time.Until(dl)
	} else {
		m.deadline <- -1
	}
	m.blocked <- struct{}{}
	<-ctx.Done()
	m.blockErr <- ctx.Err()
	return ctx.Err()
}

func (m *masterAPI) Fail(_ context.Context, code, msg string) error {
	if code == "" {
		return errors.New(msg)
	}
	return fmt.Errorf("wrapped: %w", &codedErr{code: code, msg: msg})
}

func (m *masterAPI) Panic(context.Context) error { panic("boom") }

func (m *masterAPI) Blob(_ context.Context, n int) ([]byte, error) { return make([]byte, n), nil }

func (m *masterAPI) Sink(context.Context, []byte) error { return nil }

func (m *masterAPI) NewCounter(_ context.Context, start int) (*rmi.Exported, error) {
	return rmi.Export(&counter{n: start}), nil
}

// not eligible: ignored by Register
func (m *masterAPI) NoCtx(a int) (int, error) { return a, nil }

type counter struct {
	mu sync.Mutex
	n  int
}

func (c *counter) Inc(context.Context) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	return c.n, nil
}

type workerAPI struct{}

func (w *workerAPI) Ping(_ context.Context, msg string) (string, error) { return "pong:" + msg, nil }

type appManager struct {
	mu       sync.Mutex
	launched []string
}

func (a *appManager) Launch(ctx context.Context, app string) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.launched = append(a.launched, app)
	return fmt.Sprintf("%s@%s", app, "w-1"), nil
}

// Count reports how many tags and meta entries arrived (nil-safe).
func (m *masterAPI) Count(_ context.Context, tags []string, meta map[string]int, in *Inner) (int, error) {
	n := len(tags) + len(meta)
	if in != nil {
		n += 100
	}
	return n, nil
}
