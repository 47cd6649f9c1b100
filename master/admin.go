package master

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/httpsec"
	"github.com/cloudbrowser-go/cloudbrowser/internal/metrics"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/apijson"
	"github.com/cloudbrowser-go/cloudbrowser/master/auth"
)

// adminHandler serves the master's HTTP endpoints. With the embedded proxy
// it is also the proxy's fallback, so everything is on the public port.
//
// public marks the embedded proxy's copy: there /metrics needs the admin
// token too, since the public port faces end users.
func (m *Master) adminHandler(public bool) http.Handler {
	mux := http.NewServeMux()
	metricsH := metrics.Handler(m.metrics.reg)
	if public {
		mux.Handle("GET /metrics", m.auth(auth.RoleAdmin, metricsH.ServeHTTP))
	} else {
		mux.Handle("GET /metrics", metricsH)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		apijson.Write(w, http.StatusOK, map[string]any{"status": "ok", "master": m.id})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if m.ctx.Err() != nil {
			apijson.Write(w, http.StatusServiceUnavailable, map[string]any{"status": "stopping"})
			return
		}
		apijson.Write(w, http.StatusOK, map[string]any{"status": "ready", "master": m.id})
	})
	mux.Handle("GET /api/v1/cluster", m.auth(auth.RoleAdmin, func(w http.ResponseWriter, r *http.Request) {
		apijson.Write(w, http.StatusOK, m.Status())
	}))
	mux.Handle("POST /api/v1/workers/{id}/drain", m.auth(auth.RoleAdmin, func(w http.ResponseWriter, r *http.Request) {
		m.drain(w, r, true)
	}))
	mux.Handle("POST /api/v1/workers/{id}/undrain", m.auth(auth.RoleAdmin, func(w http.ResponseWriter, r *http.Request) {
		m.drain(w, r, false)
	}))
	mux.Handle("GET /api/v1/apps", m.auth(auth.RoleAuthor, m.listApps))
	mux.Handle("POST /api/v1/apps", m.auth(auth.RoleAuthor, m.deploy))
	// Authors may change their own apps; the owner check is in AppManager.
	mux.Handle("DELETE /api/v1/apps/{name}", m.auth(auth.RoleAuthor, func(w http.ResponseWriter, r *http.Request) {
		m.appAction(w, r, func(ctx context.Context, name string) error { return m.apps.Remove(ctx, name, auth.PrincipalOf(r)) })
	}))
	mux.Handle("POST /api/v1/apps/{name}/disable", m.auth(auth.RoleAuthor, func(w http.ResponseWriter, r *http.Request) {
		m.appAction(w, r, func(ctx context.Context, name string) error {
			return m.apps.SetDisabled(ctx, name, true, auth.PrincipalOf(r))
		})
	}))
	mux.Handle("POST /api/v1/apps/{name}/enable", m.auth(auth.RoleAuthor, func(w http.ResponseWriter, r *http.Request) {
		m.appAction(w, r, func(ctx context.Context, name string) error {
			return m.apps.SetDisabled(ctx, name, false, auth.PrincipalOf(r))
		})
	}))
	// Who may name an app in a job: its owner changes it (owners.go).
	m.jobUserRoutes(mux)
	m.userRoutes(mux)
	m.authorRoutes(mux)
	m.jobs.Routes(mux)
	m.dashboardRoutes(mux)
	mux.Handle("POST /api/v1/grants", m.auth(auth.RoleAdmin, m.grant))
	mux.Handle("GET /api/v1/instances/{id}/state", m.auth(auth.RoleAdmin, m.instanceState))
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		apijson.Error(w, http.StatusNotFound, "no such API endpoint: "+r.Method+" "+r.URL.Path)
	})
	return httpsec.Pages(m.scheme, mux)
}

func (m *Master) drain(w http.ResponseWriter, r *http.Request, on bool) {
	id := r.PathValue("id")
	if err := m.workers.SetDraining(id, on); err != nil {
		status := http.StatusInternalServerError // the flag could not be stored
		var we *wire.Error
		if errors.As(err, &we) && we.Code == wire.CodeUnknownWorker {
			status = http.StatusNotFound
		}
		apijson.Error(w, status, err.Error())
		return
	}
	m.log.Info().Str("worker", id).Bool("draining", on).Msg("drain changed by admin")
	if on && r.URL.Query().Get("migrate") == "true" {
		// Drain with migration: its instances move now, with their users.
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Minute)
		defer cancel()
		res := m.workers.Moves.Migrate(ctx, id)
		status := http.StatusOK
		if len(res.Failed) > 0 {
			status = http.StatusMultiStatus
		}
		apijson.Write(w, status, map[string]any{"worker": id, "draining": true, "migrated": res.Migrated, "failed": res.Failed})
		return
	}
	apijson.Write(w, http.StatusOK, map[string]any{"worker": id, "draining": on})
}
