package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/internal/httpsec"
)

// Pages are deliberately tiny and self-contained: they are shown when part
// of the cluster is failing, so they must not depend on anything else.
var errorTmpl = template.Must(template.New("error").Parse(errorSrc))

const errorSrc = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>{{.Status}} {{.Title}} · CloudBrowser</title>
<style>body{font-family:system-ui,sans-serif;max-width:40em;margin:4em auto;padding:0 1em;color:#222}h1{font-size:1.5em}small{color:#777}</style>
</head><body>
<h1>{{.Title}}</h1>
<p>{{.Message}}</p>
{{if .LinkURL}}<p><a href="{{.LinkURL}}">{{.LinkText}}</a></p>{{end}}
<p><a href="/">CloudBrowser home</a></p>
<p><small>Error {{.Status}} · request id {{.RequestID}}</small></p>
</body></html>
`

var homeTmpl = template.Must(template.New("home").Parse(homeSrc))

const homeSrc = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>CloudBrowser</title>
<style>body{font-family:system-ui,sans-serif;max-width:40em;margin:4em auto;padding:0 1em;color:#222}li{margin:.5em 0}</style>
</head><body>
<h1>CloudBrowser</h1>
{{if .}}<ul>
{{range .}}<li><a href="/{{.MountPoint}}">{{.Name}}</a>{{if .Description}} — {{.Description}}{{end}}</li>
{{end}}</ul>{{else}}<p>No applications are published yet.</p>{{end}}
</body></html>
`

func init() {
	httpsec.AllowInline(errorSrc)
	httpsec.AllowInline(homeSrc)
}

type errorPage struct {
	Status    int
	Title     string
	Message   string
	RequestID string
	LinkURL   string
	LinkText  string
}

// page writes an error page in the format the client prefers. Messages are
// fixed strings: worker addresses and error texts go to the log only.
func (p *Proxy) page(w http.ResponseWriter, r *http.Request, id string, status int, title, msg string) {
	p.pageLink(w, r, id, status, title, msg, "", "")
}

// pageLink is page with a suggested next step (e.g. restart the app).
// A WebSocket handshake for something that is gone for good (404, 410) is
// accepted instead, to say so in a "closed" message: a browser cannot read
// the status of a refused handshake, so the client engine would otherwise
// keep reconnecting.
func (p *Proxy) pageLink(w http.ResponseWriter, r *http.Request, id string, status int, title, msg, linkURL, linkText string) {
	if (status == http.StatusNotFound || status == http.StatusGone) && isWebSocketUpgrade(r) && closeSocket(w, r, msg, linkURL) {
		return
	}
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Request-Id", id)
	if p != nil { // workers and the master set these for their own responses
		httpsec.SetPage(h, p.scheme().HTTPS(r))
	}
	data := errorPage{Status: status, Title: title, Message: msg, RequestID: id, LinkURL: linkURL, LinkText: linkText}
	var body []byte
	switch preferredFormat(r.Header.Get("Accept")) {
	case "json":
		h.Set("Content-Type", "application/json")
		m := map[string]any{"status": status, "error": title, "message": msg, "request_id": id}
		if linkURL != "" {
			m["next"] = linkURL
		}
		body, _ = json.Marshal(m)
		body = append(body, '\n')
	case "text":
		h.Set("Content-Type", "text/plain; charset=utf-8")
		body = []byte(title + ": " + msg + " (request id " + id + ")\n")
	default:
		var buf bytes.Buffer
		_ = errorTmpl.Execute(&buf, data) // static template, cannot fail
		h.Set("Content-Type", "text/html; charset=utf-8")
		body = buf.Bytes()
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(body)
	}
}

// preferredFormat picks html unless the client asks only for JSON or text.
func preferredFormat(accept string) string {
	if accept == "" || strings.Contains(accept, "text/html") || strings.Contains(accept, "*/*") {
		return "html"
	}
	if strings.Contains(accept, "application/json") {
		return "json"
	}
	if strings.Contains(accept, "text/plain") {
		return "text"
	}
	return "html"
}

func (p *Proxy) serveHome(w http.ResponseWriter, r *http.Request, id string) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		p.st.badRequests.Add(1)
		w.Header().Set("Allow", "GET, HEAD")
		p.page(w, r, id, http.StatusMethodNotAllowed, "Method not allowed", "The home page only supports GET.")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), p.cfg.RouteTimeout)
	apps, err := p.cfg.Router.Apps(ctx)
	cancel()
	if err != nil {
		if r.Context().Err() != nil {
			return
		}
		p.st.routeErrors.Add(1)
		p.log.Warn().Str("request_id", id).Err(err).Msg("listing apps failed")
		w.Header().Set("Retry-After", "2")
		p.page(w, r, id, http.StatusServiceUnavailable, "Service unavailable",
			"The cluster master is unreachable, retry shortly.")
		return
	}
	links := make([]AppLink, 0, len(apps))
	for _, a := range apps {
		a.MountPoint = strings.TrimPrefix(a.MountPoint, "/")
		if a.Name == "" {
			a.Name = a.MountPoint
		}
		links = append(links, a)
	}
	var buf bytes.Buffer
	if err := homeTmpl.Execute(&buf, links); err != nil {
		p.log.Error().Str("request_id", id).Err(err).Msg("home page template")
		p.page(w, r, id, http.StatusInternalServerError, "Internal error", "The home page could not be rendered.")
		return
	}
	httpsec.SetPage(w.Header(), p.scheme().HTTPS(r))
	WriteHTML(w, r, buf.Bytes(), "no-cache")
}

// WriteHTML answers 200 with an HTML page (no body for HEAD).
func WriteHTML(w http.ResponseWriter, r *http.Request, page []byte, cacheControl string) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", cacheControl)
	h.Set("Content-Length", strconv.Itoa(len(page)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(page)
	}
}

// WritePage writes the cluster's standard error page (HTML, JSON or text by
// the Accept header). Workers use it so users see one style of page
// wherever a request fails.
func WritePage(w http.ResponseWriter, r *http.Request, requestID string, status int, title, msg, linkURL, linkText string) {
	(*Proxy)(nil).pageLink(w, r, requestID, status, title, msg, linkURL, linkText)
}

// closeSocket completes a WebSocket handshake only to send the client
// engine's {"t":"closed"} notice and a close frame; false if it could not
// upgrade (nothing was written then, unless the handshake was bad).
func closeSocket(w http.ResponseWriter, r *http.Request, reason, reload string) bool {
	up := websocket.Upgrader{HandshakeTimeout: 5 * time.Second,
		// Nothing but this notice crosses the socket: any origin may read it.
		CheckOrigin: func(*http.Request) bool { return true }}
	conn, err := up.Upgrade(w, r, nil)
	if err != nil {
		return true // the upgrader answered the bad handshake itself
	}
	defer conn.Close()
	_ = conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	msg, _ := json.Marshal(map[string]string{"t": "closed", "reason": reason, "reload": reload})
	_ = conn.WriteMessage(websocket.TextMessage, msg)
	short := reason
	if len(short) > 100 { // a close frame's reason is at most 123 bytes
		short = strings.ToValidUTF8(short[:100], "")
	}
	_ = conn.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.ClosePolicyViolation, short))
	return true
}
