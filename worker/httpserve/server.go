// Package httpserve is a worker's HTTP side: its front door (the proxies'
// hop signatures, health and metrics endpoints), the three URL kinds and
// their pages (landing, instance and engine pages, share forms), the
// client engine's socket and its tickets, logins and sessions, anonymous
// identities and the visitors' cookies. The worker's instances, browsers
// and master connection are reached through Host, which the worker
// implements; this package does not import the worker.
package httpserve

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"html/template"
	"net/http"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/hop"
	"github.com/cloudbrowser-go/cloudbrowser/internal/httpsec"
	"github.com/cloudbrowser-go/cloudbrowser/internal/metrics"
	"github.com/cloudbrowser-go/cloudbrowser/internal/pages"
	"github.com/cloudbrowser-go/cloudbrowser/internal/urlkind"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
	"github.com/cloudbrowser-go/cloudbrowser/web"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/engine"
	"github.com/cloudbrowser-go/cloudbrowser/worker/pool"
)

// Config configures a Server.
type Config struct {
	// ID is the worker's id (the X-CB-Worker header, the health answers).
	ID   string
	Host Host
	// Secret is the cluster secret the session keys derive from until the
	// master hands them over (Users.SetKeys).
	Secret string
	// SocketURL is where client engines open their WebSockets ("" = at
	// their page's origin; else scheme://host, with tickets).
	SocketURL string
	// Runtime renders the browsers (/readyz asks it); Metrics is served
	// at /metrics.
	Runtime browser.Runtime
	Metrics *prometheus.Registry
	Log     zerolog.Logger
}

// Server is the worker's HTTP side. Requests arrive through a proxy, so
// URLs are classified exactly as the proxy does.
type Server struct {
	id        string
	host      Host
	users     *Users
	tickets   *engine.Tickets // socket tickets, when SocketURL is set
	socketURL string
	runtime   browser.Runtime
	metricsH  http.Handler
	log       zerolog.Logger
	// hopKey verifies the proxies' X-CB-Hop signatures; metricsToken
	// guards /metrics. Both arrive with the master's registration reply.
	hopKey       hop.Key
	hopWait      time.Duration // how long a request waits for the first key
	metricsToken atomic.Pointer[string]
	// auto follows the automation sessions with clients here (cdp.go).
	auto autoSessions
}

// New makes the worker's HTTP side.
func New(cfg Config) *Server {
	s := &Server{id: cfg.ID, host: cfg.Host, users: newUsers(cfg.Secret), socketURL: cfg.SocketURL, runtime: cfg.Runtime,
		metricsH: metrics.Handler(cfg.Metrics), log: cfg.Log, hopWait: 10 * time.Second}
	if cfg.SocketURL != "" {
		s.tickets = engine.NewTickets()
	}
	return s
}

// Users are the visitors' identities and sessions.
func (s *Server) Users() *Users { return s.users }

// SetHopKey installs the proxies' hop key (from the master).
func (s *Server) SetHopKey(k []byte) { s.hopKey.Set(k) }

// SetMetricsToken installs the token /metrics asks for (from the master).
func (s *Server) SetMetricsToken(tok string) { s.metricsToken.Store(&tok) }

// ServeHTTP serves the worker's HTTP endpoints.
func (s *Server) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	rw.Header().Set("X-CB-Worker", s.id)
	httpsec.SetPage(rw.Header(), s.users.https(r))
	id := r.Header.Get("X-Request-Id")
	switch r.URL.Path {
	case "/metrics": // proxies never forward reserved paths: only direct scrapes reach this
		if s.metricsAllowed(rw, r) {
			s.metricsH.ServeHTTP(rw, r)
		}
		return
	case "/healthz": // open to tooling (liveness checks); tells only the worker id
		rw.Header().Set("Content-Type", "application/json")
		_, _ = rw.Write([]byte(`{"status":"ok","worker":"` + s.id + `"}` + "\n"))
		return
	case "/readyz": // open like /healthz
		rw.Header().Set("Content-Type", "application/json")
		if !s.host.Ready() {
			rw.WriteHeader(http.StatusServiceUnavailable)
			_, _ = rw.Write([]byte(`{"status":"not registered with the master","worker":"` + s.id + `"}` + "\n"))
			return
		}
		if st, err := s.runtime.Stats(r.Context()); err != nil || (s.runtime.Name() != "none" && st.Processes == 0) {
			rw.WriteHeader(http.StatusServiceUnavailable)
			_, _ = rw.Write([]byte(`{"status":"browser runtime down","worker":"` + s.id + `"}` + "\n"))
			return
		}
		_, _ = rw.Write([]byte(`{"status":"ready","worker":"` + s.id + `"}` + "\n"))
		return
	}
	// Everything else comes from the cluster's proxies only; the signed
	// hop is what makes X-Forwarded-For and -Proto believable.
	key := s.hopKey.Get()
	if key == nil {
		// Registered at the master, which routes here at once, but its
		// reply (with the key) not read yet: wait for it.
		ctx, cancel := context.WithTimeout(r.Context(), s.hopWait)
		key = s.hopKey.Wait(ctx)
		cancel()
	}
	if err := hop.Verify(key, time.Now(), r.Header.Get(hop.Header), hop.FieldsOf(r)); err != nil {
		s.log.Info().Str("request_id", id).Str("peer", r.RemoteAddr).Str("method", r.Method).
			Str("reason", err.Error()).Msg("request refused: not relayed by a cluster proxy")
		s.page(rw, r, id, http.StatusForbidden, "Forbidden",
			"This worker only accepts requests relayed by the cluster proxies. Use the public address of the cluster.")
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), viaProxyKey{}, true))
	// Again, now that the hop is verified: the proxy's signed
	// X-Forwarded-Proto counts from here, so a page relayed from an HTTPS
	// front (a proxy serving TLS, or trusting its load balancer) sends
	// HSTS even when the master's public URL does not say https.
	httpsec.SetPage(rw.Header(), s.users.https(r))
	t := urlkind.Classify(r.Method, r.URL.EscapedPath(), isUpgrade(r))
	switch t.Kind {
	case urlkind.KindApp:
		s.serveApp(rw, r, id, t)
	case urlkind.KindInstance:
		s.serveInstance(rw, r, id, t)
	case urlkind.KindBrowser:
		s.serveBrowser(rw, r, id, t)
	case urlkind.KindWebSocket:
		s.serveSocket(rw, r, id, t)
	case urlkind.KindResource:
		in, ok := s.hosted(rw, r, id, t)
		if !ok {
			return
		}
		if t.BrowserID != "" && t.Rest == "ws" && r.Method == http.MethodGet {
			s.serveSocketInfo(rw, r, id, t)
			return
		}
		if t.BrowserID != "" && (t.Rest == "cdp" || strings.HasPrefix(t.Rest, "cdp/")) {
			serveCDP(s, rw, r, id, t)
			return
		}
		if rest, ok := strings.CutPrefix(t.Rest, "files/"); ok && t.BrowserID != "" {
			s.serveFiles(rw, r, id, t, rest)
			return
		}
		if rest, ok := strings.CutPrefix(t.Rest, "_cb/"); ok && t.BrowserID == "" &&
			web.Assets.Serve(rw, r, path.Clean("/" + rest)[1:]) {
			return
		}
		_ = in
		s.page(rw, r, id, http.StatusNotFound, "Not found", "There is nothing at this address.")
	default:
		s.page(rw, r, id, http.StatusNotFound, "Not found", "There is nothing at this address.")
	}
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
func (s *Server) metricsAllowed(rw http.ResponseWriter, r *http.Request) bool {
	tok := s.metricsToken.Load()
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

func (s *Server) page(rw http.ResponseWriter, r *http.Request, id string, status int, title, msg string) {
	pages.Write(rw, r, id, pages.Page{Status: status, Title: title, Message: msg})
}

// serveApp applies the app's instantiation strategy to an Application URL.
// singleAppInstance and singleInstancePerUser: the master finds or places
// the user's instance (possibly on another worker) and opens their browser
// there; the user is redirected to that Browser URL. singleBrowserPerUser
// and multiInstance: the landing page, where the user picks or creates an
// instance.
func (s *Server) serveApp(rw http.ResponseWriter, r *http.Request, id string, t urlkind.Target) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodPost {
		rw.Header().Set("Allow", "GET, HEAD, POST")
		s.page(rw, r, id, http.StatusMethodNotAllowed, "Method not allowed", "Open this address with GET.")
		return
	}
	app, ok := s.host.App(t.App)
	if !ok || (t.Rest != "" && t.Rest != "login" && t.Rest != "logout") {
		s.page(rw, r, id, http.StatusNotFound, "Application not found", "There is no application at this address.")
		return
	}
	if t.Rest != "" {
		s.serveLogin(rw, r, id, app, t.Rest)
		return
	}
	if app.Disabled {
		s.page(rw, r, id, http.StatusServiceUnavailable, "Application unavailable",
			"This application has been disabled by an administrator.")
		return
	}
	user, ok := s.requireUser(rw, r, id, app)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	landing := app.Strategy == wire.MultiInstance || app.Strategy == wire.SingleBrowserPerUser
	req := wire.PlaceRequest{App: t.App, User: user, From: s.id, RequestID: id, ClientIP: clientIP(r)}
	switch {
	case landing && r.Method == http.MethodPost:
		if !s.users.checkCSRF(r) || r.PostFormValue("action") != "new-instance" {
			s.page(rw, r, id, http.StatusForbidden, "Request refused", "The form was stale or not sent by this site. Reload the page and retry.")
			return
		}
		req.New = true
		req.NoBrowser = app.Strategy == wire.MultiInstance // its instance page lets the user choose
	case landing:
		s.landing(ctx, rw, r, id, app, user)
		return
	case r.Method == http.MethodPost:
		rw.Header().Set("Allow", "GET, HEAD")
		s.page(rw, r, id, http.StatusMethodNotAllowed, "Method not allowed", "Open this address with GET.")
		return
	}
	t0 := time.Now()
	p, err := contract.WorkerManagerClient{C: s.host.Master()}.Place(ctx, req)
	// The whole placement: the master's choice, the instance and the
	// user's browser (whose own steps come with its Browser URL).
	rw.Header().Add("Server-Timing", TimingEntry("place", time.Since(t0)))
	if err != nil {
		var re *rmi.RemoteError
		if errors.As(err, &re) && re.Code == wire.CodeQuota {
			s.log.Info().Str("request_id", id).Str("app", t.App).Str("user", user).Str("client_ip", req.ClientIP).
				Str("reason", re.Message).Msg("placement refused: quota")
			s.quotaPage(rw, r, id, app, re.Message)
			return
		}
		s.placeError(rw, r, id, t, err)
		return
	}
	s.log.Info().Str("request_id", id).Str("app", t.App).Str("instance", p.InstanceID).Str("browser", p.BrowserID).
		Str("on", p.WorkerID).Bool("created", p.Created).Msg("application request placed")
	to := "/" + t.App + "/a/" + p.InstanceID
	if p.BrowserID != "" {
		to += "/b/" + p.BrowserID
	}
	redirectNext(rw, r, to)
}

// landing renders the app's landing page: the user's instances.
func (s *Server) landing(ctx context.Context, rw http.ResponseWriter, r *http.Request, id string, app wire.App, user string) {
	insts, err := contract.WorkerManagerClient{C: s.host.Master()}.Instances(ctx, app.MountPoint, user)
	if err != nil {
		s.placeError(rw, r, id, urlkind.Target{App: app.MountPoint}, err)
		return
	}
	d := web.LandingData{AppName: app.Name, Description: app.Description, MountPoint: app.MountPoint, CSRF: s.users.csrf(rw, r)}
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
	s.render(rw, r, id, web.Landing, d)
}

// instanceLanding renders an instance's page: its browsers the user may
// open, and a button for a new one.
func (s *Server) instanceLanding(rw http.ResponseWriter, r *http.Request, id string, in Instance, user string) {
	app := in.App()
	base := "/" + app.MountPoint + "/a/" + in.ID()
	d := web.LandingData{AppName: app.Name, Description: app.Description, MountPoint: app.MountPoint,
		CSRF: s.users.csrf(rw, r), InstanceID: in.ID(), InstanceURL: base}
	bs := in.Browsers()
	pg := in.Page(user)
	d.Owner = pg.Owner
	d.Grants = grantList(pg.Grants)
	d.InstanceName = pg.Name
	if pg.Released {
		d.Notice = "Your browser was released after " + pg.Idle.String() + " without a connection. Open one of the browsers below or create a new one."
	}
	for _, b := range bs {
		role := b.Role(user)
		if role == RoleNone {
			continue // the default policy: others' browsers are not listed
		}
		bi := b.Info()
		lb := web.LandingBrowser{ID: bi.ID, URL: b.URL(), Owner: bi.Owner,
			Created: bi.Created.Format(time.DateTime), Clients: b.Hub().Count(), Mine: bi.Owner == user, Role: role.String()}
		lb.Name = bi.Name
		if lb.Mine {
			lb.Grants = grantList(bi.Grants)
		}
		d.Browsers = append(d.Browsers, lb)
	}
	sort.Slice(d.Browsers, func(i, j int) bool { return d.Browsers[i].Created < d.Browsers[j].Created })
	s.render(rw, r, id, web.Landing, d)
}

func (s *Server) render(rw http.ResponseWriter, r *http.Request, id string, t *template.Template, data any) {
	var buf bytes.Buffer
	if err := t.Execute(&buf, data); err != nil {
		s.log.Error().Str("request_id", id).Err(err).Msg("template")
		s.page(rw, r, id, http.StatusInternalServerError, "Internal error", "The page could not be rendered.")
		return
	}
	pages.WriteHTML(rw, r, buf.Bytes(), "no-store")
}

func (s *Server) placeError(rw http.ResponseWriter, r *http.Request, id string, t urlkind.Target, err error) {
	var re *rmi.RemoteError
	code := ""
	if errors.As(err, &re) {
		code = re.Code
	}
	s.log.Warn().Str("request_id", id).Str("app", t.App).Str("code", code).Err(err).Msg("placement failed")
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
func (s *Server) hosted(rw http.ResponseWriter, r *http.Request, id string, t urlkind.Target) (Instance, bool) {
	in, ok := s.host.Instance(t.InstanceID)
	if !ok {
		pages.Write(rw, r, id, pages.NotHere)
		return nil, false
	}
	if in.App().MountPoint != t.App {
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
func (s *Server) serveInstance(rw http.ResponseWriter, r *http.Request, id string, t urlkind.Target) {
	in, ok := s.hosted(rw, r, id, t)
	if !ok {
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodPost {
		rw.Header().Set("Allow", "GET, HEAD, POST")
		s.page(rw, r, id, http.StatusMethodNotAllowed, "Method not allowed", "Open this address with GET.")
		return
	}
	app := in.App()
	user, ok := s.requireUser(rw, r, id, app)
	if !ok {
		return
	}
	switch app.Strategy {
	case wire.SingleAppInstance, wire.SingleInstancePerUser:
		pages.Write(rw, r, id, pages.Page{Status: http.StatusNotFound, Title: "Not an address of this application",
			Message: "This application gives each user one browser; open it from its address.", LinkURL: "/" + t.App, LinkText: "Open " + app.Name})
		return
	}
	role := in.Role(user)
	if r.Method == http.MethodPost {
		if !s.users.checkCSRF(r) {
			s.page(rw, r, id, http.StatusForbidden, "Request refused", "The form was stale or not sent by this site. Reload the page and retry.")
			return
		}
		if action := r.PostFormValue("action"); action != "new-browser" {
			s.serveGrant(rw, r, id, in, user, action)
			return
		}
	}
	switch {
	case app.Strategy == wire.MultiInstance && r.Method != http.MethodPost:
		if role == RoleNone && !in.HasBrowserFor(user) {
			s.page(rw, r, id, http.StatusForbidden, "No access", "This app instance belongs to someone else. Ask its owner to share it with you.")
			return
		}
		s.instanceLanding(rw, r, id, in, user)
		return
	case app.Strategy == wire.MultiInstance && role < RoleReaderWriter:
		s.page(rw, r, id, http.StatusForbidden, "No access", "You may watch this instance's browsers but not create one.")
		return
	case app.Strategy == wire.SingleBrowserPerUser && role == RoleNone && !in.HasBrowserFor(user):
		s.page(rw, r, id, http.StatusForbidden, "No access", "This app instance belongs to someone else. Ask its owner to share it with you.")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	var b Browser
	var err error
	if app.Strategy == wire.MultiInstance {
		b, err = in.NewBrowser(ctx, user, clientIP(r))
	} else {
		b, err = in.BrowserFor(ctx, user, clientIP(r))
	}
	var qe *QuotaError
	if errors.As(err, &qe) {
		s.quotaPage(rw, r, id, app, qe.Msg)
		return
	}
	if err != nil {
		s.log.Error().Str("request_id", id).Str("instance", in.ID()).Err(err).Msg("browser creation failed")
		if errors.Is(err, ErrInstanceClosed) {
			s.page(rw, r, id, http.StatusNotFound, "App instance not found", "This app instance was closed.")
			return
		}
		if errors.Is(err, ErrBrowserLimit) {
			s.page(rw, r, id, http.StatusTooManyRequests, "Browser limit reached", err.Error()+".")
			return
		}
		var le *pool.LimitError
		if errors.As(err, &le) {
			rw.Header().Set("Retry-After", "10")
			s.page(rw, r, id, http.StatusServiceUnavailable, "No browser available", "The "+le.Error()+". Please retry later.")
			return
		}
		rw.Header().Set("Retry-After", "2")
		s.page(rw, r, id, http.StatusServiceUnavailable, "Browser unavailable",
			"A virtual browser could not be started. Please retry shortly.")
		return
	}
	redirectNext(rw, r, b.URL())
}

// browserOf finds the Browser URL's browser and its viewer, answering
// the request itself when it cannot (ok false): released answers for a
// browser released for being idle, and the usual pages for the rest.
func (s *Server) browserOf(rw http.ResponseWriter, r *http.Request, id string, t urlkind.Target, released func(Instance)) (Instance, Browser, string, bool) {
	in, b, ok := s.findBrowser(rw, r, id, t, released)
	if !ok {
		return nil, nil, "", false
	}
	user, ok := s.viewer(rw, r, id, in.App())
	return in, b, user, ok
}

// findBrowser is browserOf without the viewer: a ticketed socket says who
// it is for.
func (s *Server) findBrowser(rw http.ResponseWriter, r *http.Request, id string, t urlkind.Target, released func(Instance)) (Instance, Browser, bool) {
	in, ok := s.hosted(rw, r, id, t)
	if !ok {
		return nil, nil, false
	}
	in.AwaitRestore(r.Context(), t.BrowserID) // a re-placed instance's browser coming back
	b, ok := in.Browser(t.BrowserID)
	switch {
	case !ok && in.WasReleased(t.BrowserID):
		released(in)
		return nil, nil, false
	case !ok:
		pages.Write(rw, r, id, pages.BrowserNotFound)
		return nil, nil, false
	}
	return in, b, true
}

// serveBrowser returns the client engine page.
func (s *Server) serveBrowser(rw http.ResponseWriter, r *http.Request, id string, t urlkind.Target) {
	in, b, user, ok := s.browserOf(rw, r, id, t, func(in Instance) {
		// Released for being idle: the strategy gives the user a new
		// browser, whose page says the previous one was released.
		_, reload := in.Released()
		redirectNext(rw, r, reload)
	})
	if !ok {
		return
	}
	if b.Role(user) == RoleNone && !s.users.adminViewer(r) {
		s.page(rw, r, id, http.StatusForbidden, "No access",
			"This virtual browser belongs to someone else. Ask its owner to share it with you.")
		return
	}
	app := in.App()
	base := "/" + t.App + "/a/" + in.ID()
	notice := ""
	if user == b.Owner() {
		notice = b.TakeNotice() // shown once
	}
	socket := base + "/b/" + t.BrowserID + "/ws"
	data := web.EngineData{
		App: t.App, AppName: app.Name, InstanceID: in.ID(), BrowserID: t.BrowserID, Worker: s.id,
		Base: base, Socket: socket, Notice: notice,
	}
	if s.tickets != nil {
		data.SocketURL, data.Ticket = wsOrigin(s.socketURL)+socket, s.socketTicket(r, t.BrowserID, user)
	}
	var buf bytes.Buffer
	err := web.Engine.Execute(&buf, data)
	if err != nil {
		s.log.Error().Err(err).Msg("engine template")
		s.page(rw, r, id, http.StatusInternalServerError, "Internal error", "The page could not be rendered.")
		return
	}
	// The engine connects once this page and its assets are in: its first
	// frame gets ready meanwhile. Not on the request's context, which ends
	// with this answer.
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), engine.PrecastWindow)
		defer cancel()
		b.Hub().Precast(ctx)
	}()
	httpsec.SetEngine(rw.Header(), s.users.https(r))
	if made := b.Made(); made != "" {
		rw.Header().Add("Server-Timing", made)
	}
	pages.WriteHTML(rw, r, buf.Bytes(), "no-store")
}

// serveSocket connects a client engine to its virtual browser.
func (s *Server) serveSocket(rw http.ResponseWriter, r *http.Request, id string, t urlkind.Target) {
	link, err := engine.LinkHint(r)
	if err != nil {
		s.page(rw, r, id, http.StatusBadRequest, "Bad request", err.Error())
		return
	}
	up := engine.Upgrader(false)
	var ticket *engine.TicketClaims
	if tk, ok := engine.TicketOf(websocket.Subprotocols(r)); ok {
		c, err := s.redeemTicket(tk, t.BrowserID, r.Header.Get("Origin"))
		if err != nil {
			s.log.Info().Str("request_id", id).Str("browser", t.BrowserID).Str("reason", err.Error()).Msg("socket refused")
			s.page(rw, r, id, http.StatusForbidden, "Socket refused", "The socket's ticket is not valid ("+err.Error()+"). Reload the page.")
			return
		}
		ticket, up = &c, engine.Upgrader(true)
	}
	released := func(in Instance) {
		// A client engine cannot read an upgrade's status: it is told in
		// the protocol, with the address that gives a new browser, and
		// does not reconnect.
		reason, reload := in.Released()
		engine.ServeClosed(rw, r, up, reason, reload)
	}
	var (
		b   Browser
		who engine.TicketClaims // the ticket's, or the request's cookies
		ok  bool
	)
	if ticket != nil {
		_, b, ok = s.findBrowser(rw, r, id, t, released)
		who = *ticket
	} else {
		var user string
		_, b, user, ok = s.browserOf(rw, r, id, t, released)
		who = s.viewerClaims(r, t.BrowserID, user)
	}
	if !ok {
		return
	}
	user := who.User
	role := func() Role {
		role := b.Role(user)
		if role == RoleNone && who.Admin {
			role = RoleReader // an admin watching from the dashboard
		}
		return role
	}
	if role() == RoleNone {
		s.page(rw, r, id, http.StatusForbidden, "No access", "This virtual browser belongs to someone else.")
		return
	}
	b.Hub().Serve(rw, r, up, engine.Client{User: user, Addr: clientIP(r), Sessions: who.Sessions,
		Access: func() engine.Access { return accessOf(role()) }, LinkKbps: link})
}

// viewerClaims is who r shows its viewer of browser to be: user, with the
// login and dashboard sessions of its cookies (a socket ends with them).
func (s *Server) viewerClaims(r *http.Request, browser, user string) engine.TicketClaims {
	c := engine.TicketClaims{Browser: browser, User: user}
	if cl, ok := s.users.session(r); ok {
		c.Sessions, c.Issued = append(c.Sessions, cl.ID), cl.Issued.Unix()
	}
	if asid, ok := s.users.adminSession(r); ok {
		c.Sessions, c.Admin = append(c.Sessions, asid), true
	}
	return c
}

// socketTicket is the ticket for user's socket to browser, issued on the
// request that showed who they are (the engine page, or the engine asking
// again to reconnect).
func (s *Server) socketTicket(r *http.Request, browser, user string) string {
	c := s.viewerClaims(r, browser, user)
	c.Origin = s.pageOrigin(r)
	return s.tickets.Issue(c, time.Now())
}

// redeemTicket checks a socket ticket and that its sessions still hold (a
// logout since the page was served refuses it).
func (s *Server) redeemTicket(tk, browser, origin string) (engine.TicketClaims, error) {
	if s.tickets == nil {
		return engine.TicketClaims{}, engine.ErrTicketMAC
	}
	now := time.Now()
	c, err := s.tickets.Redeem(tk, browser, origin, now)
	if err != nil {
		return c, err
	}
	for _, sid := range c.Sessions {
		if s.users.isEnded(sid, now) {
			return engine.TicketClaims{}, engine.ErrTicketSession
		}
	}
	if c.Issued != 0 && s.users.isRevoked(c.User, time.Unix(c.Issued, 0)) {
		return engine.TicketClaims{}, engine.ErrTicketSession
	}
	return c, nil
}

// pageOrigin is the origin the client sees r at.
func (s *Server) pageOrigin(r *http.Request) string {
	if s.users.https(r) {
		return "https://" + r.Host
	}
	return "http://" + r.Host
}

// serveSocketInfo answers the engine's GET of its socket's path: where to
// open the socket now, with a fresh ticket ({"url": ""}: at the page's
// origin). The engine asks before reconnecting to a socket URL.
func (s *Server) serveSocketInfo(rw http.ResponseWriter, r *http.Request, id string, t urlkind.Target) {
	var info struct {
		URL    string `json:"url"`
		Ticket string `json:"ticket,omitempty"`
	}
	_, b, user, ok := s.browserOf(rw, r, id, t, func(Instance) {
		writeJSON(rw, info) // released: the page's origin says so
	})
	if !ok {
		return
	}
	if b.Role(user) == RoleNone && !s.users.adminViewer(r) {
		s.page(rw, r, id, http.StatusForbidden, "No access", "This virtual browser belongs to someone else.")
		return
	}
	if s.tickets != nil {
		info.URL = wsOrigin(s.socketURL) + r.URL.EscapedPath()
		info.Ticket = s.socketTicket(r, t.BrowserID, user)
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

// accessOf is what a user with role r may do on a client engine.
func accessOf(r Role) engine.Access {
	switch r {
	case RoleReader:
		return engine.AccessRead
	case RoleReaderWriter:
		return engine.AccessWrite
	case RoleOwner:
		return engine.AccessOwner
	}
	return engine.AccessNone
}

// wsOrigin is the ws:// or wss:// form of an http(s) origin.
func wsOrigin(httpOrigin string) string {
	if rest, ok := strings.CutPrefix(httpOrigin, "https://"); ok {
		return "wss://" + rest
	}
	return "ws://" + strings.TrimPrefix(httpOrigin, "http://")
}

// writeJSON answers v as an uncached JSON document.
func writeJSON(rw http.ResponseWriter, v any) {
	rw.Header().Set("Content-Type", "application/json")
	rw.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(rw).Encode(v)
}

// TimingEntry is one Server-Timing metric, in milliseconds.
func TimingEntry(name string, d time.Duration) string {
	return name + ";dur=" + strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 1, 64)
}
