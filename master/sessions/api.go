package sessions

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/apijson"
	"github.com/cloudbrowser-go/cloudbrowser/master/auth"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// The sessions HTTP API. A session is its opener's: another principal
// (but the admin) is answered as if it did not exist, as jobs are.

// Viewport bounds, as for jobs' renders.
const minViewport, maxViewport = 100, 4096

// retryUnavailable is the Retry-After of a 503: no worker can take a
// session right now (starting, none connected, a full pool).
const retryUnavailable = 5 * time.Second

// Routes adds the sessions API to mux (the master's admin API); public
// marks the copy served on the public port, which decides the host of the
// URLs the answers carry (Host.PublicBase).
func (s *Service) Routes(mux *http.ServeMux, public bool) {
	mux.Handle("POST /api/v1/sessions", s.guard(func(w http.ResponseWriter, r *http.Request) { s.create(w, r, public) }))
	mux.Handle("GET /api/v1/sessions", s.guard(func(w http.ResponseWriter, r *http.Request) { s.list(w, r, public) }))
	mux.Handle("GET /api/v1/sessions/{id}", s.guard(func(w http.ResponseWriter, r *http.Request) { s.show(w, r, public) }))
	mux.Handle("DELETE /api/v1/sessions/{id}", s.guard(s.remove))
	version := tokenFromQuery(s.guard(func(w http.ResponseWriter, r *http.Request) { s.jsonVersion(w, r, public) }))
	mux.Handle("GET /json/version", version)
	mux.Handle("GET /json/version/", version)
}

// tokenFromQuery takes the token from the query's "token" when the request
// has no Authorization header: CDP clients given an http:// endpoint
// (Playwright's connectOverCDP) fetch /json/version with the endpoint's
// query and no headers of the caller's.
func tokenFromQuery(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tok := r.URL.Query().Get("token"); tok != "" && r.Header.Get("Authorization") == "" {
			r = r.Clone(r.Context())
			r.Header.Set("Authorization", "Bearer "+tok)
		}
		h.ServeHTTP(w, r)
	})
}

// versionInfo is CDP's /json/version answer as clients read it.
type versionInfo struct {
	Browser              string `json:"Browser"`
	ProtocolVersion      string `json:"Protocol-Version"`
	WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
}

// jsonVersion is CDP's discovery endpoint: GET /json/version?app=NAME
// opens a session of app with the default settings and answers its
// cdpUrl as the webSocketDebuggerUrl, so connectOverCDP("http://…") works
// unchanged. Each call opens a session (clients call it once per
// connection); it ends at its timeout or when deleted.
func (s *Service) jsonVersion(w http.ResponseWriter, r *http.Request, public bool) {
	app := strings.TrimPrefix(r.URL.Query().Get("app"), "/")
	if app == "" {
		fieldError(w, http.StatusBadRequest, "app", "app: required in the query (/json/version?app=NAME&token=…): the application whose browser to open")
		return
	}
	view, ok := s.open(w, r, Request{App: app, Timeout: DefaultTimeout, IdleTimeout: DefaultIdleTimeout}, public)
	if !ok {
		return
	}
	apijson.Write(w, http.StatusOK, versionInfo{Browser: "CloudBrowser/" + app, ProtocolVersion: "1.3", WebSocketDebuggerURL: view.CDPURL})
}

// guard lets through principals with the automation role: the automation
// token, authors and the admin (not the jobs token).
func (s *Service) guard(h http.HandlerFunc) http.Handler {
	return apijson.Guard(s.host.Check, auth.RoleAutomation, h)
}

// View is a session as the API answers it.
type View struct {
	ID         string `json:"id"`
	App        string `json:"app"`
	InstanceID string `json:"instanceId"`
	BrowserID  string `json:"browserId"`
	// CDPURL is the session's CDP browser endpoint (its ticket in the
	// query); LiveURL its Browser URL in the client engine.
	CDPURL      string    `json:"cdpUrl"`
	LiveURL     string    `json:"liveUrl"`
	CreatedAt   time.Time `json:"createdAt"`
	ExpiresAt   time.Time `json:"expiresAt"`
	Owner       string    `json:"owner"`
	Timeout     string    `json:"timeout"`
	IdleTimeout string    `json:"idleTimeout"`
	KeepAlive   string    `json:"keepAlive"`
	Viewport    *Viewport `json:"viewport,omitempty"`
}

// View is rec with its URLs on base ("http(s)://host[:port]").
func (s *Service) View(rec Record, base string) View {
	path := "/" + rec.App + "/a/" + rec.InstanceID + "/b/" + rec.BrowserID
	ws := "ws" + strings.TrimPrefix(base, "http") // http → ws, https → wss
	return View{ID: rec.ID, App: rec.App, InstanceID: rec.InstanceID, BrowserID: rec.BrowserID,
		CDPURL:  ws + rec.CDPPath(s.key),
		LiveURL: base + path, CreatedAt: rec.CreatedAt, ExpiresAt: rec.ExpiresAt, Owner: rec.Owner,
		Timeout:     rec.ExpiresAt.Sub(rec.CreatedAt).String(),
		IdleTimeout: (time.Duration(rec.IdleTimeoutMs) * time.Millisecond).String(),
		KeepAlive:   (time.Duration(rec.KeepAliveMs) * time.Millisecond).String(), Viewport: rec.Viewport}
}

// FieldError is bad input about one request field (JSON name, nested as
// "viewport.width"): 400 naming it.
type FieldError struct{ Field, Msg string }

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

func fieldError(w http.ResponseWriter, status int, field, msg string) {
	apijson.Write(w, status, map[string]any{"status": status, "error": msg, "field": field})
}

// createBody is POST /api/v1/sessions's body; the times are read by
// duration, which takes a Go duration ("10m") or milliseconds.
type createBody struct {
	App         string          `json:"app"`
	Timeout     json.RawMessage `json:"timeout"`
	IdleTimeout json.RawMessage `json:"idleTimeout"`
	KeepAlive   json.RawMessage `json:"keepAlive"`
	Viewport    *Viewport       `json:"viewport"`
}

// ParseRequest reads and checks a session request; the error names the
// first bad field (in the order of the body's fields above).
func ParseRequest(body io.Reader) (Request, error) {
	raw, err := io.ReadAll(body)
	if err != nil {
		return Request{}, &FieldError{"body", err.Error()}
	}
	var b createBody
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil {
		return Request{}, decodeError(err)
	}
	if dec.More() {
		return Request{}, &FieldError{"body", "one JSON object only"}
	}
	req := Request{App: strings.TrimPrefix(strings.TrimSpace(b.App), "/"), Viewport: b.Viewport}
	if req.App == "" {
		return req, &FieldError{"app", "required: the mount point of the application to open"}
	}
	if req.Timeout, err = duration("timeout", b.Timeout, DefaultTimeout, time.Second); err != nil {
		return req, err
	}
	if req.IdleTimeout, err = duration("idleTimeout", b.IdleTimeout, DefaultIdleTimeout, time.Second); err != nil {
		return req, err
	}
	if req.KeepAlive, err = duration("keepAlive", b.KeepAlive, 0, 0); err != nil {
		return req, err
	}
	if v := req.Viewport; v != nil {
		for _, d := range []struct {
			field string
			n     int
		}{{"viewport.width", v.Width}, {"viewport.height", v.Height}} {
			if d.n < minViewport || d.n > maxViewport {
				return req, &FieldError{d.field, fmt.Sprintf("must be between %d and %d CSS pixels, got %d", minViewport, maxViewport, d.n)}
			}
		}
	}
	return req, nil
}

// decodeError names the field a JSON decoding error is about.
func decodeError(err error) error {
	var te *json.UnmarshalTypeError
	var mb *http.MaxBytesError
	switch {
	case errors.Is(err, io.EOF):
		return &FieldError{"body", "a JSON object is required"}
	case errors.As(err, &mb):
		return &FieldError{"body", fmt.Sprintf("larger than %d bytes", mb.Limit)}
	case errors.As(err, &te) && te.Field != "":
		return &FieldError{te.Field, fmt.Sprintf("must be a JSON %s, not %s", jsonKind(te.Type.Kind().String()), te.Value)}
	}
	if name, ok := strings.CutPrefix(err.Error(), `json: unknown field "`); ok {
		name = strings.TrimSuffix(name, `"`)
		return &FieldError{name, "unknown field (the fields are app, timeout, idleTimeout, keepAlive and viewport {width, height})"}
	}
	return &FieldError{"body", err.Error()}
}

func jsonKind(goKind string) string {
	switch {
	case strings.HasPrefix(goKind, "int"), strings.HasPrefix(goKind, "uint"), strings.HasPrefix(goKind, "float"):
		return "number"
	case goKind == "struct", goKind == "ptr", goKind == "map":
		return "object"
	}
	return goKind
}

// duration reads a time field: absent or null is def; a string is a Go
// duration ("90s", "10m"), a number milliseconds. It must be within
// least..MaxDuration.
func duration(field string, raw json.RawMessage, def, least time.Duration) (time.Duration, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return def, nil
	}
	var d time.Duration
	var str string
	var ms int64
	switch {
	case json.Unmarshal(raw, &str) == nil:
		var err error
		if d, err = time.ParseDuration(str); err != nil {
			return 0, &FieldError{field, fmt.Sprintf("%q is not a duration such as \"10m\" or \"90s\"", str)}
		}
	case json.Unmarshal(raw, &ms) == nil:
		if ms > int64(MaxDuration/time.Millisecond) {
			return 0, &FieldError{field, "must be at most " + MaxDuration.String()}
		}
		d = time.Duration(ms) * time.Millisecond
	default:
		return 0, &FieldError{field, "must be a duration such as \"10m\" or a whole number of milliseconds"}
	}
	switch {
	case d < 0:
		return 0, &FieldError{field, "must not be negative"}
	case d < least:
		return 0, &FieldError{field, "must be at least " + least.String()}
	case d > MaxDuration:
		return 0, &FieldError{field, "must be at most " + MaxDuration.String()}
	}
	return d, nil
}

func (s *Service) create(w http.ResponseWriter, r *http.Request, public bool) {
	req, err := ParseRequest(http.MaxBytesReader(w, r.Body, 64<<10))
	if err != nil {
		field := "body"
		if fe := (*FieldError)(nil); errors.As(err, &fe) {
			field = fe.Field
		}
		fieldError(w, http.StatusBadRequest, field, err.Error())
		return
	}
	if view, ok := s.open(w, r, req, public); ok {
		apijson.Write(w, http.StatusCreated, view)
	}
}

// open opens the session req asks for, or answers why not.
func (s *Service) open(w http.ResponseWriter, r *http.Request, req Request, public bool) (View, bool) {
	rec, rf := s.openFor(r.Context(), auth.PrincipalOf(r), req, clientIP(r))
	if rf != nil {
		rf.write(w)
		return View{}, false
	}
	return s.View(rec, s.host.PublicBase(r, public)), true
}

// openFor opens the session req asks for p, or says why not: the API and
// the one-step CDP URL (cdp.go) refuse alike.
func (s *Service) openFor(ctx context.Context, p auth.Principal, req Request, clientIP string) (Record, *refusal) {
	if !s.host.AppExists(req.App) {
		return Record{}, &refusal{status: http.StatusNotFound, field: "app", msg: "app: no application is mounted at /" + req.App}
	}
	if !s.host.MayUseApp(p, req.App) {
		return Record{}, &refusal{status: http.StatusForbidden, field: "app", msg: fmt.Sprintf("app: %q may not open sessions on /%s: only its owner, the admin and the principals its owner granted (PUT /api/v1/apps/%s/job-users/%s) may", p.Name, req.App, req.App, p.Name)}
	}
	rec, err := s.CreateWaiting(ctx, p.Name, req, clientIP)
	if err != nil {
		return Record{}, s.createError(req.App, err)
	}
	return rec, nil
}

// refusal is a session request answered with an error: its HTTP status,
// message, the field it is about ("" if none), and Retry-After (0: none).
type refusal struct {
	status     int
	msg, field string
	retryAfter time.Duration
	challenge  string // WWW-Authenticate
}

func (rf *refusal) write(w http.ResponseWriter) {
	if rf.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(rf.retrySeconds(), 10))
	}
	if rf.challenge != "" {
		w.Header().Set("WWW-Authenticate", rf.challenge)
	}
	if rf.field != "" {
		fieldError(w, rf.status, rf.field, rf.msg)
		return
	}
	apijson.Error(w, rf.status, rf.msg)
}

// retrySeconds is Retry-After in whole seconds, rounded up, at least 1.
func (rf *refusal) retrySeconds() int64 {
	return max(1, int64((rf.retryAfter+time.Second-1)/time.Second))
}

// createError is the answer to a refused or failed creation.
func (s *Service) createError(app string, err error) *refusal {
	var le *LimitError
	if errors.As(err, &le) {
		return &refusal{status: http.StatusTooManyRequests, msg: err.Error(), retryAfter: le.RetryAfter}
	}
	var qe *QueueError
	if errors.As(err, &qe) {
		return &refusal{status: http.StatusTooManyRequests, msg: err.Error(), retryAfter: qe.RetryAfter}
	}
	code, msg := codeOf(err)
	switch code {
	case wire.CodeQuota:
		s.m.refused.WithLabelValues("quota").Inc()
		return &refusal{status: http.StatusTooManyRequests, msg: msg}
	case wire.CodeUnknownApp:
		return &refusal{status: http.StatusNotFound, field: "app", msg: "app: " + msg}
	case wire.CodeAppDisabled:
		return &refusal{status: http.StatusConflict, field: "app", msg: "app: " + msg}
	case wire.CodeNoWorkers, wire.CodeStarting, wire.CodeInstanceMoving, wire.CodePoolLimit:
		s.m.refused.WithLabelValues("unavailable").Inc()
		return &refusal{status: http.StatusServiceUnavailable, msg: msg, retryAfter: retryUnavailable}
	}
	s.log.Warn().Err(err).Str("app", app).Msg("automation session not opened")
	return &refusal{status: http.StatusBadGateway, msg: err.Error()}
}

func retryAfter(w http.ResponseWriter, d time.Duration) {
	w.Header().Set("Retry-After", strconv.FormatInt((&refusal{retryAfter: d}).retrySeconds(), 10))
}

// codeOf is the wire code of a placement error and its message without
// the RMI wrapping (a worker's words are for the client); "" if none.
func codeOf(err error) (code, msg string) {
	var we *wire.Error
	if errors.As(err, &we) {
		return we.Code, we.Msg
	}
	var re *rmi.RemoteError
	if errors.As(err, &re) {
		return re.Code, re.Message
	}
	return "", err.Error()
}

// clientIP is the address the request came from, for the per-address
// instance quota.
func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return ""
	}
	return host
}

func (s *Service) list(w http.ResponseWriter, r *http.Request, public bool) {
	app := strings.TrimPrefix(r.URL.Query().Get("app"), "/")
	base := s.host.PublicBase(r, public)
	out := []View{}
	for _, rec := range s.List(auth.PrincipalOf(r), app) {
		out = append(out, s.View(rec, base))
	}
	apijson.Write(w, http.StatusOK, map[string]any{"sessions": out})
}

func (s *Service) show(w http.ResponseWriter, r *http.Request, public bool) {
	rec, err := s.Get(auth.PrincipalOf(r), r.PathValue("id"))
	if err != nil {
		apijson.Error(w, http.StatusNotFound, "no session "+r.PathValue("id"))
		return
	}
	apijson.Write(w, http.StatusOK, s.View(rec, s.host.PublicBase(r, public)))
}

func (s *Service) remove(w http.ResponseWriter, r *http.Request) {
	err := s.Delete(r.Context(), auth.PrincipalOf(r), r.PathValue("id"))
	switch {
	case errors.Is(err, ErrNotFound):
		apijson.Error(w, http.StatusNotFound, "no session "+r.PathValue("id"))
	case err != nil:
		// Kept: the instance is still open somewhere; a retry (or the
		// session's end) closes it.
		retryAfter(w, retryUnavailable)
		apijson.Error(w, http.StatusServiceUnavailable, err.Error())
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}
