// Package contract is the typed face of every RMI object in the cluster: one
// Go interface per remote object, the typed client stub that calls it, and
// the method names (private: only the stubs spell them).
//
// The server side declares `var _ contract.X = impl{}` next to the type it
// registers (or exports), and the stubs are checked against the same
// interfaces (contract_test.go), so a changed signature fails to compile or
// fails that test instead of arriving as bad arguments at run time.
//
// Values crossing the wire stay in internal/wire. Methods with more than two
// arguments take one struct, so arguments of the same type cannot be swapped.
//
// To add a method: add it to the interface, to its Client (with a private
// name constant), and to the server type; `go vet ./...` and the contract
// tests then point at whatever else disagrees.
package contract

import (
	"context"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// Caller calls a named object: *rmi.Client (waits for a connection) and
// *rmi.Conn (one connection) both are.
type Caller interface {
	Call(ctx context.Context, object, method string, reply any, args ...any) error
}

// RefCaller calls the object behind a remote reference: *rmi.Ref is one.
type RefCaller interface {
	Call(ctx context.Context, method string, reply any, args ...any) error
}

var (
	_ Caller    = (*rmi.Client)(nil)
	_ Caller    = (*rmi.Conn)(nil)
	_ RefCaller = (*rmi.Ref)(nil)
)

// call is a call with a result.
func call[R any](ctx context.Context, c Caller, object, method string, args ...any) (R, error) {
	var r R
	err := c.Call(ctx, object, method, &r, args...)
	return r, err
}

// callRef is call over a reference.
func callRef[R any](ctx context.Context, c RefCaller, method string, args ...any) (R, error) {
	var r R
	err := c.Call(ctx, method, &r, args...)
	return r, err
}

// ---- master: AppManager (cluster-secret holders only)

// AppManager is the master's wire.ObjAppManager.
type AppManager interface {
	List(ctx context.Context) ([]wire.App, error)
	Add(ctx context.Context, app wire.App) error
	Remove(ctx context.Context, name string) error
}

const (
	mAppList   = "List"
	mAppAdd    = "Add"
	mAppRemove = "Remove"
)

// AppManagerClient calls a master's AppManager.
type AppManagerClient struct{ C Caller }

var _ AppManager = AppManagerClient{}

func (c AppManagerClient) List(ctx context.Context) ([]wire.App, error) {
	return call[[]wire.App](ctx, c.C, wire.ObjAppManager, mAppList)
}

func (c AppManagerClient) Add(ctx context.Context, app wire.App) error {
	return c.C.Call(ctx, wire.ObjAppManager, mAppAdd, nil, app)
}

func (c AppManagerClient) Remove(ctx context.Context, name string) error {
	return c.C.Call(ctx, wire.ObjAppManager, mAppRemove, nil, name)
}

// ---- master: Bundles (workers)

// Bundles is the master's wire.ObjBundles: large apps' archives by chunks.
type Bundles interface {
	// BundleChunk is at most wire.BundleChunkSize bytes of an archive.
	BundleChunk(ctx context.Context, req wire.BundleChunkRequest) ([]byte, error)
}

const mBundleChunk = "BundleChunk"

// BundlesClient calls a master's Bundles.
type BundlesClient struct{ C Caller }

var _ Bundles = BundlesClient{}

func (c BundlesClient) BundleChunk(ctx context.Context, req wire.BundleChunkRequest) ([]byte, error) {
	return call[[]byte](ctx, c.C, wire.ObjBundles, mBundleChunk, req)
}

// ---- master: WorkerManager (workers)

// WorkerManager is the master's wire.ObjWorkerManager. The calling worker
// is the one registered on the connection: no method takes its id.
type WorkerManager interface {
	// Register is called on every (re)connection; info.ID must be the
	// connection's peer name. apps is the worker's WorkerApps, passed by
	// reference (rmi: a reference is a top-level argument, never a field).
	Register(ctx context.Context, info wire.WorkerInfo, insts []wire.InstanceInfo, apps *rmi.Ref) (wire.RegisterReply, error)
	// Leave announces that the caller stops: its instances migrate first.
	Leave(ctx context.Context) (wire.MigrationResult, error)
	// Report records the caller's load.
	Report(ctx context.Context, load wire.Load) error
	// Place finds or creates the instance of an app for a user.
	Place(ctx context.Context, req wire.PlaceRequest) (wire.Placement, error)
	// NewIdentity answers 0 if clientIP may get a new anonymous identity,
	// else the seconds until it may.
	NewIdentity(ctx context.Context, clientIP string) (int64, error)
	// Instances lists a user's instances of an app (landing pages).
	Instances(ctx context.Context, app, user string) ([]wire.InstanceInfo, error)
	InstanceRenamed(ctx context.Context, iid, name string) error
	InstanceShared(ctx context.Context, s wire.InstanceShare) error
	InstanceClosed(ctx context.Context, c wire.ClosedInstance) error
}

const (
	mRegister        = "Register"
	mLeave           = "Leave"
	mReport          = "Report"
	mPlace           = "Place"
	mNewIdentity     = "NewIdentity"
	mInstances       = "Instances"
	mInstanceRenamed = "InstanceRenamed"
	mInstanceShared  = "InstanceShared"
	mInstanceClosed  = "InstanceClosed"
)

// WorkerManagerClient calls a master's WorkerManager. Its Register takes
// the exported side of the reference the server receives (*rmi.Exported
// rather than *rmi.Ref), so it is checked by contract_test.go instead of
// an assertion.
type WorkerManagerClient struct{ C Caller }

// Register registers the calling worker, handing the master apps
// (rmi.Export of a WorkerApps).
func (c WorkerManagerClient) Register(ctx context.Context, info wire.WorkerInfo, insts []wire.InstanceInfo, apps *rmi.Exported) (wire.RegisterReply, error) {
	return call[wire.RegisterReply](ctx, c.C, wire.ObjWorkerManager, mRegister, info, insts, apps)
}

func (c WorkerManagerClient) Leave(ctx context.Context) (wire.MigrationResult, error) {
	return call[wire.MigrationResult](ctx, c.C, wire.ObjWorkerManager, mLeave)
}

func (c WorkerManagerClient) Report(ctx context.Context, load wire.Load) error {
	return c.C.Call(ctx, wire.ObjWorkerManager, mReport, nil, load)
}

func (c WorkerManagerClient) Place(ctx context.Context, req wire.PlaceRequest) (wire.Placement, error) {
	return call[wire.Placement](ctx, c.C, wire.ObjWorkerManager, mPlace, req)
}

func (c WorkerManagerClient) NewIdentity(ctx context.Context, clientIP string) (int64, error) {
	return call[int64](ctx, c.C, wire.ObjWorkerManager, mNewIdentity, clientIP)
}

func (c WorkerManagerClient) Instances(ctx context.Context, app, user string) ([]wire.InstanceInfo, error) {
	return call[[]wire.InstanceInfo](ctx, c.C, wire.ObjWorkerManager, mInstances, app, user)
}

func (c WorkerManagerClient) InstanceRenamed(ctx context.Context, iid, name string) error {
	return c.C.Call(ctx, wire.ObjWorkerManager, mInstanceRenamed, nil, iid, name)
}

func (c WorkerManagerClient) InstanceShared(ctx context.Context, s wire.InstanceShare) error {
	return c.C.Call(ctx, wire.ObjWorkerManager, mInstanceShared, nil, s)
}

func (c WorkerManagerClient) InstanceClosed(ctx context.Context, ci wire.ClosedInstance) error {
	return c.C.Call(ctx, wire.ObjWorkerManager, mInstanceClosed, nil, ci)
}

// ---- master: Accounts (workers)

// Accounts is the master's wire.ObjAccounts.
type Accounts interface {
	// Login checks a password under the login limits.
	Login(ctx context.Context, req wire.LoginRequest) (wire.LoginResult, error)
	// Verify is the older check, kept for older workers; a locked name
	// answers false.
	Verify(ctx context.Context, user, password string) (bool, error)
	// EndSession records a logout, passed on to every worker.
	EndSession(ctx context.Context, rev wire.SessionRevocation) error
}

const (
	mLogin      = "Login"
	mVerify     = "Verify"
	mEndSession = "EndSession" // also on WorkerApps
)

// AccountsClient calls a master's Accounts.
type AccountsClient struct{ C Caller }

var _ Accounts = AccountsClient{}

func (c AccountsClient) Login(ctx context.Context, req wire.LoginRequest) (wire.LoginResult, error) {
	return call[wire.LoginResult](ctx, c.C, wire.ObjAccounts, mLogin, req)
}

func (c AccountsClient) Verify(ctx context.Context, user, password string) (bool, error) {
	return call[bool](ctx, c.C, wire.ObjAccounts, mVerify, user, password)
}

func (c AccountsClient) EndSession(ctx context.Context, rev wire.SessionRevocation) error {
	return c.C.Call(ctx, wire.ObjAccounts, mEndSession, nil, rev)
}

// ---- master: Router (proxies)

// Router is the master's wire.ObjRouter.
type Router interface {
	Route(ctx context.Context, req wire.RouteRequest) (wire.RouteReply, error)
	// Apps lists the public applications (home page).
	Apps(ctx context.Context) ([]wire.App, error)
	// Subscribe asks for route invalidations over the calling connection,
	// whose node must have registered a Proxy as wire.ObjProxy.
	Subscribe(ctx context.Context, name string) (wire.SubscribeReply, error)
	ProxyReport(ctx context.Context, r wire.ProxyReport) error
	// OpenSession opens an automation session for a one-step CDP
	// connection (GET /cdp?app=…); a refusal is an answer (Status), not
	// an error. It may wait for a browser (the sessions' queue).
	OpenSession(ctx context.Context, req wire.SessionOpen) (wire.SessionOpened, error)
	// CloseSession ends a session OpenSession opened whose client the
	// proxy could not connect to its browser.
	CloseSession(ctx context.Context, id string) error
}

const (
	mRoute        = "Route"
	mApps         = "Apps"
	mSubscribe    = "Subscribe"
	mProxyReport  = "ProxyReport"
	mOpenSession  = "OpenSession"
	mCloseSession = "CloseSession"
)

// RouterClient calls a master's Router.
type RouterClient struct{ C Caller }

var _ Router = RouterClient{}

func (c RouterClient) Route(ctx context.Context, req wire.RouteRequest) (wire.RouteReply, error) {
	return call[wire.RouteReply](ctx, c.C, wire.ObjRouter, mRoute, req)
}

func (c RouterClient) Apps(ctx context.Context) ([]wire.App, error) {
	return call[[]wire.App](ctx, c.C, wire.ObjRouter, mApps)
}

func (c RouterClient) Subscribe(ctx context.Context, name string) (wire.SubscribeReply, error) {
	return call[wire.SubscribeReply](ctx, c.C, wire.ObjRouter, mSubscribe, name)
}

func (c RouterClient) ProxyReport(ctx context.Context, r wire.ProxyReport) error {
	return c.C.Call(ctx, wire.ObjRouter, mProxyReport, nil, r)
}

func (c RouterClient) OpenSession(ctx context.Context, req wire.SessionOpen) (wire.SessionOpened, error) {
	return call[wire.SessionOpened](ctx, c.C, wire.ObjRouter, mOpenSession, req)
}

func (c RouterClient) CloseSession(ctx context.Context, id string) error {
	return c.C.Call(ctx, wire.ObjRouter, mCloseSession, nil, id)
}

// ---- master: Cluster (workers and proxies)

// Cluster is the master's wire.ObjCluster.
type Cluster interface {
	// Info tells a joining process how to reach the gossip layer and hands
	// it the keys of its role.
	Info(ctx context.Context) (wire.ClusterInfo, error)
	Status(ctx context.Context) (wire.ClusterStatus, error)
}

const (
	mInfo   = "Info"
	mStatus = "Status"
)

// ClusterClient calls a master's Cluster.
type ClusterClient struct{ C Caller }

var _ Cluster = ClusterClient{}

func (c ClusterClient) Info(ctx context.Context) (wire.ClusterInfo, error) {
	return call[wire.ClusterInfo](ctx, c.C, wire.ObjCluster, mInfo)
}

func (c ClusterClient) Status(ctx context.Context) (wire.ClusterStatus, error) {
	return call[wire.ClusterStatus](ctx, c.C, wire.ObjCluster, mStatus)
}

// ---- master: InstanceState (workers)

// InstanceState is the master's wire.ObjInstanceState: instances' shared
// state and browser snapshots. Writes are checked against the caller (it
// must host the instance) and the placement epoch.
type InstanceState interface {
	Write(ctx context.Context, w wire.StateWrite) (wire.StateWriteReply, error)
	// Get reads one page of an instance's state (after: the previous
	// page's last key).
	Get(ctx context.Context, iid, after string) (wire.InstanceState, error)
	SaveBrowser(ctx context.Context, req wire.SaveBrowser) error
	// Browsers reads one page of an instance's browser snapshots.
	Browsers(ctx context.Context, iid, after string) (wire.BrowserSnapshots, error)
}

const (
	mStateWrite       = "Write"
	mStateGet         = "Get"
	mStateSaveBrowser = "SaveBrowser"
	mBrowsers         = "Browsers" // also on WorkerApps
)

// InstanceStateClient calls a master's InstanceState.
type InstanceStateClient struct{ C Caller }

var _ InstanceState = InstanceStateClient{}

func (c InstanceStateClient) Write(ctx context.Context, w wire.StateWrite) (wire.StateWriteReply, error) {
	return call[wire.StateWriteReply](ctx, c.C, wire.ObjInstanceState, mStateWrite, w)
}

func (c InstanceStateClient) Get(ctx context.Context, iid, after string) (wire.InstanceState, error) {
	return call[wire.InstanceState](ctx, c.C, wire.ObjInstanceState, mStateGet, iid, after)
}

func (c InstanceStateClient) SaveBrowser(ctx context.Context, req wire.SaveBrowser) error {
	return c.C.Call(ctx, wire.ObjInstanceState, mStateSaveBrowser, nil, req)
}

func (c InstanceStateClient) Browsers(ctx context.Context, iid, after string) (wire.BrowserSnapshots, error) {
	return call[wire.BrowserSnapshots](ctx, c.C, wire.ObjInstanceState, mBrowsers, iid, after)
}

// ---- master: JobQueue (workers)

// JobQueue is the master's wire.ObjJobQueue: a worker's reports on the
// attempts it runs (the worker is the one registered on the connection).
type JobQueue interface {
	// Working renews the attempt's lease.
	Working(ctx context.Context, p wire.JobProgress) error
	// Ready is the start gate: load the page when the answer's WaitMs is
	// 0, else ask again after that long. It renews the lease too.
	Ready(ctx context.Context, p wire.JobProgress) (wire.JobGo, error)
	// Started says when the page's request actually left after the go.
	Started(ctx context.Context, s wire.JobStarted) error
	// Request holds one request of the job's browser to its host's
	// budget: a go (WaitMs 0) or a wait, then sent and ended.
	Request(ctx context.Context, r wire.JobRequest) (wire.JobGo, error)
	// Done ends the attempt (success or not).
	Done(ctx context.Context, o wire.JobOutcome) error
}

const (
	mJobWorking = "Working"
	mJobReady   = "Ready"
	mJobStarted = "Started"
	mJobRequest = "Request"
	mJobDone    = "Done"
)

// JobQueueClient calls a master's JobQueue.
type JobQueueClient struct{ C Caller }

var _ JobQueue = JobQueueClient{}

func (c JobQueueClient) Working(ctx context.Context, p wire.JobProgress) error {
	return c.C.Call(ctx, wire.ObjJobQueue, mJobWorking, nil, p)
}

func (c JobQueueClient) Ready(ctx context.Context, p wire.JobProgress) (wire.JobGo, error) {
	return call[wire.JobGo](ctx, c.C, wire.ObjJobQueue, mJobReady, p)
}

func (c JobQueueClient) Started(ctx context.Context, s wire.JobStarted) error {
	return c.C.Call(ctx, wire.ObjJobQueue, mJobStarted, nil, s)
}

func (c JobQueueClient) Request(ctx context.Context, r wire.JobRequest) (wire.JobGo, error) {
	return call[wire.JobGo](ctx, c.C, wire.ObjJobQueue, mJobRequest, r)
}

func (c JobQueueClient) Done(ctx context.Context, o wire.JobOutcome) error {
	return c.C.Call(ctx, wire.ObjJobQueue, mJobDone, nil, o)
}

// ---- worker: WorkerApps (the master, over the reference from Register)

// WorkerApps is what a worker exports to the master when it registers: the
// part of its Application Manager the master drives, and nothing else.
type WorkerApps interface {
	AddApplication(ctx context.Context, app wire.App) error
	RemoveApplication(ctx context.Context, name string) error
	CreateInstance(ctx context.Context, req wire.CreateInstance) error
	CloseInstance(ctx context.Context, c wire.ClosedInstance) error
	// SnapshotInstance stores fresh snapshots of an instance's browsers at
	// the master (before a migration).
	SnapshotInstance(ctx context.Context, iid string) error
	// ResumeInstance gives an instance's browsers back the input
	// SnapshotInstance held, when the migration did not happen.
	ResumeInstance(ctx context.Context, iid string) error
	// ReleaseInstance drops a migrated instance, sending its clients on
	// to the same URLs.
	ReleaseInstance(ctx context.Context, f wire.FencedInstance) error
	// OpenBrowserFor answers the id of the user's browser in an instance.
	OpenBrowserFor(ctx context.Context, req wire.OpenBrowser) (string, error)
	// Grant sets a role on an instance or one of its browsers (admin).
	Grant(ctx context.Context, g wire.BrowserGrant) error
	RevokeSessions(ctx context.Context, rev wire.Revocation) error
	EndSession(ctx context.Context, rev wire.SessionRevocation) error
	Browsers(ctx context.Context, iid string) ([]wire.BrowserInfo, error)
	// RunJob answers at once: nil = accepted (the worker reports to the
	// JobQueue), else refused and the job stays queued.
	RunJob(ctx context.Context, run wire.JobRun) error
	CancelJob(ctx context.Context, id string, attempt int) error
	// Ping answers at once: the master asks it before it believes gossip
	// that a worker it still has a connection to failed.
	Ping(ctx context.Context) error
}

const (
	mAddApplication    = "AddApplication"
	mRemoveApplication = "RemoveApplication"
	mCreateInstance    = "CreateInstance"
	mCloseInstance     = "CloseInstance"
	mSnapshotInstance  = "SnapshotInstance"
	mReleaseInstance   = "ReleaseInstance"
	mResumeInstance    = "ResumeInstance"
	mOpenBrowserFor    = "OpenBrowserFor"
	mGrant             = "Grant"
	mRevokeSessions    = "RevokeSessions"
	mRunJob            = "RunJob"
	mCancelJob         = "CancelJob"
	mPing              = "Ping"
)

// WorkerAppsClient calls a worker's WorkerApps through the reference it
// registered with.
type WorkerAppsClient struct{ R RefCaller }

var _ WorkerApps = WorkerAppsClient{}

func (c WorkerAppsClient) AddApplication(ctx context.Context, app wire.App) error {
	return c.R.Call(ctx, mAddApplication, nil, app)
}

func (c WorkerAppsClient) RemoveApplication(ctx context.Context, name string) error {
	return c.R.Call(ctx, mRemoveApplication, nil, name)
}

func (c WorkerAppsClient) CreateInstance(ctx context.Context, req wire.CreateInstance) error {
	return c.R.Call(ctx, mCreateInstance, nil, req)
}

func (c WorkerAppsClient) CloseInstance(ctx context.Context, ci wire.ClosedInstance) error {
	return c.R.Call(ctx, mCloseInstance, nil, ci)
}

func (c WorkerAppsClient) SnapshotInstance(ctx context.Context, iid string) error {
	return c.R.Call(ctx, mSnapshotInstance, nil, iid)
}

func (c WorkerAppsClient) ResumeInstance(ctx context.Context, iid string) error {
	return c.R.Call(ctx, mResumeInstance, nil, iid)
}

func (c WorkerAppsClient) ReleaseInstance(ctx context.Context, f wire.FencedInstance) error {
	return c.R.Call(ctx, mReleaseInstance, nil, f)
}

func (c WorkerAppsClient) OpenBrowserFor(ctx context.Context, req wire.OpenBrowser) (string, error) {
	return callRef[string](ctx, c.R, mOpenBrowserFor, req)
}

func (c WorkerAppsClient) Grant(ctx context.Context, g wire.BrowserGrant) error {
	return c.R.Call(ctx, mGrant, nil, g)
}

func (c WorkerAppsClient) RevokeSessions(ctx context.Context, rev wire.Revocation) error {
	return c.R.Call(ctx, mRevokeSessions, nil, rev)
}

func (c WorkerAppsClient) EndSession(ctx context.Context, rev wire.SessionRevocation) error {
	return c.R.Call(ctx, mEndSession, nil, rev)
}

func (c WorkerAppsClient) Browsers(ctx context.Context, iid string) ([]wire.BrowserInfo, error) {
	return callRef[[]wire.BrowserInfo](ctx, c.R, mBrowsers, iid)
}

func (c WorkerAppsClient) Ping(ctx context.Context) error {
	return c.R.Call(ctx, mPing, nil)
}

func (c WorkerAppsClient) RunJob(ctx context.Context, run wire.JobRun) error {
	return c.R.Call(ctx, mRunJob, nil, run)
}

func (c WorkerAppsClient) CancelJob(ctx context.Context, id string, attempt int) error {
	return c.R.Call(ctx, mCancelJob, nil, id, attempt)
}

// ---- proxy: Proxy (the master, over the proxy's own connection)

// Proxy is what a proxy registers as wire.ObjProxy: the master's route
// invalidations.
type Proxy interface {
	// Invalidate drops the routes of closed or moved instances.
	Invalidate(ctx context.Context, iids []string) error
	// InvalidateWorker drops every route to a dead worker.
	InvalidateWorker(ctx context.Context, workerID string) error
}

const (
	mInvalidate       = "Invalidate"
	mInvalidateWorker = "InvalidateWorker"
)

// ProxyClient calls a proxy's Proxy.
type ProxyClient struct{ C Caller }

var _ Proxy = ProxyClient{}

func (c ProxyClient) Invalidate(ctx context.Context, iids []string) error {
	return c.C.Call(ctx, wire.ObjProxy, mInvalidate, nil, iids)
}

func (c ProxyClient) InvalidateWorker(ctx context.Context, workerID string) error {
	return c.C.Call(ctx, wire.ObjProxy, mInvalidateWorker, nil, workerID)
}
