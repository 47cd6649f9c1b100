package httpserve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/pages"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
	"github.com/cloudbrowser-go/cloudbrowser/web"
)

// serveLogin handles /<app>/login and /<app>/logout. Accounts live on the
// master, which checks passwords; the session is a signed cookie every
// worker accepts.
func (s *Server) serveLogin(rw http.ResponseWriter, r *http.Request, id string, app wire.App, action string) {
	d := web.LoginData{AppName: app.Name, MountPoint: app.MountPoint, CSRF: s.users.csrf(rw, r), Next: safeNext(app, r.FormValue("next"))}
	if action == "logout" {
		if r.Method != http.MethodPost || !s.users.checkCSRF(r) {
			s.page(rw, r, id, http.StatusForbidden, "Request refused", "Log out with the button of the login page.")
			return
		}
		if !s.endSession(rw, r, id, app) {
			return
		}
		s.users.logout(rw, r)
		redirectNext(rw, r, "/"+app.MountPoint+"/login")
		return
	}
	if r.Method != http.MethodPost {
		d.User, _ = s.users.loggedIn(r)
		s.render(rw, r, id, web.Login, d)
		return
	}
	if !s.users.checkCSRF(r) {
		s.page(rw, r, id, http.StatusForbidden, "Request refused", "The form was stale or not sent by this site. Reload the page and retry.")
		return
	}
	user, password := strings.TrimSpace(r.PostFormValue("user")), r.PostFormValue("password")
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	ip := clientIP(r)
	res, err := s.checkLogin(ctx, wire.LoginRequest{User: user, Password: password, ClientIP: ip, RequestID: id})
	if err != nil {
		s.log.Warn().Str("request_id", id).Err(err).Msg("login check failed")
		rw.Header().Set("Retry-After", "2")
		s.page(rw, r, id, http.StatusServiceUnavailable, "Login unavailable", "Logins cannot be checked right now. Please retry shortly.")
		return
	}
	if res.RetryAfter > 0 {
		// The same answer whether or not the account exists: unknown names
		// are limited too.
		s.log.Info().Str("request_id", id).Str("app", app.MountPoint).Str("user", user).Str("client_ip", ip).
			Int64("retry_after_s", res.RetryAfter).Msg("login refused: locked after repeated failures")
		d.Error = lockedMessage(res.RetryAfter)
		rw.Header().Set("Retry-After", strconv.FormatInt(res.RetryAfter, 10))
		rw.WriteHeader(http.StatusTooManyRequests)
		s.render(rw, r, id, web.Login, d)
		return
	}
	if !res.OK {
		s.log.Info().Str("request_id", id).Str("app", app.MountPoint).Str("user", user).Msg("login refused")
		d.Error = "Wrong user name or password."
		rw.WriteHeader(http.StatusUnauthorized)
		s.render(rw, r, id, web.Login, d)
		return
	}
	s.users.login(rw, r, user)
	s.log.Info().Str("request_id", id).Str("app", app.MountPoint).Str("user", user).Msg("logged in")
	redirectNext(rw, r, d.Next)
}

// endSession ends the request's login session on the whole cluster: this
// worker refuses it at once, the master records it and tells every worker.
// The cookie is a bearer value, so clearing it in this browser only would
// leave any copy working. If the master cannot be told, the user is asked
// to retry (their cookie is kept so the retry can name the session).
func (s *Server) endSession(rw http.ResponseWriter, r *http.Request, id string, app wire.App) bool {
	cl, ok := s.users.session(r)
	if !ok {
		return true // nothing (left) to end
	}
	rev := wire.SessionRevocation{ID: cl.ID, User: cl.User, Expires: time.Now().Add(s.users.sessions.TTL).Unix()}
	_ = s.host.EndSession(r.Context(), rev)
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	err := contract.AccountsClient{C: s.host.Master()}.EndSession(ctx, rev)
	switch {
	case errors.Is(err, rmi.ErrNoMethod):
		s.log.Warn().Str("request_id", id).Msg("logout: the master cannot end sessions (older version); ended on this worker only")
	case err != nil:
		s.log.Warn().Str("request_id", id).Err(err).Msg("logout: the master could not be told")
		rw.Header().Set("Retry-After", "2")
		s.page(rw, r, id, http.StatusServiceUnavailable, "Logout unavailable",
			"Your session could not be ended on every server right now. Please retry shortly.")
		return false
	}
	s.log.Info().Str("request_id", id).Str("app", app.MountPoint).Str("user", cl.User).Msg("logged out")
	return true
}

// checkLogin asks the master to check a login. A master older than the
// login limits has no Login method; its Verify still answers.
func (s *Server) checkLogin(ctx context.Context, req wire.LoginRequest) (wire.LoginResult, error) {
	accounts := contract.AccountsClient{C: s.host.Master()}
	res, err := accounts.Login(ctx, req)
	if errors.Is(err, rmi.ErrNoMethod) {
		res = wire.LoginResult{}
		res.OK, err = accounts.Verify(ctx, req.User, req.Password)
	}
	if err != nil {
		return wire.LoginResult{}, fmt.Errorf("checking login: %w", err)
	}
	return res, nil
}

func lockedMessage(seconds int64) string {
	unit := "seconds"
	if seconds == 1 {
		unit = "second"
	}
	return fmt.Sprintf("Too many failed attempts; try again in %d %s.", seconds, unit)
}

// clientIP is the end user's address for the login limits: on a request
// with a valid hop signature, the last X-Forwarded-For entry, the one our
// proxy appends (earlier ones come from the client and can be forged); else
// the peer's address. "" = unknown.
func clientIP(r *http.Request) string {
	if v := r.Header.Values("X-Forwarded-For"); len(v) > 0 && viaProxy(r) {
		last := v[len(v)-1]
		if i := strings.LastIndexByte(last, ','); i >= 0 {
			last = last[i+1:]
		}
		if a, err := netip.ParseAddr(strings.TrimSpace(last)); err == nil {
			return a.String()
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return ""
	}
	return host
}

// safeNext keeps post-login redirects inside the application: next must
// be a local path (no scheme, host, backslash, control character or
// percent-encoded dot, slash or backslash) that, cleaned of dot segments,
// stays under /<app>/. Anything else goes to the app's root. The cleaned
// path is returned, so the browser follows what was checked.
func safeNext(app wire.App, next string) string {
	base := "/" + app.MountPoint
	lower := strings.ToLower(next)
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || len(next) > 2048 ||
		strings.ContainsAny(next, "\\") || strings.Contains(lower, "%2e") || strings.Contains(lower, "%2f") ||
		strings.Contains(lower, "%5c") {
		return base
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || u.Opaque != "" {
		return base
	}
	for _, c := range u.Path {
		if c < 0x20 || c == 0x7f {
			return base
		}
	}
	p := path.Clean(u.Path)
	if p != base && !strings.HasPrefix(p, base+"/") {
		return base
	}
	if strings.HasSuffix(u.Path, "/") && p != base {
		p += "/"
	}
	return (&url.URL{Path: p, RawQuery: u.RawQuery}).String()
}

// requireUser returns the user for a request to app. An app with
// authentication sends anonymous visitors to its login page.
func (s *Server) requireUser(rw http.ResponseWriter, r *http.Request, id string, app wire.App) (string, bool) {
	if !app.Authentication {
		return s.identify(rw, r, id, app)
	}
	if user, rotate := s.users.loggedIn(r); user != "" {
		if rotate {
			s.users.renew(rw, r)
		}
		return user, true
	}
	if r.Method == http.MethodGet && !isUpgrade(r) {
		redirectNext(rw, r, "/"+app.MountPoint+"/login?next="+url.QueryEscape(r.URL.Path))
		return "", false
	}
	pages.Write(rw, r, id, pages.Page{Status: http.StatusUnauthorized, Title: "Login required", Message: "This application needs you to log in.",
		LinkURL: "/" + app.MountPoint + "/login", LinkText: "Log in"})
	return "", false
}

// viewer is requireUser for Browser URLs and their sockets, where an admin
// from the dashboard may watch without logging in to the app.
func (s *Server) viewer(rw http.ResponseWriter, r *http.Request, id string, app wire.App) (string, bool) {
	if app.Authentication && s.users.adminViewer(r) {
		user, _ := s.users.loggedIn(r)
		return user, true
	}
	return s.requireUser(rw, r, id, app)
}
