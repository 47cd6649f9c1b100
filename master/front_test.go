package master

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/internal/secret"
	"github.com/cloudbrowser-go/cloudbrowser/internal/supervise"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// fakeFront is a public side that records what the master asks of it and
// subscribes a fakeLocal, as the embedded proxy does.
type fakeFront struct {
	m     *Master
	local *fakeLocal

	mu      sync.Mutex
	calls   []string
	stopCtx error // the master's context when Stop ran
}

func (f *fakeFront) Start(ctx context.Context) (string, error) {
	f.mu.Lock()
	f.calls = append(f.calls, "start")
	f.mu.Unlock()
	f.m.SetLocalProxy(f.local)
	return "127.0.0.1:4321", nil
}

func (f *fakeFront) Stop(ctx context.Context) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "stop")
	f.stopCtx = f.m.ctx.Err()
}

type fakeLocal struct {
	mu     sync.Mutex
	closed []string
	gauge  prometheus.Gauge
}

func (l *fakeLocal) CloseWorker(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = append(l.closed, id)
	return 1
}

func (l *fakeLocal) Status() wire.ProxyStatus {
	return wire.ProxyStatus{Name: "embedded", Addr: "127.0.0.1:4321", Embedded: true, Requests: 7}
}

func (l *fakeLocal) Collectors() []prometheus.Collector { return []prometheus.Collector{l.gauge} }

// TestFrontWiring: the front starts inside Start and gives the public
// address; its local proxy is told of dead workers, shows in the status
// and the metrics; Close stops the front before the master's own context
// ends, so users get answers until the end.
func TestFrontWiring(t *testing.T) {
	m, err := New(Config{Secret: testSecret, AdminToken: "tok", PublicAddr: "127.0.0.1:0", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	local := &fakeLocal{gauge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "test_local_proxy_gauge", Help: "test"})}
	front := &fakeFront{m: m, local: local}
	m.SetFront(front)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := m.PublicAddr(); got != "127.0.0.1:4321" {
		t.Errorf("PublicAddr = %q, want the front's bound address", got)
	}
	_ = m.proxies.InvalidateWorker(context.Background(), "w-dead")
	local.mu.Lock()
	closed := slices.Clone(local.closed)
	local.mu.Unlock()
	if !slices.Equal(closed, []string{"w-dead"}) {
		t.Errorf("local proxy told to close %v, want [w-dead]", closed)
	}
	st := m.Status()
	if len(st.Proxies) != 1 || !st.Proxies[0].Embedded || st.Proxies[0].Requests != 7 {
		t.Errorf("status proxies = %+v, want the local proxy's line", st.Proxies)
	}
	var dup prometheus.AlreadyRegisteredError
	if err := m.metrics.reg.Register(local.gauge); !errors.As(err, &dup) {
		t.Errorf("registering the local proxy's gauge again: %v; want it already on the master's registry", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	front.mu.Lock()
	defer front.mu.Unlock()
	if !slices.Equal(front.calls, []string{"start", "stop"}) {
		t.Errorf("front calls %v, want [start stop]", front.calls)
	}
	if front.stopCtx != nil {
		t.Errorf("the master's context had ended (%v) when the front was stopped", front.stopCtx)
	}
}

// TestStartNeedsFront: a public address without a public side is a
// configuration error naming PublicAddr, not a silently missing proxy.
func TestStartNeedsFront(t *testing.T) {
	m, err := New(Config{Secret: testSecret, AdminToken: "tok", PublicAddr: "127.0.0.1:0", Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	err = m.Start(context.Background())
	var fe *config.FieldError
	if !errors.As(err, &fe) || fe.Field != "PublicAddr" {
		t.Fatalf("Start without a front: %v, want a PublicAddr field error", err)
	}
}

// TestProxySettingsAndTable: the proxies get the proxy role key with a
// data directory (the cluster secret file without one), and the records
// survive a restart of the master until cleared.
func TestProxySettingsAndTable(t *testing.T) {
	bare, err := New(Config{Secret: testSecret, AdminToken: "tok", SecretFile: "/run/cluster.secret", Proxies: 2,
		ProxyCommand: []string{"cb", "proxy"}, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if s := bare.ProxySettings(); s.KeyFile != "/run/cluster.secret" || s.Durable || s.Proxies != 2 || len(s.PortKey) != 32 {
		t.Errorf("settings without a data dir = %+v", s)
	}
	bare.Close()

	dir := t.TempDir()
	open := func() *Master {
		m, err := New(Config{Secret: testSecret, AdminToken: "tok", DataDir: dir, Logger: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m := open()
	if s := m.ProxySettings(); s.KeyFile != filepath.Join(dir, secret.RoleProxy+".key") || !s.Durable {
		t.Errorf("settings with a data dir = %+v", s)
	}
	tab := m.ProxyTable()
	for _, r := range []ProxyRecord{
		{Name: "proxy-1", ID: supervise.ID{Pid: 11, Start: 1}, Args: []string{"cb", "proxy", "--name", "proxy-1"}},
		{Name: "proxy-2", ID: supervise.ID{Pid: 12, Start: 2}, Args: []string{"cb", "proxy", "--name", "proxy-2"}},
	} {
		if err := tab.Put(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := tab.Delete("proxy-2"); err != nil {
		t.Fatal(err)
	}
	m.Close()

	m = open()
	defer m.Close()
	all, err := m.ProxyTable().All()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 1 || all["proxy-1"].ID.Pid != 11 || !slices.Equal(all["proxy-1"].Args, []string{"cb", "proxy", "--name", "proxy-1"}) {
		t.Errorf("records after a restart = %+v, want proxy-1 only", all)
	}
	if err := m.ProxyTable().Clear(); err != nil {
		t.Fatal(err)
	}
	if all, _ := m.ProxyTable().All(); len(all) != 0 {
		t.Errorf("records after Clear = %+v", all)
	}
}
