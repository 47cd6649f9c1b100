package master

import (
	"context"
	"errors"
	"fmt"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/proxy"
)

// localRouter is the embedded proxy's Router: the master answers in process.
type localRouter struct{ m *Master }

func (r localRouter) Route(ctx context.Context, t proxy.Target) (proxy.Route, error) {
	req := wire.RouteRequest{Kind: wire.RouteInstance, App: t.App, InstanceID: t.InstanceID}
	if t.Kind == proxy.KindApp {
		req.Kind = wire.RouteApp
	}
	rep, err := r.m.workers.route(req)
	if err != nil {
		return proxy.Route{}, ProxyError(err)
	}
	return proxy.Route{WorkerID: rep.WorkerID, Addr: rep.Addr}, nil
}

func (r localRouter) Apps(ctx context.Context) ([]proxy.AppLink, error) {
	apps, _ := routerService{r.m}.Apps(ctx)
	return AppLinks(apps), nil
}

// AppLinks converts apps to home page links.
func AppLinks(apps []wire.App) []proxy.AppLink {
	out := make([]proxy.AppLink, len(apps))
	for i, a := range apps {
		out[i] = proxy.AppLink{Name: a.Name, MountPoint: a.MountPoint, Description: a.Description}
	}
	return out
}

// coder is implemented by wire.Error and rmi.RemoteError.
type coder interface{ RMICode() string }

// ProxyError maps a master error (local or arriving over RMI) to the proxy's
// sentinels, which pick the page the user sees.
func ProxyError(err error) error {
	var c coder
	if !errors.As(err, &c) {
		return fmt.Errorf("%w: %w", proxy.ErrMasterUnavailable, err)
	}
	var sentinel error
	switch c.RMICode() {
	case wire.CodeUnknownApp:
		sentinel = proxy.ErrUnknownApp
	case wire.CodeUnknownInstance:
		sentinel = proxy.ErrUnknownInstance
	case wire.CodeInstanceLost:
		sentinel = proxy.ErrInstanceLost
	case wire.CodeNoWorkers:
		sentinel = proxy.ErrNoWorkers
	case wire.CodeUnknownWorker:
		sentinel = proxy.ErrWorkerGone
	default:
		return err
	}
	return fmt.Errorf("%w: %w", sentinel, err)
}
