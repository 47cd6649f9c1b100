package httpserve

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
)

func TestMain(m *testing.M) { testutil.Main(m) }

const testSecret = "0123456789abcdef0123456789abcdef"

var testHopKey = []byte("hop-key-0123456789abcdef01234567")

// noHost is a worker with no apps, no instances and no master.
type noHost struct{}

func (noHost) App(string) (wire.App, bool)                              { return wire.App{}, false }
func (noHost) Instance(string) (Instance, bool)                         { return nil, false }
func (noHost) Master() contract.Caller                                  { return nil }
func (noHost) Registered() bool                                         { return false }
func (noHost) Ready() bool                                              { return false }
func (noHost) EndSession(context.Context, wire.SessionRevocation) error { return nil }

// newTestServer is the HTTP side of a worker that hosts nothing and has
// not registered; its /metrics has one cloudbrowser_ metric.
func newTestServer(t *testing.T, socketURL string) *Server {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "cloudbrowser_test_total", Help: "A test counter."}))
	return New(Config{ID: "w-test", Host: noHost{}, Secret: testSecret, SocketURL: socketURL,
		Runtime: &browser.Null{}, Metrics: reg, Log: zerolog.Nop()})
}
