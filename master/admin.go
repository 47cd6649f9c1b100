package master

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/clock"
	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/internal/httpsec"
	"github.com/cloudbrowser-go/cloudbrowser/internal/metrics"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/apijson"
	"github.com/cloudbrowser-go/cloudbrowser/master/auth"
	"github.com/cloudbrowser-go/cloudbrowser/master/jobsapi"
	"github.com/cloudbrowser-go/cloudbrowser/master/registry"
	"github.com/cloudbrowser-go/cloudbrowser/master/sessions"
)

// adminAPI is the master's HTTP side: the admin API, the dashboard,
// health and metrics, and the admin listener serving them. It owns only
// the listener and server; it acts on the master's parts (apps, accounts,
// the registry, stored state, jobs) through the references it was given.
type adminAPI struct {
	id      string
	log     zerolog.Logger
	clock   clock.Clock
	scheme  httpsec.Scheme
	metrics *prometheus.Registry
	// stopping is done once the master stops (readiness, event streams).
	stopping context.Context
	// status is the cluster status (Master.Status).
	status func() wire.ClusterStatus

	apps     *AppManager
	access   *auth.Auth
	workers  *registry.Registry
	istate   *instanceStates
	jobs     *jobsapi.Service
	sessions *sessions.Service
	history  *history

	// srv serves ln, Config.AdminAddr (both nil: no admin listener).
	srv *http.Server
	ln  net.Listener
}

// start listens on addr and serves the admin endpoints there until
// shutdown; wg counts the serving goroutine.
func (api *adminAPI) start(ctx context.Context, addr string, wg *sync.WaitGroup) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("master: %w", config.Errorf("AdminAddr", "%s: %w", addr, err))
	}
	api.ln = ln
	api.srv = &http.Server{Handler: api.handler(false), ReadHeaderTimeout: 10 * time.Second}
	wg.Go(func() {
		if err := api.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			api.log.Error().Err(err).Str("server", "admin").Msg("http server stopped")
		}
	})
	return nil
}

// addr is the admin listener's address ("" if none).
func (api *adminAPI) addr() string {
	if api.ln == nil {
		return ""
	}
	return api.ln.Addr().String()
}

// shutdown stops the admin server, if it runs.
func (api *adminAPI) shutdown(ctx context.Context) {
	if api.srv != nil {
		_ = api.srv.Shutdown(ctx)
	}
}

// handler serves the master's HTTP endpoints. With the embedded proxy it
// is also the proxy's fallback, so everything is on the public port.
//
// public marks the embedded proxy's copy: there /metrics needs the admin
// token too, since the public port faces end users.
func (api *adminAPI) handler(public bool) http.Handler {
	mux := http.NewServeMux()
	metricsH := metrics.Handler(api.metrics)
	if public {
		mux.Handle("GET /metrics", api.auth(auth.RoleAdmin, metricsH.ServeHTTP))
	} else {
		mux.Handle("GET /metrics", metricsH)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		apijson.Write(w, http.StatusOK, map[string]any{"status": "ok", "master": api.id})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if api.stopping.Err() != nil {
			apijson.Write(w, http.StatusServiceUnavailable, map[string]any{"status": "stopping"})
			return
		}
		apijson.Write(w, http.StatusOK, map[string]any{"status": "ready", "master": api.id})
	})
	mux.Handle("GET /api/v1/cluster", api.auth(auth.RoleAdmin, func(w http.ResponseWriter, r *http.Request) {
		apijson.Write(w, http.StatusOK, api.clusterStatus(r, public))
	}))
	mux.Handle("POST /api/v1/workers/{id}/drain", api.auth(auth.RoleAdmin, func(w http.ResponseWriter, r *http.Request) {
		api.drain(w, r, true)
	}))
	mux.Handle("POST /api/v1/workers/{id}/undrain", api.auth(auth.RoleAdmin, func(w http.ResponseWriter, r *http.Request) {
		api.drain(w, r, false)
	}))
	mux.Handle("GET /api/v1/apps", api.auth(auth.RoleAuthor, api.listApps))
	mux.Handle("POST /api/v1/apps", api.auth(auth.RoleAuthor, api.deploy))
	// Authors may change their own apps; the owner check is in AppManager.
	mux.Handle("DELETE /api/v1/apps/{name}", api.auth(auth.RoleAuthor, func(w http.ResponseWriter, r *http.Request) {
		api.appAction(w, r, func(ctx context.Context, name string) error { return api.apps.Remove(ctx, name, auth.PrincipalOf(r)) })
	}))
	mux.Handle("POST /api/v1/apps/{name}/disable", api.auth(auth.RoleAuthor, func(w http.ResponseWriter, r *http.Request) {
		api.appAction(w, r, func(ctx context.Context, name string) error {
			return api.apps.SetDisabled(ctx, name, true, auth.PrincipalOf(r))
		})
	}))
	mux.Handle("POST /api/v1/apps/{name}/enable", api.auth(auth.RoleAuthor, func(w http.ResponseWriter, r *http.Request) {
		api.appAction(w, r, func(ctx context.Context, name string) error {
			return api.apps.SetDisabled(ctx, name, false, auth.PrincipalOf(r))
		})
	}))
	// Who may name an app in a job: its owner changes it (owners.go).
	api.jobUserRoutes(mux)
	api.userRoutes(mux)
	api.authorRoutes(mux)
	api.jobs.Routes(mux)
	api.sessions.Routes(mux, public)
	api.dashboardRoutes(mux, public)
	mux.Handle("POST /api/v1/grants", api.auth(auth.RoleAdmin, api.grant))
	mux.Handle("GET /api/v1/instances/{id}/state", api.auth(auth.RoleAdmin, api.instanceState))
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		apijson.Error(w, http.StatusNotFound, "no such API endpoint: "+r.Method+" "+r.URL.Path)
	})
	return httpsec.Pages(api.scheme, mux)
}

func (api *adminAPI) drain(w http.ResponseWriter, r *http.Request, on bool) {
	id := r.PathValue("id")
	if err := api.workers.SetDraining(id, on); err != nil {
		status := http.StatusInternalServerError // the flag could not be stored
		var we *wire.Error
		if errors.As(err, &we) && we.Code == wire.CodeUnknownWorker {
			status = http.StatusNotFound
		}
		apijson.Error(w, status, err.Error())
		return
	}
	api.log.Info().Str("worker", id).Bool("draining", on).Msg("drain changed by admin")
	if on && r.URL.Query().Get("migrate") == "true" {
		// Drain with migration: its instances move now, with their users.
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Minute)
		defer cancel()
		res := api.workers.Moves.Migrate(ctx, id)
		status := http.StatusOK
		if len(res.Failed) > 0 {
			status = http.StatusMultiStatus
		}
		apijson.Write(w, status, map[string]any{"worker": id, "draining": true, "migrated": res.Migrated, "failed": res.Failed})
		return
	}
	apijson.Write(w, http.StatusOK, map[string]any{"worker": id, "draining": on})
}
