package master

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/ids"
	"github.com/cloudbrowser-go/cloudbrowser/internal/pages"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/apijson"
	"github.com/cloudbrowser-go/cloudbrowser/master/auth"
	"github.com/cloudbrowser-go/cloudbrowser/master/sessions"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
	"github.com/cloudbrowser-go/cloudbrowser/web"
)

// The admin dashboard: /admin (a page of web/ that updates itself from
// /api/v1/events), signed in with the admin token, which is exchanged for
// an HttpOnly cookie so scripts never hold it. The cookie acts as the
// admin on the whole admin API, the sessions API included (auth.Check):
// the dashboard ends a session with DELETE /api/v1/sessions/{id}.

func (api *adminAPI) dashboardRoutes(mux *http.ServeMux, public bool) {
	mux.HandleFunc("GET /admin", func(w http.ResponseWriter, r *http.Request) {
		if !api.access.Dashboard().Valid(r) {
			api.loginPage(w, r, "")
			return
		}
		pages.WriteHTML(w, r, web.Admin, "no-store")
	})
	mux.HandleFunc("GET /admin/{file}", func(w http.ResponseWriter, r *http.Request) {
		// admin.js and admin.css; unversioned URLs, revalidated by ETag.
		if !web.Assets.Serve(w, r, "admin/"+r.PathValue("file")) {
			http.NotFound(w, r)
		}
	})
	mux.HandleFunc("POST /admin/login", func(w http.ResponseWriter, r *http.Request) {
		c, err := r.Cookie("cb_csrf")
		if err != nil || r.PostFormValue("csrf") != c.Value || len(c.Value) != 32 {
			api.loginPage(w, r, "The form was stale; please retry.")
			return
		}
		if !api.access.IsAdminToken(r.PostFormValue("token")) {
			api.log.Warn().Str("remote", r.RemoteAddr).Msg("dashboard login refused")
			w.WriteHeader(http.StatusUnauthorized)
			api.loginPage(w, r, "That is not the admin token.")
			return
		}
		http.SetCookie(w, &http.Cookie{Name: auth.AdminCookie, Value: api.access.Dashboard().Issue(), Path: "/",
			HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: api.scheme.HTTPS(r)})
		http.Redirect(w, r, "/admin", http.StatusSeeOther)
	})
	mux.HandleFunc("POST /admin/logout", func(w http.ResponseWriter, r *http.Request) {
		// The cookie is a bearer value: clearing it in this browser is not
		// enough, a copy must stop working too.
		if cl, ok := api.access.Dashboard().Claims(r); ok {
			if err := api.access.Dashboard().End(r.Context(), cl); err != nil {
				api.log.Error().Err(err).Msg("dashboard logout: session could not be ended")
				apijson.Error(w, http.StatusInternalServerError, "the session could not be ended; retry")
				return
			}
			api.log.Info().Str("remote", r.RemoteAddr).Msg("dashboard logout")
		}
		http.SetCookie(w, &http.Cookie{Name: auth.AdminCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
			SameSite: http.SameSiteStrictMode, Secure: api.scheme.HTTPS(r)})
		http.Redirect(w, r, "/admin", http.StatusSeeOther)
	})
	mux.Handle("GET /api/v1/history", api.auth(auth.RoleAdmin, func(w http.ResponseWriter, r *http.Request) {
		apijson.Write(w, http.StatusOK, api.history.snapshot())
	}))
	mux.Handle("GET /api/v1/events", api.auth(auth.RoleAdmin, func(w http.ResponseWriter, r *http.Request) {
		api.events(w, r, public)
	}))
	mux.Handle("POST /api/v1/instances/{id}/close", api.auth(auth.RoleAdmin, api.closeInstance))
	mux.Handle("GET /api/v1/instances/{id}/browsers", api.auth(auth.RoleAdmin, api.instanceBrowsers))
}

func (api *adminAPI) loginPage(w http.ResponseWriter, r *http.Request, msg string) {
	tok := ids.Random(32)
	if c, err := r.Cookie("cb_csrf"); err == nil && len(c.Value) == 32 {
		tok = c.Value
	} else {
		http.SetCookie(w, &http.Cookie{Name: "cb_csrf", Value: tok, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
			Secure: api.scheme.HTTPS(r)})
	}
	var buf bytes.Buffer
	_ = web.AdminLogin.Execute(&buf, map[string]string{"CSRF": tok, "Error": msg})
	pages.WriteHTML(w, r, buf.Bytes(), "no-store")
}

// clusterStatus is the cluster status as the admin API answers r: with
// the automation sessions, their live URLs on the public address (public:
// r came to the public port).
func (api *adminAPI) clusterStatus(r *http.Request, public bool) wire.ClusterStatus {
	st := api.status()
	st.Sessions = sessions.Dashboard(api.sessions, &st, r, public)
	return st
}

// events streams the cluster status as server-sent events every 2 s.
func (api *adminAPI) events(w http.ResponseWriter, r *http.Request, public bool) {
	fl, ok := w.(http.Flusher)
	if !ok {
		apijson.Error(w, http.StatusInternalServerError, "streaming unsupported")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		b, _ := json.Marshal(api.clusterStatus(r, public))
		if _, err := fmt.Fprintf(w, "event: status\ndata: %s\n\n", b); err != nil {
			return
		}
		fl.Flush()
		select {
		case <-r.Context().Done():
			return
		case <-api.stopping.Done():
			return
		case <-t.C:
		}
	}
}

// instanceRef finds the worker hosting an instance, answering the error
// itself when there is none.
func (api *adminAPI) instanceRef(w http.ResponseWriter, iid string) (*rmi.Ref, string, bool) {
	ref, wid, ok := api.workers.Host(iid)
	if !ok {
		apijson.Error(w, http.StatusNotFound, "no instance "+iid)
		return nil, "", false
	}
	if ref == nil {
		apijson.Error(w, http.StatusServiceUnavailable, "the instance's worker is not connected")
		return nil, "", false
	}
	return ref, wid, true
}

// instanceBrowsers lists an instance's browsers (for admin viewers).
func (api *adminAPI) instanceBrowsers(w http.ResponseWriter, r *http.Request) {
	ref, _, ok := api.instanceRef(w, r.PathValue("id"))
	if !ok {
		return
	}
	bs, err := contract.WorkerAppsClient{R: ref}.Browsers(r.Context(), r.PathValue("id"))
	if err != nil {
		apijson.Error(w, http.StatusBadGateway, err.Error())
		return
	}
	apijson.Write(w, http.StatusOK, bs)
}

// closeInstance closes an instance on its worker (admin action).
func (api *adminAPI) closeInstance(w http.ResponseWriter, r *http.Request) {
	iid := r.PathValue("id")
	ref, wid, ok := api.instanceRef(w, iid)
	if !ok {
		return
	}
	if err := (contract.WorkerAppsClient{R: ref}).CloseInstance(r.Context(), wire.ClosedInstance{ID: iid}); err != nil {
		apijson.Error(w, http.StatusBadGateway, err.Error())
		return
	}
	api.log.Info().Str("instance", iid).Str("worker", wid).Msg("instance closed by admin")
	apijson.Write(w, http.StatusOK, map[string]any{"instance": iid, "closed": true})
}
