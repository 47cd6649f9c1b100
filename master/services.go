package master

import (
	"context"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/cdpticket"
	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/ids"
	"github.com/cloudbrowser-go/cloudbrowser/internal/quota"
	"github.com/cloudbrowser-go/cloudbrowser/internal/secret"
	"github.com/cloudbrowser-go/cloudbrowser/internal/session"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/auth"
	"github.com/cloudbrowser-go/cloudbrowser/master/registry"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// The types below are what the master registers on its RMI node. They are
// thin so that only the intended methods are remotely callable.

// registered is an RMI object and the roles that may call it. A peer that
// proved the cluster secret (rmi.RoleCluster) may call everything.
type registered struct {
	obj   any
	roles []string
}

// serviceRoles is who calls what: workers register and report, place
// instances and check logins; proxies route; both read the cluster info.
// The Application Manager is for holders of the cluster secret only;
// workers fetch large bundles from Bundles.
func serviceRoles(m *Master) map[string]registered {
	return map[string]registered{
		wire.ObjAppManager:    {appService{m}, nil},
		wire.ObjBundles:       {bundleService{m}, []string{secret.RoleWorker}},
		wire.ObjWorkerManager: {workerService{m}, []string{secret.RoleWorker}},
		wire.ObjAccounts:      {m.access.Service(), []string{secret.RoleWorker}},
		wire.ObjRouter:        {routerService{m}, []string{secret.RoleProxy}},
		wire.ObjCluster:       {clusterService{m}, []string{secret.RoleWorker, secret.RoleProxy}},
		wire.ObjInstanceState: {stateService{m}, []string{secret.RoleWorker}},
		wire.ObjJobQueue:      {jobQueueService{m}, []string{secret.RoleWorker}},
	}
}

// gossipKey encrypts the memberlist traffic; workers and proxies get it
// from Cluster.Info.
func gossipKey(clusterSecret string) []byte { return secret.Derive(clusterSecret, "gossip", 32) }

// keysFor returns the keys a role needs beyond its own role key.
func keysFor(clusterSecret, role string) wire.ClusterKeys {
	k := wire.ClusterKeys{Gossip: gossipKey(clusterSecret)}
	if role == secret.RoleWorker || role == rmi.RoleCluster {
		k.Session = session.Key(clusterSecret, "session")
		k.AdminSession = session.Key(clusterSecret, "admin-session")
		k.Anonymous = session.Key(clusterSecret, "anonymous-identity")
		k.Automation = session.Key(clusterSecret, cdpticket.Purpose)
	}
	return k
}

// appService is registered as wire.ObjAppManager.
type appService struct{ m *Master }

var _ contract.AppManager = appService{}

// List returns every application.
func (s appService) List(ctx context.Context) ([]wire.App, error) { return s.m.apps.List(), nil }

// Add installs or replaces an application.
func (s appService) Add(ctx context.Context, app wire.App) error {
	_, _, err := s.m.apps.Add(ctx, app, auth.AdminPrincipal)
	return err
}

// bundleService serves large apps' archives to workers.
type bundleService struct{ m *Master }

var _ contract.Bundles = bundleService{}

// BundleChunk is part of a large app's archive, fetched by workers.
func (s bundleService) BundleChunk(ctx context.Context, req wire.BundleChunkRequest) ([]byte, error) {
	return s.m.apps.chunk(req.Mount, req.Version, req.Offset)
}

// Remove uninstalls an application.
func (s appService) Remove(ctx context.Context, name string) error {
	return s.m.apps.Remove(ctx, name, auth.AdminPrincipal)
}

// workerService is registered as wire.ObjWorkerManager. The caller of
// every method but Register is the worker registered on the connection
// (registry.Peer.Caller): no argument names it.
type workerService struct{ m *Master }

var _ contract.WorkerManager = workerService{}

// Register is called by a worker on every (re)connection, passing its
// contract.WorkerApps as a remote reference. The worker id must be the
// name the connection's peer authenticated with in the handshake, so that
// a connection speaks for one worker only, and that name must be proven
// with the id's own key unless the id is new (registry.Gate.Enrol).
func (s workerService) Register(ctx context.Context, info wire.WorkerInfo, insts []wire.InstanceInfo, appMgr *rmi.Ref) (wire.RegisterReply, error) {
	p := registry.PeerFrom(ctx)
	c := p.Conn
	if appMgr != nil && appMgr.Conn() != c {
		return wire.RegisterReply{}, wire.Err(wire.CodeInvalid, "register: reference from another connection")
	}
	if c == nil || p.Name != info.ID {
		return wire.RegisterReply{}, wire.Errorf(wire.CodeForbidden, "register: worker id %q is not the connection's peer name %q", info.ID, p.Name)
	}
	if !ids.ValidWorker(info.ID) {
		return wire.RegisterReply{}, wire.Errorf(wire.CodeInvalid, "register: invalid worker id %q (%s)", info.ID, ids.WorkerRule)
	}
	fresh, err := s.m.workers.Gate.Enrol(info.ID, p.NameProven || p.ClusterSecret)
	if err != nil {
		s.m.log.Warn().Str("worker", info.ID).Str("peer", c.RemoteAddr().String()).Err(err).Msg("worker registration refused")
		return wire.RegisterReply{}, err
	}
	fenced, err := s.m.workers.Register(info, insts, appMgr)
	if err != nil {
		return wire.RegisterReply{}, err
	}
	var workerKey string
	if fresh {
		workerKey = secret.WorkerKey(s.m.cfg.Secret, info.ID)
		s.m.log.Info().Str("worker", info.ID).Msg("worker id enrolled: its own key was handed to it")
	}
	go func() {
		select {
		case <-c.Done():
			s.m.workers.Disconnected(info.ID, c)
		case <-s.m.ctx.Done():
		}
	}()
	return wire.RegisterReply{Apps: s.m.apps.listForWorkers(), Fenced: fenced, Revoked: s.m.access.Accounts().Revocations(),
		ReportPeriod: int64(s.m.cfg.ReportPeriod), MasterID: s.m.id, Quotas: s.m.cfg.Quotas,
		HopKey: s.m.hopKey, MetricsToken: s.m.cfg.MetricsToken,
		EndedSessions: s.m.access.Ended().List(), AdminTag: s.m.access.Dashboard().Tag(),
		PublicHTTPS: s.m.scheme.AlwaysHTTPS, TrustForwardedProto: s.m.scheme.TrustForwardedProto, WorkerKey: workerKey}, nil
}

// Leave is a worker's announcement that it stops (SIGTERM): its instances
// migrate to other workers before it answers.
func (s workerService) Leave(ctx context.Context) (wire.MigrationResult, error) {
	wid, err := registry.PeerFrom(ctx).Caller()
	if err != nil {
		return wire.MigrationResult{}, err
	}
	return s.m.workers.Moves.Leave(ctx, wid)
}

// Report records the calling worker's load.
func (s workerService) Report(ctx context.Context, load wire.Load) error {
	wid, err := registry.PeerFrom(ctx).Caller()
	if err != nil {
		return err
	}
	return s.m.workers.Report(wid, load)
}

// Place finds or creates the instance of an app for a user. req.From, if
// set, must be the calling worker.
func (s workerService) Place(ctx context.Context, req wire.PlaceRequest) (wire.Placement, error) {
	if req.From != "" {
		if err := registry.PeerFrom(ctx).Is(req.From); err != nil {
			return wire.Placement{}, err
		}
	}
	return s.m.workers.Placer.Place(ctx, req)
}

// NewIdentity asks whether a client address may get a new anonymous
// identity now (the per-address token bucket, cluster-wide): 0 = yes, else
// the seconds until it may.
func (s workerService) NewIdentity(ctx context.Context, clientIP string) (int64, error) {
	ok, wait := s.m.identities.Take(quota.AddrKey(clientIP), s.m.cfg.Clock.Now())
	if ok {
		return 0, nil
	}
	s.m.metrics.refusals.WithLabelValues(wire.QuotaNewIdentities).Inc()
	s.m.log.Info().Str("client_ip", clientIP).Dur("retry_after", wait).Msg("new anonymous identity refused: quota")
	return max(int64(wait/time.Second), 1), nil
}

// Instances lists a user's instances of an app (for landing pages).
func (s workerService) Instances(ctx context.Context, app, user string) ([]wire.InstanceInfo, error) {
	return s.m.workers.UserInstances(app, user), nil
}

// InstanceRenamed records the name an owner gave an instance of the
// calling worker.
func (s workerService) InstanceRenamed(ctx context.Context, iid, name string) error {
	wid, err := registry.PeerFrom(ctx).Caller()
	if err != nil {
		return err
	}
	return s.m.workers.Rename(wid, iid, name)
}

// InstanceShared records a grant on an instance of the calling worker to a
// named user.
func (s workerService) InstanceShared(ctx context.Context, sh wire.InstanceShare) error {
	wid, err := registry.PeerFrom(ctx).Caller()
	if err != nil {
		return err
	}
	return s.m.workers.Share(wid, sh.Instance, sh.Principal, sh.Role)
}

// InstanceClosed tells the master the calling worker closed one of its
// instances.
func (s workerService) InstanceClosed(ctx context.Context, c wire.ClosedInstance) error {
	wid, err := registry.PeerFrom(ctx).Caller()
	if err != nil {
		return err
	}
	if err := s.m.workers.InstanceClosed(wid, c); err != nil {
		return err
	}
	// Closed for good: its shared state goes too, and its automation
	// session ends.
	if err := s.m.istate.drop(c.ID); err != nil {
		s.m.log.Error().Str("instance", c.ID).Err(err).Msg("could not delete a closed instance's shared state")
	}
	s.m.sessions.InstanceClosed(c.ID)
	return nil
}

// routerService is registered as wire.ObjRouter, for the proxies.
type routerService struct{ m *Master }

var _ contract.Router = routerService{}

// Route answers where a request goes.
func (s routerService) Route(ctx context.Context, req wire.RouteRequest) (wire.RouteReply, error) {
	return s.m.workers.Route(req)
}

// Apps lists the public applications for the home page.
func (s routerService) Apps(ctx context.Context) ([]wire.App, error) {
	var out []wire.App
	for _, a := range s.m.apps.List() {
		if a.Public && !a.Disabled {
			a.Files, a.Manifest = nil, nil
			out = append(out, a)
		}
	}
	return out, nil
}

// Subscribe asks for route invalidations over the calling connection; the
// caller must have registered a wire.ObjProxy object. The reply carries the
// key the proxy signs relayed requests with.
func (s routerService) Subscribe(ctx context.Context, name string) (wire.SubscribeReply, error) {
	s.m.proxies.add(registry.PeerFrom(ctx).Conn, name)
	return wire.SubscribeReply{HopKey: s.m.hopKey, PortKey: s.m.portKey}, nil
}

// ProxyReport records a proxy's counters for the dashboard.
func (s routerService) ProxyReport(ctx context.Context, r wire.ProxyReport) error {
	s.m.proxies.report(registry.PeerFrom(ctx).Conn, r, time.Now())
	return nil
}

// OpenSession opens an automation session for a proxy's one-step CDP
// connection (master/sessions, cdp.go).
func (s routerService) OpenSession(ctx context.Context, req wire.SessionOpen) (wire.SessionOpened, error) {
	return s.m.sessions.OpenCDP(ctx, req), nil
}

// CloseSession ends a one-step session the proxy could not connect.
func (s routerService) CloseSession(ctx context.Context, id string) error {
	return s.m.sessions.Unconnected(ctx, id)
}

// clusterService is registered as wire.ObjCluster.
type clusterService struct{ m *Master }

var _ contract.Cluster = clusterService{}

// Info tells a joining process how to reach the gossip layer and hands it
// the keys of its role.
func (s clusterService) Info(ctx context.Context) (wire.ClusterInfo, error) {
	role := registry.PeerFrom(ctx).Role
	return wire.ClusterInfo{MasterID: s.m.id, GossipAddr: s.m.gossip.addr(), Keys: keysFor(s.m.cfg.Secret, role)}, nil
}

// Status is the cluster status (the same as the admin API's).
func (s clusterService) Status(ctx context.Context) (wire.ClusterStatus, error) {
	return s.m.Status(), nil
}
