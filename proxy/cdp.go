package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/pages"
	"github.com/cloudbrowser-go/cloudbrowser/internal/urlkind"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// The one-step CDP URL (docs/automation.md, "One step"): a WebSocket
// upgrade to /cdp?app=NAME&token=TOKEN asks the master for an automation
// session (Config.Sessions) and, given one, is routed to the session's
// Browser URL (<Browser URL>/cdp?ticket=…) like any other upgrade: the
// worker checks the ticket and runs the gate. A refusal is answered as
// plain HTTP before any upgrade, as the sessions API answers it.

// SessionOpener opens automation sessions for one-step CDP connections:
// the master's Router, over RMI (RemoteRouter) or in process.
type SessionOpener interface {
	OpenSession(ctx context.Context, req wire.SessionOpen) (wire.SessionOpened, error)
	CloseSession(ctx context.Context, id string) error
}

const (
	// cdpSegment is the one-step URL's path, a reserved first segment.
	cdpSegment = "cdp"
	// openSessionTimeout is a backstop: the master bounds its own wait
	// for a browser (its queue) and the placement.
	openSessionTimeout = 5 * time.Minute
	// closeSessionTimeout bounds ending a session whose client never got
	// to its browser.
	closeSessionTimeout = 10 * time.Second
	// retryMaster is the Retry-After of a 503 when the master could not
	// be asked.
	retryMaster = 5
)

// isCDP says t is under the one-step URL's reserved segment (any case).
func isCDP(t urlkind.Target) bool {
	return t.Kind == urlkind.KindReserved && strings.EqualFold(t.App, cdpSegment)
}

// serveCDP answers a request to the one-step URL. Every refusal is plain
// HTTP (never the pages' WebSocket close notices): automation clients
// report a failed handshake's status and body.
func (p *Proxy) serveCDP(w http.ResponseWriter, r *http.Request, id string, t urlkind.Target, upgrade bool) {
	log := p.log.With().Str("request_id", id).Logger()
	switch {
	case p.cfg.Sessions == nil || t.Rest != "": // no master to ask (benchmarks), or below /cdp
		cdpAnswer(w, http.StatusNotFound, "", "there is nothing at this address (the one-step CDP URL is /cdp?app=NAME&token=TOKEN)")
		return
	case !upgrade:
		p.st.badRequests.Add(1)
		cdpAnswer(w, http.StatusBadRequest, "", "/cdp is a WebSocket endpoint: connect a CDP client (Playwright's connectOverCDP, Puppeteer's connect, chromedp's remote allocator) to "+wsScheme(p.scheme().HTTPS(r))+"://"+r.Host+"/cdp?app=NAME&token=TOKEN")
		return
	case p.flight.isClosing():
		w.Header().Set("Retry-After", "1")
		cdpAnswer(w, http.StatusServiceUnavailable, "", "the proxy is shutting down: retry shortly")
		return
	}
	var key []byte
	if p.cfg.HopKey != nil {
		if key = p.cfg.HopKey(); len(key) == 0 {
			p.noHopKey(w, r, id) // before a session is opened for nothing
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), openSessionTimeout)
	res, err := p.cfg.Sessions.OpenSession(ctx, wire.SessionOpen{Query: r.URL.RawQuery,
		Authorization: r.Header.Get("Authorization"), ClientIP: p.clientIP(r), RequestID: id})
	cancel()
	if err != nil {
		if r.Context().Err() != nil {
			return // the client left while the master looked for a browser
		}
		p.st.routeErrors.Add(1)
		log.Warn().Err(err).Msg("one-step CDP session: the master could not be asked")
		w.Header().Set("Retry-After", strconv.Itoa(retryMaster))
		cdpAnswer(w, http.StatusServiceUnavailable, "", "the cluster's master could not be reached to open a session: retry shortly")
		return
	}
	if res.Status != 0 {
		if res.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.FormatInt(res.RetryAfter, 10))
		}
		if res.Challenge != "" {
			w.Header().Set("WWW-Authenticate", res.Challenge)
		}
		log.Debug().Int("status", res.Status).Str("field", res.Field).Msg("one-step CDP session refused")
		cdpAnswer(w, res.Status, res.Field, res.Error)
		return
	}
	log = log.With().Str("session", res.ID).Str("app", res.App).Str("instance", res.InstanceID).Logger()
	sr, bt, ok := sessionRequest(r, res.Path)
	if !ok {
		log.Error().Msg("one-step CDP session: the master answered a path that is no Browser URL's")
		unconnected(r, p.cfg.Sessions, res.ID, log)
		cdpAnswer(w, http.StatusBadGateway, "", "the session's address could not be routed")
		return
	}
	route, err := p.route(r.Context(), bt)
	if err = routed(route, err); err != nil {
		p.st.routeErrors.Add(1)
		log.Info().Err(err).Msg("one-step CDP session: its browser could not be routed")
		cdpRouteError(w, bt, err)
		unconnected(r, p.cfg.Sessions, res.ID, log)
		return
	}
	log.Info().Str("worker", route.WorkerID).Msg("one-step CDP session: connecting its client")
	if !p.serveWebSocket(w, sr, id, bt, route, key) {
		unconnected(r, p.cfg.Sessions, res.ID, log)
	}
}

// sessionRequest is r as if sent to the session's CDP endpoint pathQuery
// ("/app/a/<iid>/b/<bid>/cdp?ticket=…"), classified. The client's
// credentials stay here: the ticket is the worker's.
func sessionRequest(r *http.Request, pathQuery string) (*http.Request, urlkind.Target, bool) {
	u, err := url.ParseRequestURI(pathQuery)
	if err != nil {
		return nil, urlkind.Target{}, false
	}
	t := urlkind.Classify(http.MethodGet, u.EscapedPath(), true)
	if t.Kind != urlkind.KindResource || t.BrowserID == "" || t.Rest != cdpSegment {
		return nil, urlkind.Target{}, false
	}
	sr := r.Clone(r.Context())
	sr.URL.Path, sr.URL.RawPath, sr.URL.RawQuery = u.Path, u.RawPath, u.RawQuery
	sr.RequestURI = u.RequestURI()
	sr.Header.Del("Authorization")
	return sr, t, true
}

// unconnected ends a session whose client never got to its browser:
// nobody else knows its URL.
func unconnected(r *http.Request, sessions SessionOpener, sessionID string, log zerolog.Logger) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), closeSessionTimeout)
	defer cancel()
	if err := sessions.CloseSession(ctx, sessionID); err != nil {
		log.Warn().Err(err).Msg("one-step CDP session not connected, and not ended: it ends at its timeout")
		return
	}
	log.Info().Msg("one-step CDP session not connected: ended")
}

func wsScheme(https bool) string {
	if https {
		return "wss"
	}
	return "ws"
}

// clientIP is the client's address for the master's per-address quota:
// the connection's, the one the trusted proxies name, or with
// TrustForwardedFor the last hop the trusted balancer added.
func (p *Proxy) clientIP(r *http.Request) string {
	if len(p.cfg.TrustedProxies) > 0 {
		return p.scheme().Client(r)
	}
	if xff := r.Header.Values("X-Forwarded-For"); p.cfg.TrustForwardedFor && len(xff) > 0 {
		last := xff[len(xff)-1]
		if i := strings.LastIndexByte(last, ','); i >= 0 {
			last = last[i+1:]
		}
		if ip := strings.TrimSpace(last); net.ParseIP(ip) != nil {
			return ip
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return ""
	}
	return host
}

// cdpRouteError answers a session's browser that could not be routed
// with the status and words of its page.
func cdpRouteError(w http.ResponseWriter, t urlkind.Target, err error) {
	pg := pages.Page{Status: http.StatusBadGateway, Message: "the session's browser could not be reached: retry"}
	if code, ok := codeOf(err); ok {
		if known, ok := pages.ForCode(code, t.App, err.Error()); ok {
			pg = known
		}
	} else if errors.Is(err, ErrMasterUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		pg = pages.MasterUnavailable
	}
	if pg.RetryAfter != "" {
		w.Header().Set("Retry-After", pg.RetryAfter)
	}
	cdpAnswer(w, pg.Status, "", pg.Message)
}

// cdpAnswer answers as the sessions API does: {"status", "error"}, and
// "field" when the answer is about one query parameter.
func cdpAnswer(w http.ResponseWriter, status int, field, msg string) {
	body := map[string]any{"status": status, "error": msg}
	if field != "" {
		body["field"] = field
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}
