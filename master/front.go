package master

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/secret"
	"github.com/cloudbrowser-go/cloudbrowser/internal/supervise"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/state"
)

// The public side (one proxy embedded in the master's process, or proxy
// processes under a supervisor) is assembled by the program that runs the
// master (cmd/cloudbrowser), so that the control plane does not depend on
// the proxy package. This file is what that assembly gets from the master.

// Front is the public side put in front of a master with SetFront.
type Front interface {
	// Start serves Config.PublicAddr and returns the address as bound.
	// The master calls it from Start once its RMI and admin listeners are
	// up: proxies dial the one and fall back to the other.
	Start(ctx context.Context) (publicAddr string, err error)
	// Stop stops serving users and waits until it has. Close calls it
	// first, so users get answers until the end, even if Start failed or
	// never ran.
	Stop(ctx context.Context)
}

// SetFront gives the master its public side; call it before Start. A
// master whose Config.PublicAddr is set refuses to start without one.
func (m *Master) SetFront(f Front) { m.front = f }

// LocalProxy is a proxy running in the master's process. It is told of
// dead workers in process rather than over RMI, and it reports itself in
// the cluster status and the master's metrics since it has no connection
// of its own to be seen through.
type LocalProxy interface {
	// CloseWorker ends the WebSockets the proxy relays to a dead worker
	// and returns how many it ended.
	CloseWorker(workerID string) int
	// Status is the proxy's line in the cluster status.
	Status() wire.ProxyStatus
	// Collectors are the proxy's metrics, served on the master's /metrics.
	Collectors() []prometheus.Collector
}

// SetLocalProxy subscribes p to the master's worker invalidations and adds
// it to the status and the metrics; call it at most once, from
// Front.Start at the latest.
func (m *Master) SetLocalProxy(p LocalProxy) {
	m.metrics.reg.MustRegister(p.Collectors()...)
	m.proxies.local.Store(&p)
}

// ProxySettings is how the master's proxies are to be configured:
// Config's public side and what the master derived from it.
type ProxySettings struct {
	// PublicAddr is Config.PublicAddr, as configured (port 0 = any).
	PublicAddr string
	// Proxies is Config.Proxies (0 = one proxy embedded in the process).
	Proxies int
	// Command starts a proxy process (Config.ProxyCommand); Output gets
	// its stdout and stderr (Config.ChildOutput, nil = discarded).
	Command []string
	Output  io.Writer
	// KeyFile is the key a proxy process proves its role with
	// (--secret-file).
	KeyFile string
	// PublicURL and TrustForwardedProto are passed on to proxy processes;
	// PublicHTTPS is what the URL means for an embedded proxy.
	PublicURL                        string
	PublicHTTPS, TrustForwardedProto bool
	// HopKey signs the proxy-to-worker HTTP hop; PortKey proves to
	// processes about to share the public port that its proxies are of
	// this cluster.
	HopKey, PortKey []byte
	// Durable: the master has a data directory, so proxy processes can
	// outlive it, recorded in ProxyTable, and be adopted by the next one.
	Durable bool
	// Logger is the master's logger.
	Logger zerolog.Logger
}

// ProxySettings returns the settings of the master's proxies.
func (m *Master) ProxySettings() ProxySettings {
	keyFile := m.RoleKeyFile(secret.RoleProxy)
	if keyFile == "" {
		keyFile = m.cfg.SecretFile // no data dir: the cluster secret, role still declared
	}
	return ProxySettings{
		PublicAddr: m.cfg.PublicAddr, Proxies: m.cfg.Proxies, Command: m.cfg.ProxyCommand, Output: m.cfg.ChildOutput,
		KeyFile: keyFile, PublicURL: m.cfg.PublicURL, PublicHTTPS: m.scheme.AlwaysHTTPS,
		TrustForwardedProto: m.scheme.TrustForwardedProto, HopKey: m.hopKey, PortKey: m.portKey,
		Durable: m.cfg.DataDir != "", Logger: m.log,
	}
}

// portKey is what proxies prove their cluster with on the public port.
func portKey(clusterSecret string) []byte { return secret.Derive(clusterSecret, "public-port", 32) }

// PublicHandler serves the admin endpoints on the public port, as an
// embedded proxy's fallback: /metrics there needs the admin token too,
// since that port faces end users.
func (m *Master) PublicHandler() http.Handler { return m.admin.handler(true) }

// LocalRoutes answers route lookups in process, for a proxy embedded in
// the master: the answers proxy processes get from the Router over RMI.
type LocalRoutes struct{ m *Master }

// LocalRoutes returns the master's in-process router.
func (m *Master) LocalRoutes() LocalRoutes { return LocalRoutes{m} }

// Route answers where a request goes without waiting on anything but the
// master's own locks.
func (r LocalRoutes) Route(req wire.RouteRequest) (wire.RouteReply, error) {
	return r.m.workers.Route(req)
}

// Apps lists the public applications for the home page.
func (r LocalRoutes) Apps(ctx context.Context) ([]wire.App, error) {
	return routerService(r).Apps(ctx)
}

// OpenSession and CloseSession are the Router's, for the embedded proxy's
// one-step CDP connections.
func (r LocalRoutes) OpenSession(ctx context.Context, req wire.SessionOpen) (wire.SessionOpened, error) {
	return routerService(r).OpenSession(ctx, req)
}

func (r LocalRoutes) CloseSession(ctx context.Context, id string) error {
	return routerService(r).CloseSession(ctx, id)
}

// The Reverse Proxy Manager's processes outlive the master: a master that
// crashes (kill -9) leaves its proxies serving open sockets and cached
// routes, and the next master on the same data directory adopts them
// instead of starting duplicates. Each proxy's identity (pid and start
// time) and command line are kept in state.db, since only the master's
// store survives it there.

// bucketProxies holds one ProxyRecord per proxy name.
const bucketProxies = "proxies"

// ProxyRecord is a proxy process a master started.
type ProxyRecord struct {
	Name string       `json:"name"`
	ID   supervise.ID `json:"id"`
	Args []string     `json:"args"` // argv, with the executable first
}

// ProxyTable is the durable record of the proxy processes the master
// started (in memory without a data directory).
type ProxyTable struct{ st *state.Store }

// ProxyTable returns the master's proxy records.
func (m *Master) ProxyTable() ProxyTable { return ProxyTable{m.state} }

// Put records r under r.Name.
func (t ProxyTable) Put(r ProxyRecord) error {
	if err := t.st.Put(bucketProxies, r.Name, r); err != nil {
		return fmt.Errorf("proxy record %s: %w", r.Name, err)
	}
	return nil
}

// All returns the records by name.
func (t ProxyTable) All() (map[string]ProxyRecord, error) {
	out := map[string]ProxyRecord{}
	if err := state.Each(t.st, bucketProxies, func(_ string, r ProxyRecord) { out[r.Name] = r }); err != nil {
		return out, fmt.Errorf("proxy records: %w", err)
	}
	return out, nil
}

// Delete forgets the record of proxy name.
func (t ProxyTable) Delete(name string) error {
	if err := t.st.Delete(bucketProxies, name); err != nil {
		return fmt.Errorf("proxy record %s: %w", name, err)
	}
	return nil
}

// Clear forgets every record: after a clean stop the proxies are gone.
func (t ProxyTable) Clear() error {
	if err := t.st.DropBucket(bucketProxies); err != nil {
		return fmt.Errorf("proxy records: %w", err)
	}
	return nil
}
