package worker

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/proxy"
	"github.com/cloudbrowser-go/cloudbrowser/web"
)

// serveLogin handles /<app>/login and /<app>/logout. Accounts live on the
// master, which checks passwords; the session is a signed cookie every
// worker accepts.
func (w *Worker) serveLogin(rw http.ResponseWriter, r *http.Request, id string, app wire.App, action string) {
	d := web.LoginData{AppName: app.Name, MountPoint: app.MountPoint, CSRF: w.users.csrf(rw, r), Next: safeNext(app, r.FormValue("next"))}
	if action == "logout" {
		if r.Method != http.MethodPost || !w.users.checkCSRF(r) {
			w.page(rw, r, id, http.StatusForbidden, "Request refused", "Log out with the button of the login page.")
			return
		}
		w.users.logout(rw, r)
		redirect303(rw, r, "/"+app.MountPoint+"/login")
		return
	}
	if r.Method != http.MethodPost {
		d.User, _ = w.users.loggedIn(r)
		w.render(rw, r, id, web.Login, d)
		return
	}
	if !w.users.checkCSRF(r) {
		w.page(rw, r, id, http.StatusForbidden, "Request refused", "The form was stale or not sent by this site. Reload the page and retry.")
		return
	}
	user, password := strings.TrimSpace(r.PostFormValue("user")), r.PostFormValue("password")
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	var ok bool
	if err := w.client.Call(ctx, wire.ObjAccounts, "Verify", &ok, user, password); err != nil {
		w.log.Warn().Str("request_id", id).Err(err).Msg("login check failed")
		rw.Header().Set("Retry-After", "2")
		w.page(rw, r, id, http.StatusServiceUnavailable, "Login unavailable", "Logins cannot be checked right now. Please retry shortly.")
		return
	}
	if !ok {
		w.log.Info().Str("request_id", id).Str("app", app.MountPoint).Str("user", user).Msg("login refused")
		d.Error = "Wrong user name or password."
		rw.WriteHeader(http.StatusUnauthorized)
		w.render(rw, r, id, web.Login, d)
		return
	}
	w.users.login(rw, r, user)
	w.log.Info().Str("request_id", id).Str("app", app.MountPoint).Str("user", user).Msg("logged in")
	redirect303(rw, r, d.Next)
}

// safeNext keeps post-login redirects inside the application.
func safeNext(app wire.App, next string) string {
	base := "/" + app.MountPoint
	if next == base || strings.HasPrefix(next, base+"/") && !strings.Contains(next, "//") && !strings.Contains(next, "\\") {
		return next
	}
	return base
}

// requireUser returns the user for a request to app. An app with
// authentication sends anonymous visitors to its login page.
func (w *Worker) requireUser(rw http.ResponseWriter, r *http.Request, id string, app wire.App) (string, bool) {
	if !app.Authentication {
		return w.users.identify(rw, r), true
	}
	if user, rotate := w.users.loggedIn(r); user != "" {
		if rotate {
			w.users.login(rw, r, user)
		}
		return user, true
	}
	if r.Method == http.MethodGet && !isUpgrade(r) {
		redirect303(rw, r, "/"+app.MountPoint+"/login?next="+url.QueryEscape(r.URL.Path))
		return "", false
	}
	proxy.WritePage(rw, r, id, http.StatusUnauthorized, "Login required", "This application needs you to log in.",
		"/"+app.MountPoint+"/login", "Log in")
	return "", false
}

// viewer is requireUser for Browser URLs and their sockets, where an admin
// from the dashboard may watch without logging in to the app.
func (w *Worker) viewer(rw http.ResponseWriter, r *http.Request, id string, app wire.App) (string, bool) {
	if app.Authentication && w.users.adminViewer(r) {
		user, _ := w.users.loggedIn(r)
		return user, true
	}
	return w.requireUser(rw, r, id, app)
}
