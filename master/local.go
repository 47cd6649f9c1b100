package master

import (
	"context"

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
		return proxy.Route{}, proxy.MasterError(err)
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
