package proxy

import (
	"context"
	"errors"

	"github.com/cloudbrowser-go/cloudbrowser/internal/urlkind"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/proxy/edge"
)

// Route says where a request goes: the edge's type, so its event loops
// and the net/http path pass the same value.
type Route = edge.Route

// RouteOf is the route a master's reply gives.
func RouteOf(rep wire.RouteReply) Route {
	return Route{WorkerID: rep.WorkerID, Addr: rep.Addr, Handoff: rep.Handoff, Host: rep.Host}
}

// AppLink is one public application shown on the home page.
type AppLink struct {
	Name, MountPoint, Description string
}

// Router answers the proxy's "where does this go" question; in production it
// is the master (over RMI or in-process), usually wrapped in a CachingRouter.
//
// Route errors should wrap one of the sentinel errors below so the proxy can
// pick the right status page. Implementations must map transport failures and
// timeouts talking to the master to ErrMasterUnavailable: that is what allows
// CachingRouter to fall back.
type Router interface {
	Route(ctx context.Context, t urlkind.Target) (Route, error)
	Apps(ctx context.Context) ([]AppLink, error)
}

// InstantRouter is a Router that can answer some targets from memory. The
// proxy asks RouteNow first and, when it answered, skips Route and the
// timer that bounds it: most requests of a page load take this path.
type InstantRouter = edge.InstantRouter

var (
	// ErrUnknownApp: no application is mounted at Target.App.
	ErrUnknownApp = errors.New("unknown application")
	// ErrUnknownInstance: the instance does not exist (closed or never was).
	ErrUnknownInstance = errors.New("unknown app instance")
	// ErrNoWorkers: the balancer has no live worker to pick.
	ErrNoWorkers = errors.New("no workers available")
	// ErrStarting: the cluster has just started and no worker has
	// registered yet.
	ErrStarting = errors.New("the cluster is starting")
	// ErrMasterUnavailable: the master could not be asked.
	ErrMasterUnavailable = errors.New("cluster master unavailable")
	// ErrWorkerGone: the instance's worker is known to be dead.
	ErrWorkerGone = errors.New("worker gone")
	// ErrAppDisabled: the application exists but an admin disabled it.
	ErrAppDisabled = errors.New("application disabled")
	// ErrInstanceLost: the instance existed but its worker died with it.
	ErrInstanceLost = errors.New("app instance lost with its worker")
	// ErrInstanceMerged: the instance was a duplicate of its app's (its
	// worker came back after being declared dead) and gave way.
	ErrInstanceMerged = errors.New("app instance merged into the current one")
	// ErrInstanceMoving: the instance's worker died and the master is
	// placing it again (or waits for a live worker); retry shortly.
	ErrInstanceMoving = errors.New("app instance moving to another worker")
)

// StaticRouter sends every routable request to one worker. It is meant for
// benchmarks, tests and single-worker development setups.
type StaticRouter struct {
	To    Route
	Links []AppLink
}

// Route implements Router.
func (s StaticRouter) Route(ctx context.Context, t urlkind.Target) (Route, error) { return s.To, nil }

// RouteNow implements InstantRouter.
func (s StaticRouter) RouteNow(urlkind.Target) (Route, bool, error) { return s.To, true, nil }

// Apps implements Router.
func (s StaticRouter) Apps(ctx context.Context) ([]AppLink, error) { return s.Links, nil }
