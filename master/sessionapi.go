package master

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"

	"github.com/cloudbrowser-go/cloudbrowser/internal/cdpticket"
	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/session"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/auth"
	"github.com/cloudbrowser-go/cloudbrowser/master/sessions"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// The master's side of automation sessions (docs/automation.md,
// "Sessions"): master/sessions keeps them and serves the API; this file
// gives it the placer, the workers that close instances, the apps' rules
// and the public address. Run starts in Start, once the instance table is
// loaded.

func (m *Master) startSessions() error {
	svc, err := sessions.New(sessions.Config{Store: m.state, Host: sessionsHost{m},
		Key: session.Key(m.cfg.Secret, cdpticket.Purpose), Clock: m.cfg.Clock, MaxPerPrincipal: m.cfg.AutomationMaxSessions,
		QueueWait: m.cfg.AutomationQueueWait, QueueMax: m.cfg.AutomationQueueMax,
		Logger: m.log.With().Str("component", "sessions").Logger()})
	if err != nil {
		return err
	}
	m.sessions = svc
	m.metrics.reg.MustRegister(svc.Collectors()...)
	return nil
}

// sessionsHost answers the sessions (sessions.Host).
type sessionsHost struct{ m *Master }

func (h sessionsHost) Check(r *http.Request, need auth.Role) (auth.Principal, *auth.Refusal) {
	return h.m.access.Check(r, need)
}

func (h sessionsHost) AppExists(name string) bool {
	_, ok := h.m.apps.Get(name)
	return ok
}

// MayUseApp: who may use the app's pool in jobs (owner, admin, granted
// principals); the automation token may also use the admin's apps, as
// the jobs token does by default: both are the operator's.
func (h sessionsHost) MayUseApp(p auth.Principal, name string) bool {
	if p.AutomationOnly && h.m.apps.owner(name) == auth.AdminPrincipal.Name {
		return true
	}
	return h.m.apps.mayUseApp(p, name)
}

func (h sessionsHost) Place(ctx context.Context, req wire.PlaceRequest) (wire.Placement, error) {
	return h.m.workers.Placer.Place(ctx, req)
}

// CloseInstance orders the instance's worker to close it, as the admin's
// close does; the worker then reports it closed (InstanceClosed).
func (h sessionsHost) CloseInstance(ctx context.Context, iid string) error {
	ref, wid, ok := h.m.workers.Host(iid)
	if !ok {
		return sessions.ErrInstanceGone
	}
	if ref == nil {
		return wire.Errorf(wire.CodeNoWorkers, "the worker %s of instance %s is not connected", wid, iid)
	}
	err := contract.WorkerAppsClient{R: ref}.CloseInstance(ctx, wire.ClosedInstance{ID: iid})
	if re := (*rmi.RemoteError)(nil); errors.As(err, &re) && re.Code == wire.CodeUnknownInstance {
		return sessions.ErrInstanceGone
	}
	return err
}

func (h sessionsHost) InstanceExists(iid string) bool { return h.m.workers.Known(iid) }

// PublicBase: --public-url when given; else the request's scheme and
// host, with the public port when the request came to the admin listener
// (whose port serves no Browser URLs).
func (h sessionsHost) PublicBase(r *http.Request, public bool) string {
	if u := h.m.cfg.PublicURL; u != "" {
		return strings.TrimSuffix(u, "/")
	}
	host := r.Host
	if _, port, err := net.SplitHostPort(h.m.publicAddr); !public && err == nil {
		name, _, err := net.SplitHostPort(r.Host)
		if err != nil {
			name = r.Host
		}
		if name == "" {
			name = "127.0.0.1"
		}
		host = net.JoinHostPort(strings.Trim(name, "[]"), port)
	}
	return h.m.scheme.Proto(r) + "://" + host
}
