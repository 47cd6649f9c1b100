// Package pages writes the cluster's own pages: the error page every
// process shows (HTML, JSON or text by Accept) and the vocabulary that maps
// master error codes to what users see. Proxies and workers both use it, so
// a failure reads the same wherever it is answered.
package pages

import (
	"bytes"
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

func init() {
	httpsec.AllowInline(errorSrc)
}

type errorPage struct {
	Status    int
	Title     string
	Message   string
	RequestID string
	LinkURL   string
	LinkText  string
}

// Page is an error page: status, title, message and an optional next step
// (a link), plus the headers that tell the client when to retry.
type Page struct {
	Status   int
	Title    string
	Message  string
	LinkURL  string
	LinkText string
	// RetryAfter and Refresh are header values ("" = none).
	RetryAfter, Refresh string
}

// Write writes p in the format the client prefers. Messages are fixed
// strings: worker addresses and error texts go to the log only.
// A WebSocket handshake for something that is gone for good (404, 410) is
// accepted instead, to say so in a "closed" message: a browser cannot read
// the status of a refused handshake, so the client engine would otherwise
// keep reconnecting.
func Write(w http.ResponseWriter, r *http.Request, requestID string, p Page) {
	if (p.Status == http.StatusNotFound || p.Status == http.StatusGone) && IsWebSocketUpgrade(r) && closeSocket(w, r, p.Message, p.LinkURL) {
		return
	}
	h := w.Header()
	if p.RetryAfter != "" {
		h.Set("Retry-After", p.RetryAfter)
	}
	if p.Refresh != "" {
		h.Set("Refresh", p.Refresh)
	}
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Request-Id", requestID)
	data := errorPage{Status: p.Status, Title: p.Title, Message: p.Message, RequestID: requestID, LinkURL: p.LinkURL, LinkText: p.LinkText}
	var body []byte
	switch preferredFormat(r.Header.Get("Accept")) {
	case "json":
		h.Set("Content-Type", "application/json")
		m := map[string]any{"status": p.Status, "error": p.Title, "message": p.Message, "request_id": requestID}
		if p.LinkURL != "" {
			m["next"] = p.LinkURL
		}
		body, _ = json.Marshal(m)
		body = append(body, '\n')
	case "text":
		h.Set("Content-Type", "text/plain; charset=utf-8")
		body = []byte(p.Title + ": " + p.Message + " (request id " + requestID + ")\n")
	default:
		var buf bytes.Buffer
		_ = errorTmpl.Execute(&buf, data) // static template, cannot fail
		h.Set("Content-Type", "text/html; charset=utf-8")
		body = buf.Bytes()
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(p.Status)
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

// IsWebSocketUpgrade reports whether r asks for a WebSocket upgrade
// (HTTP/1.1 with the Connection and Upgrade tokens).
func IsWebSocketUpgrade(r *http.Request) bool {
	if r.ProtoMajor != 1 {
		return false
	}
	return headerHasToken(r.Header["Connection"], "upgrade") && headerHasToken(r.Header["Upgrade"], "websocket")
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

func headerHasToken(vals []string, token string) bool {
	for _, v := range vals {
		for len(v) > 0 {
			var tok string
			tok, v = cutComma(v)
			if equalFoldASCII(trimOWS(tok), token) {
				return true
			}
		}
	}
	return false
}

func cutComma(s string) (string, string) {
	for i := 0; i < len(s); i++ {
		if s[i] == ',' {
			return s[:i], s[i+1:]
		}
	}
	return s, ""
}

func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

func equalFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
