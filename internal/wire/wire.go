// Package wire holds the values that cross RMI between master, workers and
// proxies, and the names of the objects each process registers. Keeping them
// in one place keeps the three sides in agreement; the objects' methods are
// typed in internal/contract.
package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Names of objects registered with rmi.Node.Register.
const (
	// On the master.
	ObjAppManager    = "AppManager"
	ObjWorkerManager = "WorkerManager"
	ObjRouter        = "Router"
	ObjCluster       = "Cluster"
	ObjAccounts      = "Accounts"
	// ObjBundles serves large apps' archives to workers by chunks; apart
	// from the Application Manager, which workers may not call.
	ObjBundles = "Bundles"
	// On a proxy (called back by the master over the proxy's connection).
	ObjProxy = "Proxy"
)

// SessionRevocation ends one session (a logout): values carrying its id
// are refused until Expires (Unix s), when every value it had has expired.
// User is the session's user, for logs and closing its sockets; "" for a
// dashboard session.
type SessionRevocation struct {
	ID      string `codec:"id" json:"id"`
	User    string `codec:"user" json:"user"`
	Expires int64  `codec:"exp" json:"expires"`
}

// LoginRequest asks the master to check a password.
type LoginRequest struct {
	User     string `codec:"user"`
	Password string `codec:"pw"`
	// ClientIP is the end user's address as the worker saw it ("" =
	// unknown: only the per-name limit applies).
	ClientIP  string `codec:"ip"`
	RequestID string `codec:"rid"` // for the master's logs
}

// LoginResult answers a LoginRequest. RetryAfter > 0 means the name or the
// address is locked after too many failures: the password was not checked,
// and the user may retry in that many seconds. OK is then false.
type LoginResult struct {
	OK         bool  `codec:"ok"`
	RetryAfter int64 `codec:"retry"` // seconds
}

// Error codes carried by rmi.RemoteError.Code.
const (
	CodeUnknownApp      = "unknown_app"
	CodeAppDisabled     = "app_disabled"
	CodeUnknownInstance = "unknown_instance"
	CodeInstanceLost    = "instance_lost"
	// CodeInstanceMerged: a duplicate instance (its worker came back after
	// being declared dead) was closed in favour of the one that took its
	// place; its users go on at the app's URL.
	CodeInstanceMerged = "instance_merged"
	// CodeInstanceMoving: the instance's worker died and it is being placed
	// again (or waits for a live worker): retry shortly.
	CodeInstanceMoving = "instance_moving"
	CodeNoWorkers      = "no_workers"
	// CodeStarting: no worker yet because the master has just started
	// (none has registered since): the cluster is coming up, not broken.
	CodeStarting      = "starting"
	CodeUnknownWorker = "unknown_worker"
	CodeInvalid       = "invalid"
	CodeUnauthorized  = "unauthorized"
	// CodeForbidden: the caller may not do this, e.g. a worker's call
	// that names another worker, or comes before it registered.
	CodeForbidden   = "forbidden"
	CodeUnknownUser = "unknown_user"
	CodePoolLimit   = "pool_limit" // a browser pool's or the worker's browser limit
	CodeQuota       = "quota"      // a per-user or per-address quota (Quotas); the message says which
)

// Error is an error with a code that survives an RMI hop (the message
// travels; the cause stays on this side, for errors.Is/As).
type Error struct {
	Code  string
	Msg   string
	Cause error
}

func (e *Error) Error() string   { return e.Msg }
func (e *Error) RMICode() string { return e.Code }
func (e *Error) Unwrap() error   { return e.Cause }

// Err builds a coded error with a fixed message.
func Err(code, msg string) error { return &Error{Code: code, Msg: msg} }

// Errorf builds a coded error as fmt.Errorf does: format and args make the
// message, and an error wrapped with %w stays its cause.
func Errorf(code, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &Error{Code: code, Msg: err.Error(), Cause: errors.Unwrap(err)}
}

// App is an application as the cluster knows it (the manifest's routing
// relevant part; the full bundle arrives with the applications work).
type App struct {
	Name        string `codec:"name" json:"name"`
	MountPoint  string `codec:"mount" json:"mountPoint"`
	Description string `codec:"desc" json:"description"`
	Strategy    string `codec:"strategy" json:"strategy"`
	Entry       string `codec:"entry" json:"entry"`
	Public      bool   `codec:"public" json:"public"`
	Version     int    `codec:"version" json:"version"`
	// Disabled apps keep their instances but get no new ones and are not
	// listed on the home page.
	Disabled bool `codec:"disabled" json:"disabled"`
	// Authentication requires a logged-in user.
	Authentication bool `codec:"auth" json:"authentication"`
	// Viewport of new browsers (0 = default).
	ViewportWidth  int `codec:"vw" json:"viewportWidth,omitempty"`
	ViewportHeight int `codec:"vh" json:"viewportHeight,omitempty"`
	// Browser caps (0 = none).
	BrowsersPerUser     int `codec:"bpu" json:"browsersPerUser,omitempty"`
	BrowsersPerInstance int `codec:"bpi" json:"browsersPerInstance,omitempty"`
	// Manifest is the bundle's app.json (all settings, for the workers).
	Manifest []byte `codec:"manifest" json:"-"`
	// Files of the bundle (slash paths), served to the virtual browsers by
	// the hosting worker.
	Files map[string][]byte `codec:"files" json:"-"`
	// ArchiveSize and ArchiveSum (hex SHA-256) describe the bundle of an
	// app too large for one RMI frame: the master sends it without Files
	// and the worker fetches the tar.gz archive by chunks
	// (Bundles.BundleChunk). 0 = Files are inline.
	ArchiveSize int64  `codec:"asize" json:"-"`
	ArchiveSum  string `codec:"asum" json:"-"`
}

// BundleChunkSize bounds one answer of Bundles.BundleChunk.
const BundleChunkSize = 1 << 20

// BundleChunkRequest asks for part of a large app's archive: at most
// BundleChunkSize bytes from Offset of version Version of the app at Mount.
type BundleChunkRequest struct {
	Mount   string `codec:"mount"`
	Version int    `codec:"version"`
	Offset  int64  `codec:"offset"`
}

// Strategies of the paper.
const (
	SingleAppInstance     = "singleAppInstance"
	SingleInstancePerUser = "singleInstancePerUser"
	SingleBrowserPerUser  = "singleBrowserPerUser"
	MultiInstance         = "multiInstance"
)

// WorkerInfo is what a worker registers with the master.
type WorkerInfo struct {
	ID       string `codec:"id" json:"id"`
	HTTPAddr string `codec:"http" json:"httpAddr"` // host:port proxies forward to
	Gossip   string `codec:"gossip" json:"gossip"` // memberlist node name
	Version  string `codec:"version" json:"version"`
	// Incarnation is random for each start of the worker process: a
	// registration under a new one has lost every instance it does not
	// report (a quick restart the gossip layer did not notice).
	Incarnation string `codec:"inc,omitempty" json:"incarnation,omitempty"`
	// JobSlots is how many jobs the worker runs at once.
	JobSlots int `codec:"jslots,omitempty" json:"jobSlots,omitempty"`
	// Handoff is the unix socket where a proxy on the same host (Host,
	// internal/handoff.HostID) may hand a client's WebSocket over instead
	// of relaying it; "" = none.
	Handoff string `codec:"handoff,omitempty" json:"handoff,omitempty"`
	Host    string `codec:"host,omitempty" json:"host,omitempty"`
	// RenderScale is the fraction of a page's pixels the worker's Chromium
	// draws (--render-scale); 0 = 1.
	RenderScale float64 `codec:"rscale,omitempty" json:"renderScale,omitempty"`
}

// Load is one load report. Total is what the balancer compares.
type Load struct {
	Total      uint64 `codec:"total" json:"total"`
	GoHeap     uint64 `codec:"heap" json:"goHeap"`
	BrowserPSS uint64 `codec:"pss" json:"browserPSS"`
	Instances  int    `codec:"instances" json:"instances"`
	Browsers   int    `codec:"browsers" json:"browsers"`
	Clients    int    `codec:"clients" json:"clients"`
	// Screencast frames since the worker started: painted while watched,
	// sent to clients, and dropped for slow clients (replaced by a newer
	// frame before they could take it).
	FramesProduced uint64    `codec:"fprod" json:"framesProduced"`
	FramesSent     uint64    `codec:"fsent" json:"framesSent"`
	FramesDropped  uint64    `codec:"fdrop" json:"framesDropped"`
	At             time.Time `codec:"at" json:"at"`
	// Pools is the worker's pool statistics (worker/pool.ManagerStats as JSON).
	Pools []byte `codec:"pools" json:"-"`
	// EgressBlocked counts, per app, the requests of virtual browsers the
	// egress guard refused since the worker started.
	EgressBlocked map[string]uint64 `codec:"egress" json:"egressBlocked,omitempty"`
	// JobSlots and JobsRunning are the worker's job slots and how many
	// of them run an attempt.
	JobSlots    int `codec:"jslots,omitempty" json:"jobSlots,omitempty"`
	JobsRunning int `codec:"jrun,omitempty" json:"jobsRunning,omitempty"`
	// FrameScale is the scale of the worker's screencast frames now, graded
	// down while it is short of CPU (worker/grade): 1, 0.75 or 0.5; 0 = 1.
	FrameScale float64 `codec:"fscale,omitempty" json:"frameScale,omitempty"`
	// Automated are the browsers an automation session holds here (a
	// client connected, or within its keep-alive), as
	// "<instance>/<browser>": the dashboard's session states.
	Automated []string `codec:"auto,omitempty" json:"automated,omitempty"`
	// AutomationClients are those of Automated with a client connected
	// now (the others wait for theirs within its keep-alive).
	AutomationClients []string `codec:"autoc,omitempty" json:"automationClients,omitempty"`
}

// FencedInstance is an instance a registering worker must drop: the master
// declared the worker dead meanwhile and gave the instance's place to
// another one (or placed it again elsewhere).
type FencedInstance struct {
	ID string `codec:"id"`
	// Reason is told to the instance's users; Location is where they go
	// on (the app's URL, which leads to the surviving instance).
	Reason   string `codec:"reason"`
	Location string `codec:"loc"`
	// Moved: the instance lives on elsewhere under the same id, so its
	// URLs keep working (clients reconnect); otherwise it gave way.
	Moved bool `codec:"moved"`
}

// ClosedInstance is a worker's word that it closed an instance for good,
// under the placement epoch it held it with (the master ignores it from
// anyone but the current owner under the current epoch).
type ClosedInstance struct {
	ID    string `codec:"id"`
	Epoch uint64 `codec:"epoch"`
}

// MigrationResult says what a migration of a worker's instances did.
type MigrationResult struct {
	Worker   string            `codec:"worker" json:"worker"`
	Migrated int               `codec:"migrated" json:"migrated"`
	Failed   map[string]string `codec:"failed" json:"failed,omitempty"` // instance -> why
}

// RegisterReply tells a worker what the master expects of it.
type RegisterReply struct {
	Apps []App `codec:"apps"`
	// Fenced: reported instances the worker no longer owns.
	Fenced []FencedInstance `codec:"fenced"`
	// Revoked: login sessions the workers must refuse (recent password
	// changes and removed accounts).
	Revoked      []Revocation `codec:"revoked"`
	ReportPeriod int64        `codec:"period"` // nanoseconds
	MasterID     string       `codec:"master"`
	// EndedSessions: sessions logged out and not yet expired.
	EndedSessions []SessionRevocation `codec:"ended"`
	// AdminTag names the current admin token (session.TokenTag): the
	// dashboard sessions workers accept are bound to it.
	AdminTag string `codec:"atag"`
	// PublicHTTPS: users reach the cluster over HTTPS (--public-url), so
	// cookies are Secure and pages send HSTS. TrustForwardedProto: believe
	// X-Forwarded-Proto from the proxies (--trust-forwarded-proto).
	PublicHTTPS         bool `codec:"https"`
	TrustForwardedProto bool `codec:"xfp"`
	// Quotas are the cluster's per-user and per-address limits; the
	// workers enforce the browser and socket ones (nil: an older master;
	// the worker keeps its defaults).
	Quotas *Quotas `codec:"quotas"`
	// HopKey verifies the X-CB-Hop signature proxies put on every request
	// they relay (internal/hop); the worker refuses requests without one.
	HopKey []byte `codec:"hopkey"`
	// MetricsToken is the bearer token the worker's /metrics requires.
	MetricsToken string `codec:"mtoken"`
	// WorkerKey is the key of the worker's id (secret.WorkerKey), sent once
	// to a worker that registered a new id with the shared worker key: it
	// proves that id from its next connection on, and nobody else can
	// register it with the shared key any more.
	WorkerKey string `codec:"wkey"`
}

// SubscribeReply answers a proxy's Router.Subscribe.
type SubscribeReply struct {
	// HopKey signs the X-CB-Hop header of every request relayed to a worker.
	HopKey []byte `codec:"hopkey"`
	// PortKey proves to a process about to share the public port
	// (SO_REUSEPORT) that the proxies already there are of this cluster.
	PortKey []byte `codec:"portkey"`
}

// Revocation ends a user's login sessions: those issued at or before
// Before (Unix seconds) are refused from then on.
type Revocation struct {
	User   string `codec:"user" json:"user"`
	Before int64  `codec:"before" json:"before"`
}

// PlaceRequest asks the master for an instance of App for User.
type PlaceRequest struct {
	App  string `codec:"app"`
	User string `codec:"user"`
	From string `codec:"from"` // worker asking, for logs
	// New asks for a new instance whatever the strategy (landing page's
	// "new instance").
	New bool `codec:"new"`
	// NoBrowser places the instance without opening a browser in it.
	NoBrowser bool `codec:"nobrowser"`
	// RequestID is the user request's id (logged by the master too).
	RequestID string `codec:"rid"`
	// ClientIP is the end user's address as the worker saw it, for the
	// per-address quotas ("" = unknown: only the per-user ones apply).
	ClientIP string `codec:"ip"`
}

// Placement is where an instance lives, and the user's browser in it.
type Placement struct {
	InstanceID string `codec:"iid" json:"instanceId"`
	WorkerID   string `codec:"wid" json:"workerId"`
	BrowserID  string `codec:"bid" json:"browserId"`
	Created    bool   `codec:"created" json:"created"`
}

// CreateInstance is the master's order to a worker.
type CreateInstance struct {
	App        App    `codec:"app"`
	InstanceID string `codec:"iid"`
	Owner      string `codec:"owner"`
	// ClientIP is the address the instance was created from; the worker
	// keeps it so a restarted master counts the instance against it again.
	ClientIP string `codec:"ip"`
	// Epoch is the placement's fencing token (InstanceInfo.Epoch).
	Epoch uint64 `codec:"epoch"`
	// Restore: the instance is placed again after its worker died (or
	// moves off a draining one). Its id names its first worker, not this
	// one; its shared state and its browsers' snapshots come from the
	// master, and its browsers keep their ids, owners and URLs.
	Restore bool `codec:"restore"`
	// WaitBrowsers: answer only once the browsers are restored (a live
	// migration, whose old copy serves meanwhile).
	WaitBrowsers bool `codec:"waitb"`
	// Created is when the instance was first created (kept across moves).
	Created time.Time `codec:"created"`
	// Name is the instance's name, kept across moves.
	Name string `codec:"name"`
}

// Kinds of request a proxy routes; mirrors proxy.Kind without importing it.
const (
	RouteApp      = "app"
	RouteInstance = "instance"
)

// RouteRequest asks where a request goes.
type RouteRequest struct {
	Kind       string `codec:"kind"`
	App        string `codec:"app"`
	InstanceID string `codec:"iid"`
}

// RouteReply answers a RouteRequest.
type RouteReply struct {
	WorkerID string `codec:"wid"`
	Addr     string `codec:"addr"`
	// Handoff and Host are the worker's (WorkerInfo).
	Handoff string `codec:"handoff,omitempty"`
	Host    string `codec:"host,omitempty"`
}

// ClusterInfo tells a joining process how to reach the gossip layer.
type ClusterInfo struct {
	MasterID   string `codec:"master"`
	GossipAddr string `codec:"gossip"` // host:port of the master's memberlist
	// Keys the caller's role needs that it cannot derive from its role key,
	// handed over the sealed, authenticated RMI session.
	Keys ClusterKeys `codec:"keys"`
}

// ClusterKeys are keys derived from the cluster secret by the master. Each
// role gets only the ones it uses: Gossip for workers and proxies, the
// session keys for workers.
type ClusterKeys struct {
	Gossip       []byte `codec:"gossip,omitempty"`        // memberlist encryption
	Session      []byte `codec:"session,omitempty"`       // users' login sessions
	AdminSession []byte `codec:"admin_session,omitempty"` // the master's dashboard sessions
	Anonymous    []byte `codec:"anonymous,omitempty"`     // anonymous visitors' identities
	Automation   []byte `codec:"automation,omitempty"`    // automation sessions' CDP tickets (internal/cdpticket)
}

// InstanceInfo describes an app instance a worker hosts.
type InstanceInfo struct {
	ID       string    `codec:"id" json:"id"`
	App      string    `codec:"app" json:"app"`
	Version  int       `codec:"version" json:"version"`     // of the app, fixed at creation
	Name     string    `codec:"name" json:"name,omitempty"` // given by its owner
	Owner    string    `codec:"owner" json:"owner"`
	Worker   string    `codec:"wid" json:"worker"`
	Created  time.Time `codec:"created" json:"created"`
	Browsers int       `codec:"browsers" json:"browsers"`
	// Shared holds the instance's grants to named users (principal ->
	// "reader" or "reader-writer"), so landing pages can list instances
	// shared with a user. Grants to "*" (anyone with the URL) are not here.
	Shared map[string]string `codec:"shared" json:"shared,omitempty"`
	// ClientIP is the address the instance was created from (per-address
	// quota); not shown in the admin API.
	ClientIP string `codec:"ip" json:"-"`
	// Epoch is the placement's fencing token: the master gives every
	// placement of an instance a larger epoch, and refuses what a worker
	// does under an older one (docs/architecture.md, "Ownership").
	Epoch uint64 `codec:"epoch" json:"epoch,omitempty"`
}

// OpenBrowser asks a worker for a user's browser in one of its instances;
// ClientIP is for the per-address browser quota.
type OpenBrowser struct {
	InstanceID string `codec:"iid"`
	User       string `codec:"user"`
	ClientIP   string `codec:"ip"`
}

// BrowserGrant sets Principal's Role on an instance (Browser "") or on one
// of its browsers; Role "none" revokes.
type BrowserGrant struct {
	Instance  string `codec:"iid"`
	Browser   string `codec:"bid"`
	Principal string `codec:"principal"`
	Role      string `codec:"role"`
}

// InstanceShare records a grant on an instance to a named user (Role "" or
// "none" removes it), for landing pages.
type InstanceShare struct {
	Instance  string `codec:"iid"`
	Principal string `codec:"principal"`
	Role      string `codec:"role"`
}

// Quotas bound what one user and one client address may hold, against
// denial of service by a single visitor (docs/quotas.md). 0 = no limit.
// The master enforces the instance and identity quotas cluster-wide; each
// worker enforces the browser and socket ones for itself.
type Quotas struct {
	InstancesPerUser  int `codec:"ipu" json:"instancesPerUser"`
	InstancesPerIP    int `codec:"ipi" json:"instancesPerIP"`
	BrowsersPerUser   int `codec:"bpu" json:"browsersPerUser"`
	BrowsersPerIP     int `codec:"bpi" json:"browsersPerIP"`
	SocketsPerBrowser int `codec:"spb" json:"socketsPerBrowser"`
	SocketsPerIP      int `codec:"spi" json:"socketsPerIP"`
	// New anonymous identities per client address: a token bucket of
	// IdentityBurst tokens refilled at IdentitiesPerMinute.
	IdentityBurst       int `codec:"idb" json:"identityBurst"`
	IdentitiesPerMinute int `codec:"idr" json:"identitiesPerMinute"`
}

// DefaultQuotas are the quotas unless configured.
func DefaultQuotas() Quotas {
	return Quotas{InstancesPerUser: 10, InstancesPerIP: 50, BrowsersPerUser: 10, BrowsersPerIP: 30,
		SocketsPerBrowser: 20, SocketsPerIP: 50, IdentityBurst: 50, IdentitiesPerMinute: 30}
}

// Quota names: the label of cloudbrowser_quota_refusals_total and the
// flag suffix (--quota-<name>).
const (
	QuotaInstancesPerUser  = "instances-per-user"
	QuotaInstancesPerIP    = "instances-per-ip"
	QuotaBrowsersPerUser   = "browsers-per-user"
	QuotaBrowsersPerIP     = "browsers-per-ip"
	QuotaSocketsPerBrowser = "sockets-per-browser"
	QuotaSocketsPerIP      = "sockets-per-ip"
	QuotaNewIdentities     = "new-identities-per-ip"
)

// BrowserInfo describes a virtual browser.
type BrowserInfo struct {
	ID      string    `codec:"id" json:"id"`
	URL     string    `codec:"url" json:"url"`
	Owner   string    `codec:"owner" json:"owner"`
	Created time.Time `codec:"created" json:"created"`
	Clients int       `codec:"clients" json:"clients"`
}

// ClusterStatus is the master's view of the cluster (admin API, status CLI).
type ClusterStatus struct {
	MasterID     string         `json:"masterId"`
	Strategy     string         `json:"strategy"`
	Workers      []WorkerStatus `json:"workers"`
	Apps         []App          `json:"apps"`
	Instances    []InstanceInfo `json:"instances"`
	Members      []MemberStatus `json:"members"`
	RouteLookups uint64         `json:"routeLookups"`
	Placements   uint64         `json:"placements"`
	Proxies      []ProxyStatus  `json:"proxies"`
	// Jobs: slots, queues, outcomes, monitors and the render cache.
	Jobs *JobsStatus `json:"jobs,omitempty"`
	// Sessions: the automation sessions, their queue and limits (the admin
	// API's answers; nil in Master.Status).
	Sessions *SessionsStatus `json:"sessions,omitempty"`
	Extra    map[string]any  `json:"extra,omitempty"`
	At       time.Time       `json:"at"`
}

// WorkerStatus is one worker in ClusterStatus.
type WorkerStatus struct {
	WorkerInfo
	State      string    `json:"state"` // connected, disconnected
	Member     string    `json:"member"`
	Draining   bool      `json:"draining"`
	Load       Load      `json:"load"`
	Projected  uint64    `json:"projected"`
	Registered time.Time `json:"registered"`
	// Reported is its last load report; Silent: none for a few report
	// periods (stalled or cut off?), so Application URLs pass it over.
	Reported time.Time `json:"reported"`
	Silent   bool      `json:"silent,omitempty"`
	// Reach is whether the master reached the worker at HTTPAddr, the
	// address the proxies dial: "reachable", "unreachable" (ReachError
	// says why) or "" (not probed yet); ReachChecked is when (master/reach).
	Reach        string    `json:"reach,omitempty"`
	ReachError   string    `json:"reachError,omitempty"`
	ReachChecked time.Time `json:"reachChecked,omitzero"`
	// Pools is the worker's pool statistics (see worker/pool.ManagerStats).
	Pools json.RawMessage `json:"pools,omitempty"`
}

// MemberStatus is one gossip member.
type MemberStatus struct {
	Name  string `json:"name"`
	Addr  string `json:"addr"`
	State string `json:"state"`
	Role  string `json:"role"`
	ID    string `json:"id"`
}

// ProxyStatus is one proxy connected to the master.
type ProxyStatus struct {
	Name           string  `json:"name"`
	Addr           string  `json:"addr"`
	Embedded       bool    `json:"embedded"`
	Requests       uint64  `json:"requests"`
	RequestsPerSec float64 `json:"requestsPerSec"`
	WebSocketsOpen int64   `json:"websocketsOpen"`
}

// SessionOpen asks the master for an automation session on behalf of a
// one-step CDP connection (GET /cdp?app=NAME&token=… upgraded at a proxy;
// docs/automation.md, "One step"). The proxy passes what the client sent
// and the master reads it, so the parameters, their checks and defaults
// live in one place.
type SessionOpen struct {
	// Query is the request's raw query (app, token, settings); it may
	// hold the token: never log it.
	Query string `codec:"q"`
	// Authorization is the request's Authorization header, if any.
	Authorization string `codec:"auth,omitempty"`
	// ClientIP is the client's address as the proxy saw it (the
	// per-address instance quota).
	ClientIP  string `codec:"ip"`
	RequestID string `codec:"rid"` // for the master's logs
}

// SessionOpened answers a SessionOpen: a session, or (Status != 0) the
// HTTP answer the proxy gives instead of upgrading.
type SessionOpened struct {
	ID         string `codec:"id,omitempty"`
	App        string `codec:"app,omitempty"`
	InstanceID string `codec:"iid,omitempty"`
	BrowserID  string `codec:"bid,omitempty"`
	// Path is the session's CDP endpoint as path and query
	// ("/app/a/<iid>/b/<bid>/cdp?ticket=…"): the proxy routes the upgrade
	// there like any Browser URL.
	Path string `codec:"path,omitempty"`

	// Status is the refusal's HTTP status (0: opened), Error its
	// message, Field the query parameter it is about ("" if none),
	// RetryAfter its Retry-After in seconds (0: none) and Challenge its
	// WWW-Authenticate.
	Status     int    `codec:"status,omitempty"`
	Error      string `codec:"err,omitempty"`
	Field      string `codec:"field,omitempty"`
	RetryAfter int64  `codec:"retry,omitempty"`
	Challenge  string `codec:"challenge,omitempty"`
}

// ProxyReport is what a proxy tells the master every few seconds.
type ProxyReport struct {
	Requests       uint64 `codec:"req"`
	WebSocketsOpen int64  `codec:"ws"`
	BytesUp        uint64 `codec:"up"`
	BytesDown      uint64 `codec:"down"`
}

// AppView is an application in admin API answers.
type AppView struct {
	Name        string `json:"name"`
	MountPoint  string `json:"mountPoint"`
	Description string `json:"description"`
	Strategy    string `json:"strategy"`
	Public      bool   `json:"public"`
	Disabled    bool   `json:"disabled"`
	Version     int    `json:"version"`
	Files       int    `json:"files"`
	// Owner is the author who deployed the mount point first ("admin" for
	// the apps of the master's start-up set).
	Owner string `json:"owner,omitempty"`
}

// ObjInstanceState is the master's store of instances' shared state
// (app API set/append, instance grants and names), called by workers: a
// write is acknowledged to the page only once the master stored it.
const ObjInstanceState = "InstanceState"

// Kinds of StateWrite.
const (
	StateSet    = "set"    // Key = state key, Value = JSON value
	StateAppend = "append" // Key = state key, Value = JSON entry, Max = bound
	StateGrant  = "grant"  // Key = principal, Value = role ("none" revokes)
	StateName   = "name"   // Value = the instance's name
)

// StateWrite is one write of an instance's shared state, made under the
// placement epoch the writing worker holds the instance with.
type StateWrite struct {
	Instance string `codec:"iid"`
	Epoch    uint64 `codec:"epoch"`
	Op       string `codec:"op"`
	Key      string `codec:"key"`
	Value    []byte `codec:"value"`
	Max      int    `codec:"max"`
}

// StateWriteReply acknowledges a stored write: its sequence number in the
// instance (increasing with every write) and, for an append, the key's new
// array and its length.
type StateWriteReply struct {
	Seq   uint64 `codec:"seq"`
	Value []byte `codec:"value"`
	Len   int    `codec:"len"`
}

// StateValue is a stored value with the sequence number of its last write.
type StateValue struct {
	Seq   uint64 `codec:"seq"`
	Value []byte `codec:"value"`
}

// InstanceState is what the master holds of an instance (one page of its
// values: keys after the requested one, in order; More when there are
// others). Found is false when it holds nothing.
type InstanceState struct {
	Found  bool                  `codec:"found"`
	Seq    uint64                `codec:"seq"`
	Name   string                `codec:"name"`
	Grants map[string]string     `codec:"grants"`
	Values map[string]StateValue `codec:"values"`
	More   bool                  `codec:"more"`
}

// AllState reads every page of an instance's state: get returns the page of
// values after a key ("" = the first page).
func AllState(get func(after string) (InstanceState, error)) (InstanceState, error) {
	all, err := get("")
	for err == nil && all.More {
		last := ""
		for k := range all.Values {
			last = max(last, k)
		}
		var page InstanceState
		if page, err = get(last); err == nil {
			for k, v := range page.Values {
				all.Values[k] = v
			}
			all.More = page.More
		}
	}
	return all, err
}

// SnapshotCookie is a cookie of a browser snapshot.
type SnapshotCookie struct {
	Name     string    `codec:"n" json:"name"`
	Value    string    `codec:"v" json:"value"`
	Domain   string    `codec:"d" json:"domain"`
	Path     string    `codec:"p" json:"path"`
	Expires  time.Time `codec:"e" json:"expires,omitzero"`
	HTTPOnly bool      `codec:"h" json:"httpOnly,omitempty"`
	Secure   bool      `codec:"s" json:"secure,omitempty"`
	SameSite string    `codec:"ss" json:"sameSite,omitempty"`
}

// BrowserSnapshot is what a worker saves of one virtual browser, so that a
// re-placed instance recreates it: its identity and grants, and the page
// as of the snapshot (URL, viewport, cookies, the storage of the page's
// origin, what its form fields show). In-page JavaScript state is not in
// it.
type BrowserSnapshot struct {
	ID      string    `codec:"id" json:"id"`
	Owner   string    `codec:"owner" json:"owner"`
	Created time.Time `codec:"created" json:"created"`
	Name    string    `codec:"name" json:"name,omitempty"`
	// Theirs: the browser is its owner's browser of the instance (the
	// strategy sends them back to it).
	Theirs bool              `codec:"theirs" json:"theirs,omitempty"`
	Perms  map[string]string `codec:"perms" json:"perms,omitempty"`
	URL    string            `codec:"url" json:"url"`
	Width  int               `codec:"w" json:"width,omitempty"`
	Height int               `codec:"h" json:"height,omitempty"`
	// Origin is the page's origin, whose storage Local and Session hold.
	Origin  string            `codec:"origin" json:"origin,omitempty"`
	Local   map[string]string `codec:"local" json:"local,omitempty"`
	Session map[string]string `codec:"session" json:"session,omitempty"`
	Cookies []SnapshotCookie  `codec:"cookies" json:"cookies,omitempty"`
	// Form is what the page's fields show (values, focus, caret, scroll),
	// put back after the restored page loads; nil when there is nothing.
	Form  *FormState `codec:"form,omitempty" json:"form,omitempty"`
	Taken time.Time  `codec:"taken" json:"taken"`
}

// FormState is what a page shows the user beyond its URL and storage: the
// values of its form fields and editable elements, which one has the focus
// and where its caret is, and how far the page and its scrolled elements
// are scrolled. Elements are named by a stable key: "#<id>", "n:<name>"
// (plus "=<value>" for checkboxes and radios sharing a name), or a DOM path
// "p:<tag>[<index among same-tag siblings>]/…" from <body>. Offsets are in
// UTF-16 code units, as the page counts them. Passwords and files are
// never in it.
type FormState struct {
	Fields []FormField `codec:"fields" json:"fields,omitempty"`
	// Focus is the key of the focused element ("" = none).
	Focus string `codec:"focus" json:"focus,omitempty"`
	// Selection in the focused element (an input, a textarea or an
	// editable element); nil = none.
	Selection *FormSelection `codec:"sel,omitempty" json:"selection,omitempty"`
	// ScrollX and ScrollY are the window's scroll offset in CSS pixels.
	ScrollX float64 `codec:"sx" json:"scrollX,omitempty"`
	ScrollY float64 `codec:"sy" json:"scrollY,omitempty"`
	// Scrolls are the scrolled elements other than the window.
	Scrolls []FormScroll `codec:"scrolls" json:"scrolls,omitempty"`
	// Skipped counts the fields left out because the state was full.
	Skipped int `codec:"skipped,omitempty" json:"skipped,omitempty"`
}

// Kinds of FormField.
const (
	FieldValue    = "value"    // an input's or a textarea's value
	FieldChecked  = "checked"  // a checkbox's or a radio button's state
	FieldSelect   = "select"   // a select's chosen options (Values)
	FieldEditable = "editable" // an editable element's HTML (Value)
)

// FormField is one field of a FormState.
type FormField struct {
	Key     string   `codec:"k" json:"key"`
	Kind    string   `codec:"t" json:"kind"`
	Value   string   `codec:"v" json:"value,omitempty"`
	Values  []string `codec:"vs" json:"values,omitempty"`
	Checked bool     `codec:"c" json:"checked,omitempty"`
}

// FormSelection is a selection or caret (Start == End) in the focused
// element: offsets into an input's or textarea's value, or into an
// editable element's text.
type FormSelection struct {
	Start int `codec:"s" json:"start"`
	End   int `codec:"e" json:"end"`
	// Backward: the user selected from End to Start.
	Backward bool `codec:"b,omitempty" json:"backward,omitempty"`
}

// FormScroll is a scrolled element's offset in CSS pixels.
type FormScroll struct {
	Key string  `codec:"k" json:"key"`
	X   float64 `codec:"x" json:"x,omitempty"`
	Y   float64 `codec:"y" json:"y,omitempty"`
}

// SaveBrowser stores a browser's snapshot (Snapshot set) or removes it
// (Remove: the browser is gone), under the instance's placement epoch.
type SaveBrowser struct {
	Instance string           `codec:"iid"`
	Epoch    uint64           `codec:"epoch"`
	Snapshot *BrowserSnapshot `codec:"snap"`
	Remove   string           `codec:"remove"`
}

// BrowserSnapshots is one page of an instance's browser snapshots, in
// browser id order (More when there are others after the last).
type BrowserSnapshots struct {
	Browsers []BrowserSnapshot `codec:"browsers"`
	More     bool              `codec:"more"`
}
