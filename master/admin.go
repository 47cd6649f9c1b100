package master

import (
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strings"
)

// adminHandler serves the master's HTTP endpoints. With the embedded proxy
// it is also the proxy's fallback, so everything is on the public port.
func (m *Master) adminHandler() http.Handler {
	mux := http.NewServeMux()
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
	mux.Handle("GET /api/v1/cluster", m.auth(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, m.Status())
	}))
	mux.Handle("POST /api/v1/workers/{id}/drain", m.auth(func(w http.ResponseWriter, r *http.Request) {
		m.drain(w, r, true)
	}))
	mux.Handle("POST /api/v1/workers/{id}/undrain", m.auth(func(w http.ResponseWriter, r *http.Request) {
		m.drain(w, r, false)
	}))
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		apiError(w, http.StatusNotFound, "no such API endpoint: "+r.Method+" "+r.URL.Path)
	})
	return mux
}

func (m *Master) drain(w http.ResponseWriter, r *http.Request, on bool) {
	id := r.PathValue("id")
	if err := m.workers.setDraining(id, on); err != nil {
		apiError(w, http.StatusNotFound, err.Error())
		return
	}
	m.log.Info().Str("worker", id).Bool("draining", on).Msg("drain changed by admin")
	writeJSON(w, http.StatusOK, map[string]any{"worker": id, "draining": on})
}

// auth requires the admin token as a Bearer token.
func (m *Master) auth(h http.HandlerFunc) http.Handler {
	want := []byte(m.cfg.AdminToken)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || got == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="cloudbrowser"`)
			apiError(w, http.StatusUnauthorized, "missing admin token (Authorization: Bearer <token>)")
			return
		}
		if subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="cloudbrowser", error="invalid_token"`)
			apiError(w, http.StatusUnauthorized, "invalid admin token")
			return
		}
		h(w, r)
	})
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
