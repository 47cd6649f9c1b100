package master

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/httpsec"
	"github.com/cloudbrowser-go/cloudbrowser/internal/metrics"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
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
		mux.Handle("GET /metrics", m.auth(roleAdmin, metricsH.ServeHTTP))
	} else {
		mux.Handle("GET /metrics", metricsH)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "master": m.id})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if m.ctx.Err() != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "stopping"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"status": "ready", "master": m.id})
	})
	mux.Handle("GET /api/v1/cluster", m.auth(roleAdmin, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, m.Status())
	}))
	mux.Handle("POST /api/v1/workers/{id}/drain", m.auth(roleAdmin, func(w http.ResponseWriter, r *http.Request) {
		m.drain(w, r, true)
	}))
	mux.Handle("POST /api/v1/workers/{id}/undrain", m.auth(roleAdmin, func(w http.ResponseWriter, r *http.Request) {
		m.drain(w, r, false)
	}))
	mux.Handle("GET /api/v1/apps", m.auth(roleAuthor, m.listApps))
	mux.Handle("POST /api/v1/apps", m.auth(roleAuthor, m.deploy))
	// Authors may change their own apps; the owner check is in AppManager.
	mux.Handle("DELETE /api/v1/apps/{name}", m.auth(roleAuthor, func(w http.ResponseWriter, r *http.Request) {
		m.appAction(w, r, func(ctx context.Context, name string) error { return m.apps.Remove(ctx, name, principalOf(r)) })
	}))
	mux.Handle("POST /api/v1/apps/{name}/disable", m.auth(roleAuthor, func(w http.ResponseWriter, r *http.Request) {
		m.appAction(w, r, func(ctx context.Context, name string) error {
			return m.apps.SetDisabled(ctx, name, true, principalOf(r))
		})
	}))
	mux.Handle("POST /api/v1/apps/{name}/enable", m.auth(roleAuthor, func(w http.ResponseWriter, r *http.Request) {
		m.appAction(w, r, func(ctx context.Context, name string) error {
			return m.apps.SetDisabled(ctx, name, false, principalOf(r))
		})
	}))
	// Who may name an app in a job: its owner changes it (authors.go).
	m.jobUserRoutes(mux)
	m.userRoutes(mux)
	m.authorRoutes(mux)
	m.jobRoutes(mux)
	m.dashboardRoutes(mux)
	mux.Handle("POST /api/v1/grants", m.auth(roleAdmin, m.grant))
	mux.Handle("GET /api/v1/instances/{id}/state", m.auth(roleAdmin, m.instanceState))
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		apiError(w, http.StatusNotFound, "no such API endpoint: "+r.Method+" "+r.URL.Path)
	})
	return httpsec.Pages(m.scheme, mux)
}

func (m *Master) drain(w http.ResponseWriter, r *http.Request, on bool) {
	id := r.PathValue("id")
	if err := m.workers.setDraining(id, on); err != nil {
		status := http.StatusInternalServerError // the flag could not be stored
		var we *wire.Error
		if errors.As(err, &we) && we.Code == wire.CodeUnknownWorker {
			status = http.StatusNotFound
		}
		apiError(w, status, err.Error())
		return
	}
	m.log.Info().Str("worker", id).Bool("draining", on).Msg("drain changed by admin")
	if on && r.URL.Query().Get("migrate") == "true" {
		// Drain with migration: its instances move now, with their users.
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Minute)
		defer cancel()
		res := m.workers.migrate(ctx, id)
		status := http.StatusOK
		if len(res.Failed) > 0 {
			status = http.StatusMultiStatus
		}
		writeJSON(w, status, map[string]any{"worker": id, "draining": true, "migrated": res.Migrated, "failed": res.Failed})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"worker": id, "draining": on})
}

type role int

const (
	roleJobs   role = iota // submits and reads jobs, renders and monitors
	roleAuthor             // deploys, lists and changes their own applications (and jobs)
	roleAdmin              // everything
)

// auth requires a Bearer token of at least the given role: the admin token
// passes everywhere, author tokens (the shared one and per-author ones)
// only where roleAuthor suffices. The handler finds who it is with
// principalOf.
func (m *Master) auth(need role, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok && m.adminSession(r) {
			// The dashboard's cookie. A state change also needs a header a
			// cross-site form cannot send (CSRF).
			if r.Method != http.MethodGet && r.Header.Get("X-CloudBrowser-Dashboard") != "1" {
				apiError(w, http.StatusForbidden, "missing X-CloudBrowser-Dashboard header")
				return
			}
			h(w, withPrincipal(r, adminPrincipal))
			return
		}
		if !ok || got == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="cloudbrowser"`)
			apiError(w, http.StatusUnauthorized, "missing token (Authorization: Bearer <token>)")
			return
		}
		var p principal
		if tokenIs(got, m.cfg.AdminToken) {
			p = adminPrincipal
		} else if tokenIs(got, m.cfg.AuthorToken) {
			p = principal{name: sharedAuthor}
		} else if tokenIs(got, m.cfg.JobsToken) {
			p = principal{name: jobsPrincipal, jobsOnly: true}
		} else if name, ok := m.authors.byToken(got); ok {
			p = principal{name: name}
		} else {
			w.Header().Set("WWW-Authenticate", `Bearer realm="cloudbrowser", error="invalid_token"`)
			apiError(w, http.StatusUnauthorized, "invalid token")
			return
		}
		if p.jobsOnly && need > roleJobs {
			apiError(w, http.StatusForbidden, "the jobs token may only submit and read jobs, renders and monitors")
			return
		}
		if !p.admin && need > roleAuthor {
			apiError(w, http.StatusForbidden, "an author token may only deploy, list and change its own applications; this needs the admin token")
			return
		}
		h(w, withPrincipal(r, p))
	})
}

func tokenIs(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

func apiError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"status": status, "error": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
