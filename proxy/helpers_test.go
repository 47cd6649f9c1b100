package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/urlkind"
)

func TestMain(m *testing.M) { testutil.Main(m) }

const (
	testWorker   = "w-test1"
	testInstance = testWorker + ".abcdefghijkl"
	testBrowser  = "bqwertyuiop1"
)

// fakeRouter counts calls and answers with fn (or a fixed route/error).
type fakeRouter struct {
	calls     atomic.Int64
	appsCalls atomic.Int64

	mu      sync.Mutex
	route   Route
	err     error
	fn      func(ctx context.Context, t urlkind.Target) (Route, error)
	apps    []AppLink
	appsErr error
	targets []urlkind.Target
}

func (f *fakeRouter) Route(ctx context.Context, t urlkind.Target) (Route, error) {
	f.calls.Add(1)
	f.mu.Lock()
	f.targets = append(f.targets, t)
	fn, r, err := f.fn, f.route, f.err
	f.mu.Unlock()
	if fn != nil {
		return fn(ctx, t)
	}
	return r, err
}

func (f *fakeRouter) Apps(ctx context.Context) ([]AppLink, error) {
	f.appsCalls.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.apps, f.appsErr
}

func (f *fakeRouter) set(r Route, err error) {
	f.mu.Lock()
	f.route, f.err = r, err
	f.mu.Unlock()
}

// startWorker runs h on a loopback server and returns a Route to it.
func startWorker(t testing.TB, h http.Handler) Route {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return Route{WorkerID: testWorker, Addr: srv.Listener.Addr().String()}
}

// testServer is a proxy serving on loopback as in production: through
// Proxy.Serve, so with the edge in front.
type testServer struct {
	URL  string
	Addr string
	p    *Proxy
	srv  *http.Server
	done chan error
	once sync.Once
}

// Close closes the server and every connection at once, the edge's too.
func (s *testServer) Close() {
	s.once.Do(func() {
		_ = s.srv.Close()
		<-s.done
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		s.p.edges.shutdown(ctx)
	})
}

// startProxy serves p on loopback; cleanup closes the server, then shuts
// the proxy down so relays end before goleak looks.
func startProxy(t testing.TB, cfg Config) (*Proxy, *testServer) {
	t.Helper()
	if _, bench := t.(*testing.B); !bench { // a log line per request would be what benchmarks measure
		cfg.Logger = testutil.Logger(t)
	}
	p := New(cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{p: p, Addr: ln.Addr().String(), URL: "http://" + ln.Addr().String(),
		srv: &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}, done: make(chan error, 1)}
	go func() { s.done <- p.Serve(s.srv, ln) }()
	t.Cleanup(func() {
		s.Close()
		if err := p.Shutdown(context.Background()); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return p, s
}

// client returns an http.Client whose idle connections die with the test.
func client(t testing.TB) *http.Client {
	tr := &http.Transport{Proxy: nil}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func readAll(t testing.TB, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return string(b)
}

// refusedAddr returns a loopback address nobody listens on.
func refusedAddr(t testing.TB) string { return testutil.RefusedAddr(t) }

// hookRecorder records OnWorkerUnreachable calls.
type hookRecorder struct {
	mu    sync.Mutex
	calls []Route
}

func (h *hookRecorder) hook(r Route) {
	h.mu.Lock()
	h.calls = append(h.calls, r)
	h.mu.Unlock()
}

func (h *hookRecorder) get() []Route {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Route(nil), h.calls...)
}
