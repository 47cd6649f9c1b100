package master

import (
	"context"

	"github.com/cloudbrowser-go/cloudbrowser/internal/urlkind"
	"github.com/cloudbrowser-go/cloudbrowser/proxy"
)

// localRouter is the embedded proxy's Router: the master answers in process.
type localRouter struct{ m *Master }

func (r localRouter) Route(ctx context.Context, t urlkind.Target) (proxy.Route, error) {
	rt, _, err := r.RouteNow(t)
	return rt, err
}

// RouteNow implements proxy.InstantRouter: the in-process master answers
// every target without waiting on anything but its own locks.
func (r localRouter) RouteNow(t urlkind.Target) (proxy.Route, bool, error) {
	rep, err := r.m.workers.route(proxy.RouteRequestFor(t))
	if err != nil {
		return proxy.Route{}, true, proxy.MasterError(err)
	}
	return proxy.RouteOf(rep), true, nil
}

func (r localRouter) Apps(ctx context.Context) ([]proxy.AppLink, error) {
	apps, _ := routerService(r).Apps(ctx)
	return proxy.AppLinksOf(apps), nil
}
