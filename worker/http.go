package worker

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"html/template"
	"net/http"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/hop"
	"github.com/cloudbrowser-go/cloudbrowser/internal/httpsec"
	"github.com/cloudbrowser-go/cloudbrowser/internal/metrics"
	"github.com/cloudbrowser-go/cloudbrowser/internal/pages"
	"github.com/cloudbrowser-go/cloudbrowser/internal/urlkind"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
	"github.com/cloudbrowser-go/cloudbrowser/web"
	"github.com/cloudbrowser-go/cloudbrowser/worker/engine"
	"github.com/cloudbrowser-go/cloudbrowser/worker/pool"
)

// handler serves the worker's HTTP endpoints. Requests arrive through a
// proxy, so URLs are classified exactly as the proxy does.
func (w *Worker) handler() http.Handler {
	metricsH := metrics.Handler(w.reg)
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("X-CB-Worker", w.id)
		httpsec.SetPage(rw.Header(), w.users.https(r))
		id := r.Header.Get("X-Request-Id")
		switch r.URL.Path {
		case "/metrics": // proxies never forward reserved paths: only direct scrapes reach this
			if w.metricsAllowed(rw, r) {
				metricsH.ServeHTTP(rw, r)
			}
			return
		case "/healthz": // open to tooling (liveness checks); tells only the worker id
			rw.Header().Set("Content-Type", "application/json")
			_, _ = rw.Write([]byte(`{"status":"ok","worker":"` + w.id + `"}` + "\n"))
			return
		case "/readyz": // open like /healthz
			rw.Header().Set("Content-Type", "application/json")
			if !w.Ready() {
				rw.WriteHeader(http.StatusServiceUnavailable)
				_, _ = rw.Write([]byte(`{"status":"not registered with the master","worker":"` + w.id + `"}` + "\n"))
				return
			}
			if st, err := w.runtime.Stats(r.Context()); err != nil || (w.runtime.Name() != "none" && st.Processes == 0) {
				rw.WriteHeader(http.StatusServiceUnavailable)
				_, _ = rw.Write([]byte(`{"status":"browser runtime down","worker":"` + w.id + `"}` + "\n"))
				return
			}
			_, _ = rw.Write([]byte(`{"status":"ready","worker":"` + w.id + `"}` + "\n"))
			return
		}
		// Everything else comes from the cluster's proxies only; the signed
		// hop is what makes X-Forwarded-For and -Proto believable.
		key := w.hopKey.Get()
		if key == nil {
			// Registered at the master, which routes here at once, but its
			// reply (with the key) not read yet: wait for it.
			ctx, cancel := context.WithTimeout(r.Context(), w.hopWait)
			key = w.hopKey.Wait(ctx)
			cancel()
		}
		if err := hop.Verify(key, time.Now(), r.Header.Get(hop.Header), hop.FieldsOf(r)); err != nil {
			w.log.Info().Str("request_id", id).Str("peer", r.RemoteAddr).Str("method", r.Method).
				Str("reason", err.Error()).Msg("request refused: not relayed by a cluster proxy")
			w.page(rw, r, id, http.StatusForbidden, "Forbidden",
				"This worker only accepts requests relayed by the cluster proxies. Use the public address of the cluster.")
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), viaProxyKey{}, true))
		// Again, now that the hop is verified: a signed X-Forwarded-Proto
		// (--trust-forwarded-proto) counts from here, so HSTS goes out.
		httpsec.SetPage(rw.Header(), w.users.https(r))
		t := urlkind.Classify(r.Method, r.URL.EscapedPath(), isUpgrade(r))
		switch t.Kind {
		case urlkind.KindApp:
			w.serveApp(rw, r, id, t)
		case urlkind.KindInstance:
			w.serveInstance(rw, r, id, t)
		case urlkind.KindBrowser:
			w.serveBrowser(rw, r, id, t)
		case urlkind.KindWebSocket:
			w.serveSocket(rw, r, id, t)
		case urlkind.KindResource:
			in, ok := w.hosted(rw, r, id, t)
			if !ok {
				return
			}
			if t.BrowserID != "" && t.Rest == "ws" && r.Method == http.MethodGet {
				w.serveSocketInfo(rw, r, id, t)
				return
			}
			if rest, ok := strings.CutPrefix(t.Rest, "_cb/"); ok && t.BrowserID == "" &&
				web.Assets.Serve(rw, r, path.Clean("/" + rest)[1:]) {
				return
			}
			_ = in
			w.page(rw, r, id, http.StatusNotFound, "Not found", "There is nothing at this address.")
		default:
			w.page(rw, r, id, http.StatusNotFound, "Not found", "There is nothing at this address.")
		}
	})
}

type viaProxyKey struct{}

// viaProxy reports whether r carried a valid hop signature: only then are
// its X-Forwarded-* headers the proxy's.
func viaProxy(r *http.Request) bool {
	ok, _ := r.Context().Value(viaProxyKey{}).(bool)
	return ok
}

// metricsAllowed checks the bearer token the master handed over (the
// operator's copy is <data-dir>/metrics.token); it answers the refusal.
func (w *Worker) metricsAllowed(rw http.ResponseWriter, r *http.Request) bool {
	tok := w.metricsToken.Load()
	if tok == nil {
		rw.Header().Set("Retry-After", "5")
		http.Error(rw, "metrics unavailable: this worker has not registered with the master yet", http.StatusServiceUnavailable)
		return false
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(*tok)) != 1 {
		rw.Header().Set("WWW-Authenticate", `Bearer realm="cloudbrowser-metrics"`)
		http.Error(rw, "metrics need the metrics token as a bearer token (Authorization: Bearer <metrics.token of the master's data directory>)", http.StatusUnauthorized)
		return false
	}
	return true
}

func isUpgrade(r *http.Request) bool {
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
}

func (w *Worker) page(rw http.ResponseWriter, r *http.Request, id string, status int, title, msg string) {
	pages.Write(rw, r, id, pages.Page{Status: status, Title: title, Message: msg})
}

// serveApp applies the app's instantiation strategy to an Application URL.
// singleAppInstance and singleInstancePerUser: the master finds or places
// the user's instance (possibly on another worker) and opens their browser
// there; the user is redirected to that Browser URL. singleBrowserPerUser
// and multiInstance: the landing page, where the user picks or creates an
// instance.
func (w *Worker) serveApp(rw http.ResponseWriter, r *http.Request, id string, t urlkind.Target) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodPost {
		rw.Header().Set("Allow", "GET, HEAD, POST")
		w.page(rw, r, id, http.StatusMethodNotAllowed, "Method not allowed", "Open this address with GET.")
		return
	}
	app, ok := w.apps.app(t.App)
	if !ok || (t.Rest != "" && t.Rest != "login" && t.Rest != "logout") {
		w.page(rw, r, id, http.StatusNotFound, "Application not found", "There is no application at this address.")
		return
	}
	if t.Rest != "" {
		w.serveLogin(rw, r, id, app, t.Rest)
		return
	}
	if app.Disabled {
		w.page(rw, r, id, http.StatusServiceUnavailable, "Application unavailable",
			"This application has been disabled by an administrator.")
		return
	}
	user, ok := w.requireUser(rw, r, id, app)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	landing := app.Strategy == wire.MultiInstance || app.Strategy == wire.SingleBrowserPerUser
	req := wire.PlaceRequest{App: t.App, User: user, From: w.id, RequestID: id, ClientIP: clientIP(r)}
	switch {
	case landing && r.Method == http.MethodPost:
		if !w.users.checkCSRF(r) || r.PostFormValue("action") != "new-instance" {
			w.page(rw, r, id, http.StatusForbidden, "Request refused", "The form was stale or not sent by this site. Reload the page and retry.")
			return
		}
		req.New = true
		req.NoBrowser = app.Strategy == wire.MultiInstance // its instance page lets the user choose
	case landing:
		w.landing(ctx, rw, r, id, app, user)
		return
	case r.Method == http.MethodPost:
		rw.Header().Set("Allow", "GET, HEAD")
		w.page(rw, r, id, http.StatusMethodNotAllowed, "Method not allowed", "Open this address with GET.")
		return
	}
	t0 := time.Now()
	p, err := w.place(ctx, req)
	// The whole placement: the master's choice, the instance and the
	// user's browser (whose own steps come with its Browser URL).
	rw.Header().Add("Server-Timing", timingEntry("place", time.Since(t0)))
	if err != nil {
		var re *rmi.RemoteError
		if errors.As(err, &re) && re.Code == wire.CodeQuota {
			w.log.Info().Str("request_id", id).Str("app", t.App).Str("user", user).Str("client_ip", req.ClientIP).
				Str("reason", re.Message).Msg("placement refused: quota")
			w.quotaPage(rw, r, id, app, re.Message)
			return
		}
		w.placeError(rw, r, id, t, err)
		return
	}
	w.log.Info().Str("request_id", id).Str("app", t.App).Str("instance", p.InstanceID).Str("browser", p.BrowserID).
		Str("on", p.WorkerID).Bool("created", p.Created).Msg("application request placed")
	to := "/" + t.App + "/a/" + p.InstanceID
	if p.BrowserID != "" {
		to += "/b/" + p.BrowserID
	}
	redirectNext(rw, r, to)
}

// landing renders the app's landing page: the user's instances.
func (w *Worker) landing(ctx context.Context, rw http.ResponseWriter, r *http.Request, id string, app wire.App, user string) {
	insts, err := contract.WorkerManagerClient{C: w.client}.Instances(ctx, app.MountPoint, user)
	if err != nil {
		w.placeError(rw, r, id, urlkind.Target{App: app.MountPoint}, err)
		return
	}
	d := web.LandingData{AppName: app.Name, Description: app.Description, MountPoint: app.MountPoint, CSRF: w.users.csrf(rw, r)}
	for _, in := range insts {
		li := web.LandingInstance{ID: in.ID, URL: "/" + app.MountPoint + "/a/" + in.ID,
			Worker: in.Worker, Created: in.Created.Format(time.DateTime), Name: in.Name}
		if in.Owner != user {
			li.Owner, li.Role = in.Owner, in.Shared[user]
		} else if app.Strategy == wire.SingleBrowserPerUser {
			// Its instance URL opens the owner's browser: the landing page
			// is where the owner shares it (the paper: both landing pages
			// manage permissions).
			li.Share = true
			for p, r := range in.Shared {
				li.Grants = append(li.Grants, web.Grant{Principal: p, Role: r})
			}
			sort.Slice(li.Grants, func(i, j int) bool { return li.Grants[i].Principal < li.Grants[j].Principal })
		}
		d.Instances = append(d.Instances, li)
	}
	w.render(rw, r, id, web.Landing, d)
}

// instanceLanding renders an instance's page: its browsers the user may
// open, and a button for a new one.
func (w *Worker) instanceLanding(rw http.ResponseWriter, r *http.Request, id string, in *instance, user string) {
	base := "/" + in.app.MountPoint + "/a/" + in.info.ID
	d := web.LandingData{AppName: in.app.Name, Description: in.app.Description, MountPoint: in.app.MountPoint,
		CSRF: w.users.csrf(rw, r), InstanceID: in.info.ID, InstanceURL: base}
	bs := in.browserList()
	in.mu.Lock()
	d.Owner = in.instanceRoleLocked(user) == RoleOwner
	d.Grants = grantList(in.perms)
	d.InstanceName = in.info.Name
	if in.noteFor[user] {
		delete(in.noteFor, user)
		d.Notice = "Your browser was released after " + in.idle.String() + " without a connection. Open one of the browsers below or create a new one."
	}
	in.mu.Unlock()
	for _, b := range bs {
		role := in.browserRole(b, user)
		if role == RoleNone {
			continue // the default policy: others' browsers are not listed
		}
		lb := web.LandingBrowser{ID: b.id, URL: b.url(), Owner: b.owner,
			Created: b.created.Format(time.DateTime), Clients: b.hub.Count(), Mine: b.owner == user, Role: role.String()}
		b.subMu.Lock()
		lb.Name = b.name
		if lb.Mine {
			lb.Grants = grantList(b.perms)
		}
		b.subMu.Unlock()
		d.Browsers = append(d.Browsers, lb)
	}
	sort.Slice(d.Browsers, func(i, j int) bool { return d.Browsers[i].Created < d.Browsers[j].Created })
	w.render(rw, r, id, web.Landing, d)
}

func (w *Worker) render(rw http.ResponseWriter, r *http.Request, id string, t *template.Template, data any) {
	var buf bytes.Buffer
	if err := t.Execute(&buf, data); err != nil {
		w.log.Error().Str("request_id", id).Err(err).Msg("template")
		w.page(rw, r, id, http.StatusInternalServerError, "Internal error", "The page could not be rendered.")
		return
	}
	pages.WriteHTML(rw, r, buf.Bytes(), "no-store")
}

func (w *Worker) placeError(rw http.ResponseWriter, r *http.Request, id string, t urlkind.Target, err error) {
	var re *rmi.RemoteError
	code := ""
	if errors.As(err, &re) {
		code = re.Code
	}
	w.log.Warn().Str("request_id", id).Str("app", t.App).Str("code", code).Err(err).Msg("placement failed")
	switch code {
	case wire.CodeUnknownApp, wire.CodePoolLimit, wire.CodeAppDisabled, wire.CodeNoWorkers:
		pg, _ := pages.ForCode(code, t.App, re.Message)
		pages.Write(rw, r, id, pg)
	default:
		pages.Write(rw, r, id, pages.Page{Status: http.StatusServiceUnavailable, Title: "Service unavailable",
			Message: "A new app instance could not be started. Please retry shortly.", RetryAfter: "2"})
	}
}

// hosted finds the instance of t on this worker, or answers 421 (not
// here: ask the master again) or 404 (not of this app).
func (w *Worker) hosted(rw http.ResponseWriter, r *http.Request, id string, t urlkind.Target) (*instance, bool) {
	in, ok := w.apps.instance(t.InstanceID)
	if !ok {
		pages.Write(rw, r, id, pages.NotHere)
		return nil, false
	}
	if in.app.MountPoint != t.App {
		pg, _ := pages.ForCode(wire.CodeUnknownInstance, t.App, "")
		pages.Write(rw, r, id, pg)
		return nil, false
	}
	return in, true
}

// serveInstance handles an App-instance URL by strategy:
// singleBrowserPerUser sends the user to their own browser in the instance
// (created if needed); multiInstance shows the instance's page to join a
// browser or create one; for the single-instance strategies the URL is not
// meaningful and the user is pointed to the Application URL.
func (w *Worker) serveInstance(rw http.ResponseWriter, r *http.Request, id string, t urlkind.Target) {
	in, ok := w.hosted(rw, r, id, t)
	if !ok {
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodPost {
		rw.Header().Set("Allow", "GET, HEAD, POST")
		w.page(rw, r, id, http.StatusMethodNotAllowed, "Method not allowed", "Open this address with GET.")
		return
	}
	user, ok := w.requireUser(rw, r, id, in.app)
	if !ok {
		return
	}
	switch in.app.Strategy {
	case wire.SingleAppInstance, wire.SingleInstancePerUser:
		pages.Write(rw, r, id, pages.Page{Status: http.StatusNotFound, Title: "Not an address of this application",
			Message: "This application gives each user one browser; open it from its address.", LinkURL: "/" + t.App, LinkText: "Open " + in.app.Name})
		return
	}
	role := in.instanceRole(user)
	if r.Method == http.MethodPost {
		if !w.users.checkCSRF(r) {
			w.page(rw, r, id, http.StatusForbidden, "Request refused", "The form was stale or not sent by this site. Reload the page and retry.")
			return
		}
		if action := r.PostFormValue("action"); action != "new-browser" {
			w.serveGrant(rw, r, id, in, user, action)
			return
		}
	}
	switch {
	case in.app.Strategy == wire.MultiInstance && r.Method != http.MethodPost:
		if role == RoleNone && !in.hasBrowserFor(user) {
			w.page(rw, r, id, http.StatusForbidden, "No access", "This app instance belongs to someone else. Ask its owner to share it with you.")
			return
		}
		w.instanceLanding(rw, r, id, in, user)
		return
	case in.app.Strategy == wire.MultiInstance && role < RoleReaderWriter:
		w.page(rw, r, id, http.StatusForbidden, "No access", "You may watch this instance's browsers but not create one.")
		return
	case in.app.Strategy == wire.SingleBrowserPerUser && role == RoleNone && !in.hasBrowserFor(user):
		w.page(rw, r, id, http.StatusForbidden, "No access", "This app instance belongs to someone else. Ask its owner to share it with you.")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	var b *vbrowser
	var err error
	if in.app.Strategy == wire.MultiInstance {
		b, err = w.apps.newBrowserFrom(ctx, in, user, clientIP(r), false)
	} else {
		b, err = w.apps.browserForFrom(ctx, in, user, clientIP(r))
	}
	var qe *quotaError
	if errors.As(err, &qe) {
		w.quotaPage(rw, r, id, in.app, qe.msg)
		return
	}
	if err != nil {
		w.log.Error().Str("request_id", id).Str("instance", in.info.ID).Err(err).Msg("browser creation failed")
		if errors.Is(err, errInstanceClosed) {
			w.page(rw, r, id, http.StatusNotFound, "App instance not found", "This app instance was closed.")
			return
		}
		if errors.Is(err, errBrowserLimit) {
			w.page(rw, r, id, http.StatusTooManyRequests, "Browser limit reached", err.Error()+".")
			return
		}
		var le *pool.LimitError
		if errors.As(err, &le) {
			rw.Header().Set("Retry-After", "10")
			w.page(rw, r, id, http.StatusServiceUnavailable, "No browser available", "The "+le.Error()+". Please retry later.")
			return
		}
		rw.Header().Set("Retry-After", "2")
		w.page(rw, r, id, http.StatusServiceUnavailable, "Browser unavailable",
			"A virtual browser could not be started. Please retry shortly.")
		return
	}
	redirectNext(rw, r, b.url())
}

// browserOf finds the Browser URL's browser and its viewer, answering
// the request itself when it cannot (ok false): released answers for a
// browser released for being idle, and the usual pages for the rest.
func (w *Worker) browserOf(rw http.ResponseWriter, r *http.Request, id string, t urlkind.Target, released func(*instance)) (*instance, *vbrowser, string, bool) {
	in, b, ok := w.findBrowser(rw, r, id, t, released)
	if !ok {
		return nil, nil, "", false
	}
	user, ok := w.viewer(rw, r, id, in.app)
	return in, b, user, ok
}

// findBrowser is browserOf without the viewer: a ticketed socket says who
// it is for.
func (w *Worker) findBrowser(rw http.ResponseWriter, r *http.Request, id string, t urlkind.Target, released func(*instance)) (*instance, *vbrowser, bool) {
	in, ok := w.hosted(rw, r, id, t)
	if !ok {
		return nil, nil, false
	}
	in.awaitRestore(r.Context(), t.BrowserID) // a re-placed instance's browser coming back
	b, ok := in.browser(t.BrowserID)
	switch {
	case !ok && in.wasReleased(t.BrowserID):
		released(in)
		return nil, nil, false
	case !ok:
		pages.Write(rw, r, id, pages.BrowserNotFound)
		return nil, nil, false
	}
	return in, b, true
}

// serveBrowser returns the client engine page.
func (w *Worker) serveBrowser(rw http.ResponseWriter, r *http.Request, id string, t urlkind.Target) {
	in, b, user, ok := w.browserOf(rw, r, id, t, func(in *instance) {
		// Released for being idle: the strategy gives the user a new
		// browser, whose page says the previous one was released.
		redirectNext(rw, r, reloadURL(in.app, in.info.ID))
	})
	if !ok {
		return
	}
	if in.browserRole(b, user) == RoleNone && !w.users.adminViewer(r) {
		w.page(rw, r, id, http.StatusForbidden, "No access",
			"This virtual browser belongs to someone else. Ask its owner to share it with you.")
		return
	}
	base := "/" + t.App + "/a/" + in.info.ID
	notice := ""
	if user == b.owner {
		b.subMu.Lock()
		notice, b.notice = b.notice, "" // shown once
		b.subMu.Unlock()
	}
	socket := base + "/b/" + t.BrowserID + "/ws"
	data := web.EngineData{
		App: t.App, AppName: in.app.Name, InstanceID: in.info.ID, BrowserID: t.BrowserID, Worker: w.id,
		Base: base, Socket: socket, Notice: notice,
	}
	if w.tickets != nil {
		data.SocketURL, data.Ticket = wsOrigin(w.cfg.SocketURL)+socket, w.socketTicket(r, t.BrowserID, user)
	}
	var buf bytes.Buffer
	err := web.Engine.Execute(&buf, data)
	if err != nil {
		w.log.Error().Err(err).Msg("engine template")
		w.page(rw, r, id, http.StatusInternalServerError, "Internal error", "The page could not be rendered.")
		return
	}
	// The engine connects once this page and its assets are in: its first
	// frame gets ready meanwhile. Not on the request's context, which ends
	// with this answer.
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), engine.PrecastWindow)
		defer cancel()
		b.hub.Precast(ctx)
	}()
	httpsec.SetEngine(rw.Header(), w.users.https(r))
	if b.made != "" {
		rw.Header().Add("Server-Timing", b.made)
	}
	pages.WriteHTML(rw, r, buf.Bytes(), "no-store")
}

// serveSocket connects a client engine to its virtual browser.
func (w *Worker) serveSocket(rw http.ResponseWriter, r *http.Request, id string, t urlkind.Target) {
	link, err := engine.LinkHint(r)
	if err != nil {
		w.page(rw, r, id, http.StatusBadRequest, "Bad request", err.Error())
		return
	}
	up := engine.Upgrader(false)
	var ticket *engine.TicketClaims
	if tk, ok := engine.TicketOf(websocket.Subprotocols(r)); ok {
		c, err := w.redeemTicket(tk, t.BrowserID, r.Header.Get("Origin"))
		if err != nil {
			w.log.Info().Str("request_id", id).Str("browser", t.BrowserID).Str("reason", err.Error()).Msg("socket refused")
			w.page(rw, r, id, http.StatusForbidden, "Socket refused", "The socket's ticket is not valid ("+err.Error()+"). Reload the page.")
			return
		}
		ticket, up = &c, engine.Upgrader(true)
	}
	released := func(in *instance) {
		// A client engine cannot read an upgrade's status: it is told in
		// the protocol, with the address that gives a new browser, and
		// does not reconnect.
		engine.ServeClosed(rw, r, up, releasedReason(in.idle), reloadURL(in.app, in.info.ID))
	}
	var (
		in  *instance
		b   *vbrowser
		who engine.TicketClaims // the ticket's, or the request's cookies
		ok  bool
	)
	if ticket != nil {
		in, b, ok = w.findBrowser(rw, r, id, t, released)
		who = *ticket
	} else {
		var user string
		in, b, user, ok = w.browserOf(rw, r, id, t, released)
		who = w.viewerClaims(r, t.BrowserID, user)
	}
	if !ok {
		return
	}
	user := who.User
	role := func() Role {
		role := in.browserRole(b, user)
		if role == RoleNone && who.Admin {
			role = RoleReader // an admin watching from the dashboard
		}
		return role
	}
	if role() == RoleNone {
		w.page(rw, r, id, http.StatusForbidden, "No access", "This virtual browser belongs to someone else.")
		return
	}
	b.hub.Serve(rw, r, up, engine.Client{User: user, Addr: clientIP(r), Sessions: who.Sessions,
		Access: func() engine.Access { return accessOf(role()) }, LinkKbps: link})
}

// viewerClaims is who r shows its viewer of browser to be: user, with the
// login and dashboard sessions of its cookies (a socket ends with them).
func (w *Worker) viewerClaims(r *http.Request, browser, user string) engine.TicketClaims {
	c := engine.TicketClaims{Browser: browser, User: user}
	if cl, ok := w.users.session(r); ok {
		c.Sessions, c.Issued = append(c.Sessions, cl.ID), cl.Issued.Unix()
	}
	if asid, ok := w.users.adminSession(r); ok {
		c.Sessions, c.Admin = append(c.Sessions, asid), true
	}
	return c
}

// socketTicket is the ticket for user's socket to browser, issued on the
// request that showed who they are (the engine page, or the engine asking
// again to reconnect).
func (w *Worker) socketTicket(r *http.Request, browser, user string) string {
	c := w.viewerClaims(r, browser, user)
	c.Origin = w.pageOrigin(r)
	return w.tickets.Issue(c, time.Now())
}

// redeemTicket checks a socket ticket and that its sessions still hold (a
// logout since the page was served refuses it).
func (w *Worker) redeemTicket(tk, browser, origin string) (engine.TicketClaims, error) {
	if w.tickets == nil {
		return engine.TicketClaims{}, engine.ErrTicketMAC
	}
	now := time.Now()
	c, err := w.tickets.Redeem(tk, browser, origin, now)
	if err != nil {
		return c, err
	}
	for _, sid := range c.Sessions {
		if w.users.isEnded(sid, now) {
			return engine.TicketClaims{}, engine.ErrTicketSession
		}
	}
	if c.Issued != 0 && w.users.isRevoked(c.User, time.Unix(c.Issued, 0)) {
		return engine.TicketClaims{}, engine.ErrTicketSession
	}
	return c, nil
}

// pageOrigin is the origin the client sees r at.
func (w *Worker) pageOrigin(r *http.Request) string {
	if w.users.https(r) {
		return "https://" + r.Host
	}
	return "http://" + r.Host
}

// serveSocketInfo answers the engine's GET of its socket's path: where to
// open the socket now, with a fresh ticket ({"url": ""}: at the page's
// origin). The engine asks before reconnecting to a socket URL.
func (w *Worker) serveSocketInfo(rw http.ResponseWriter, r *http.Request, id string, t urlkind.Target) {
	var info struct {
		URL    string `json:"url"`
		Ticket string `json:"ticket,omitempty"`
	}
	in, b, user, ok := w.browserOf(rw, r, id, t, func(*instance) {
		writeJSON(rw, info) // released: the page's origin says so
	})
	if !ok {
		return
	}
	if in.browserRole(b, user) == RoleNone && !w.users.adminViewer(r) {
		w.page(rw, r, id, http.StatusForbidden, "No access", "This virtual browser belongs to someone else.")
		return
	}
	if w.tickets != nil {
		info.URL = wsOrigin(w.cfg.SocketURL) + r.URL.EscapedPath()
		info.Ticket = w.socketTicket(r, t.BrowserID, user)
	}
	writeJSON(rw, info)
}

// redirectNext sends the user on: 302 for a GET, 303 See Other after a
// form post (so the browser follows with a GET, not a repeated POST).
func redirectNext(rw http.ResponseWriter, r *http.Request, to string) {
	rw.Header().Set("Cache-Control", "no-store")
	code := http.StatusFound
	if r.Method == http.MethodPost {
		code = http.StatusSeeOther
	}
	http.Redirect(rw, r, to, code)
}
