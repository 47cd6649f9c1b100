package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/auth"
)

// The one-step CDP URL (docs/automation.md, "One step"): a WebSocket
// upgrade to ws(s)://<public>/cdp?app=NAME&token=TOKEN opens a session
// with the default settings (the query may change them) and the proxy
// that took it routes it straight to the session's browser. The proxy
// asks here (contract.Router.OpenSession, or in process for the embedded
// proxy), before it upgrades: a refusal is a plain HTTP answer.

// ReasonUnconnected ends a one-step session whose client the proxy could
// not connect to its browser (the ended metric's label).
const ReasonUnconnected = "unconnected"

// queryParams are the one-step URL's parameters, in the order they are
// checked.
var queryParams = []string{"app", "token", "timeout", "idleTimeout", "keepAlive", "width", "height"}

// ParseQuery reads a session request from a one-step URL's query: the
// fields of POST /api/v1/sessions, with the viewport as width and height
// (both or neither). The error names the first bad parameter; token is
// allowed but not read here.
func ParseQuery(q url.Values) (Request, error) {
	for _, k := range slices.Sorted(maps.Keys(q)) {
		if !slices.Contains(queryParams, k) {
			return Request{}, &FieldError{k, "unknown parameter (the parameters are " + strings.Join(queryParams, ", ") + ")"}
		}
	}
	for _, k := range queryParams {
		if len(q[k]) > 1 {
			return Request{}, &FieldError{k, "given more than once"}
		}
	}
	req := Request{App: strings.TrimPrefix(strings.TrimSpace(q.Get("app")), "/")}
	if req.App == "" {
		return req, &FieldError{"app", "required in the query (/cdp?app=NAME&token=…): the application whose browser to open"}
	}
	var err error
	if req.Timeout, err = queryDuration(q, "timeout", DefaultTimeout, time.Second); err != nil {
		return req, err
	}
	if req.IdleTimeout, err = queryDuration(q, "idleTimeout", DefaultIdleTimeout, time.Second); err != nil {
		return req, err
	}
	if req.KeepAlive, err = queryDuration(q, "keepAlive", 0, 0); err != nil {
		return req, err
	}
	switch w, h := q.Has("width"), q.Has("height"); {
	case w && !h:
		return req, &FieldError{"height", "required with width"}
	case h && !w:
		return req, &FieldError{"width", "required with height"}
	case w:
		v := &Viewport{}
		for _, d := range []struct {
			field string
			n     *int
		}{{"width", &v.Width}, {"height", &v.Height}} {
			n, err := strconv.Atoi(q.Get(d.field))
			if err != nil {
				return req, &FieldError{d.field, fmt.Sprintf("must be a whole number of CSS pixels, not %q", q.Get(d.field))}
			}
			if n < minViewport || n > maxViewport {
				return req, &FieldError{d.field, fmt.Sprintf("must be between %d and %d CSS pixels, got %d", minViewport, maxViewport, n)}
			}
			*d.n = n
		}
		req.Viewport = v
	}
	return req, nil
}

// queryDuration reads a time parameter as the body's time fields are
// read (duration): a Go duration ("90s") or whole milliseconds; absent is
// def, present but empty is an error.
func queryDuration(q url.Values, field string, def, least time.Duration) (time.Duration, error) {
	if !q.Has(field) {
		return def, nil
	}
	v := q.Get(field)
	if v == "" {
		return 0, &FieldError{field, "empty: give a duration such as \"10m\" or \"90s\", or leave the parameter out"}
	}
	raw, _ := json.Marshal(v) // a string: a Go duration
	if _, err := strconv.ParseInt(v, 10, 64); err == nil {
		raw = json.RawMessage(v) // a whole number: milliseconds
	}
	return duration(field, raw, def, least)
}

// OpenCDP opens a session for a one-step CDP connection, or says why not
// in the HTTP terms the proxy answers with. The token is the request's
// Authorization ("Bearer …") or else its query's token; a dashboard
// cookie never counts here, since any site's page may open a WebSocket
// with the browser's cookies.
func (s *Service) OpenCDP(ctx context.Context, req wire.SessionOpen) wire.SessionOpened {
	log := s.log.With().Str("request_id", req.RequestID).Str("client_ip", req.ClientIP).Logger()
	refused := func(rf *refusal) wire.SessionOpened {
		s.m.cdpOpens.WithLabelValues("refused").Inc()
		log.Info().Int("status", rf.status).Str("field", rf.field).Str("reason", rf.msg).Msg("one-step CDP session refused")
		out := wire.SessionOpened{Status: rf.status, Error: rf.msg, Field: rf.field, Challenge: rf.challenge}
		if rf.retryAfter > 0 {
			out.RetryAfter = rf.retrySeconds()
		}
		return out
	}
	q, err := url.ParseQuery(req.Query)
	if err != nil {
		return refused(&refusal{status: http.StatusBadRequest, field: "query", msg: "query: " + err.Error()})
	}
	authz := req.Authorization
	if tok := q.Get("token"); authz == "" && tok != "" {
		authz = "Bearer " + tok
	}
	if authz == "" {
		return refused(&refusal{status: http.StatusUnauthorized, msg: "missing token: add token=TOKEN to the URL's query or send Authorization: Bearer TOKEN",
			challenge: `Bearer realm="cloudbrowser"`})
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodGet, "/cdp", nil)
	if err != nil {
		return refused(&refusal{status: http.StatusInternalServerError, msg: err.Error()})
	}
	hr.Header.Set("Authorization", authz)
	p, ar := s.host.Check(hr, auth.RoleAutomation)
	if ar != nil {
		return refused(&refusal{status: ar.Status, msg: ar.Msg, challenge: ar.Challenge})
	}
	sreq, err := ParseQuery(q)
	if err != nil {
		field := "query"
		if fe := (*FieldError)(nil); errors.As(err, &fe) {
			field = fe.Field
		}
		return refused(&refusal{status: http.StatusBadRequest, field: field, msg: err.Error()})
	}
	log = log.With().Str("owner", p.Name).Str("app", sreq.App).Logger()
	rec, rf := s.openFor(ctx, p, sreq, req.ClientIP)
	if rf != nil {
		return refused(rf)
	}
	if ctx.Err() != nil {
		// The client left while its browser was placed (placement is not
		// cut short): nobody will connect, so it ends now, not at its time.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		if err := s.Unconnected(cctx, rec.ID); err != nil {
			log.Warn().Err(err).Str("session", rec.ID).Msg("a one-step CDP session whose client left could not be ended: it ends at its time")
		}
		return refused(&refusal{status: http.StatusRequestTimeout, msg: "the client left before its session was opened"})
	}
	s.m.cdpOpens.WithLabelValues("opened").Inc()
	log.Info().Str("session", rec.ID).Str("instance", rec.InstanceID).Str("worker", rec.WorkerID).Msg("one-step CDP session opened")
	return wire.SessionOpened{ID: rec.ID, App: rec.App, InstanceID: rec.InstanceID, BrowserID: rec.BrowserID, Path: rec.CDPPath(s.key)}
}

// Unconnected ends a session OpenCDP opened whose client the proxy could
// not connect to its browser (the worker unreachable, the client gone
// during the handshake): nobody else holds its URL, and it would
// otherwise count against its owner's maximum until its timeout. A
// session already gone is no error.
func (s *Service) Unconnected(ctx context.Context, id string) error {
	err := s.close(ctx, auth.AdminPrincipal, id, ReasonUnconnected)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}
