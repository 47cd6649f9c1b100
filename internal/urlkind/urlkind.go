// Package urlkind classifies request URLs into the cluster's URL kinds
// (home, Application, App-instance, Browser, resource, WebSocket,
// reserved). Proxies route by it and workers dispatch by it, so both parse
// URLs the same way.
package urlkind

import (
	"net/url"
	"strings"

	"github.com/cloudbrowser-go/cloudbrowser/internal/ids"
)

// Kind is the class of a request URL.
type Kind int

const (
	// KindInvalid is a malformed URL (bad id, dot segment, overlong, bad method).
	KindInvalid Kind = iota
	// KindHome is "/", the list of public applications.
	KindHome
	// KindApp is an application URL "/<app>" (and "/<app>/<x>" with x != "a");
	// it goes to whichever worker the master's balancer picks.
	KindApp
	// KindInstance is "/<app>/a/<instanceId>".
	KindInstance
	// KindBrowser is "/<app>/a/<instanceId>/b/<browserId>".
	KindBrowser
	// KindResource is anything below an instance or browser URL.
	KindResource
	// KindWebSocket is the client engine's socket "/<app>/a/<iid>/b/<bid>/ws"
	// requested with a WebSocket upgrade.
	KindWebSocket
	// KindReserved is a path whose first segment belongs to the cluster itself
	// (admin UI, API, metrics...), served by the proxy's Config.Fallback.
	KindReserved
)

var kindNames = [...]string{"invalid", "home", "app", "instance", "browser", "resource", "websocket", "reserved"}

func (k Kind) String() string {
	if k < 0 || int(k) >= len(kindNames) {
		return "unknown"
	}
	return kindNames[k]
}

// InstanceKeyed reports whether requests of this kind belong to one app
// instance and therefore must reach the worker hosting it.
func (k Kind) InstanceKeyed() bool {
	switch k {
	case KindInstance, KindBrowser, KindResource, KindWebSocket:
		return true
	}
	return false
}

// Target is a classified request URL. Rest is the raw (still escaped)
// remainder after the most specific prefix, without its leading slash.
type Target struct {
	Kind       Kind
	App        string
	InstanceID string
	BrowserID  string
	Rest       string
}

// MaxPathLen bounds the URL path the proxy accepts; longer ones are
// KindInvalid so lookups and logs never see arbitrary-size input.
const MaxPathLen = 2048

// maxAppLen bounds application names (mount points).
const maxAppLen = 64

// reserved first segments belong to the cluster, never to an application.
var reserved = map[string]bool{
	"admin": true, "api": true, "metrics": true, "healthz": true, "readyz": true,
	"livez": true, "static": true, "_cb": true, "debug": true, "ws": true,
	"favicon.ico": true, "robots.txt": true, ".well-known": true,
	"json": true, // CDP's discovery endpoint (/json/version), for automation clients
	"cdp":  true, // the one-step CDP URL (/cdp?app=…), which opens an automation session
}

// Reserved reports whether name cannot be used as an application mount
// point because proxies send it to the cluster (Config.Fallback). Case-insensitive.
func Reserved(name string) bool { return reserved[strings.ToLower(name)] }

// allowedMethods are the methods the proxy forwards; anything else (TRACE,
// CONNECT, custom verbs) is rejected before it reaches a worker.
var allowedMethods = map[string]bool{
	"GET": true, "HEAD": true, "POST": true, "PUT": true,
	"PATCH": true, "DELETE": true, "OPTIONS": true,
}

// Classify maps a request to its Target. path is the escaped URL path
// (r.URL.EscapedPath()); isUpgrade says the request asks for a WebSocket
// upgrade. It is pure and never panics.
//
// Application names and ids must appear literally: they only use characters
// that never need escaping, so a percent-encoded id is treated as an attempt
// to smuggle something past the router and rejected.
func Classify(method, path string, isUpgrade bool) Target {
	invalid := Target{Kind: KindInvalid}
	if !allowedMethods[method] || len(path) > MaxPathLen {
		return invalid
	}
	if isUpgrade && method != "GET" { // RFC 6455 handshakes are GETs
		return invalid
	}
	if path == "" || path == "/" {
		return Target{Kind: KindHome}
	}
	if path[0] != '/' {
		return invalid
	}
	rest := path[1:]
	app, rest, more := strings.Cut(rest, "/")
	if Reserved(app) {
		return Target{Kind: KindReserved, App: app, Rest: rest}
	}
	if !validApp(app) || hasDotSegment(rest) {
		return invalid
	}
	t := Target{Kind: KindApp, App: app}
	if !more || rest == "" {
		return t // "/app" or "/app/"
	}
	seg, after, more := strings.Cut(rest, "/")
	if seg != "a" {
		t.Rest = rest // an application-level path, still balanced per request
		return t
	}
	// "/app/a/<iid>..."
	iid, after, more := cutSeg(after, more)
	if !ids.ValidToken(iid) {
		return invalid
	}
	t.InstanceID = iid
	if !more || after == "" {
		t.Kind = KindInstance
		return t
	}
	seg, rest2, more2 := strings.Cut(after, "/")
	if seg != "b" {
		t.Kind, t.Rest = KindResource, after
		return t
	}
	// "/app/a/<iid>/b/<bid>..."
	bid, after, more := cutSeg(rest2, more2)
	if !ids.ValidToken(bid) {
		return invalid
	}
	t.BrowserID = bid
	switch {
	case !more || after == "":
		t.Kind = KindBrowser
	case after == "ws" && isUpgrade:
		t.Kind, t.Rest = KindWebSocket, after
	default:
		t.Kind, t.Rest = KindResource, after
	}
	return t
}

// cutSeg takes the next segment of s; ok reports whether s existed at all.
func cutSeg(s string, ok bool) (seg, rest string, more bool) {
	if !ok {
		return "", "", false
	}
	return strings.Cut(s, "/")
}

func validApp(s string) bool {
	if len(s) == 0 || len(s) > maxAppLen || s[0] == '.' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// hasDotSegment reports a "." or ".." segment, also in escaped form: a
// worker that cleans paths would otherwise resolve "/app/a/X/../Y" to
// instance Y on the worker we picked for X.
func hasDotSegment(p string) bool {
	for p != "" {
		var seg string
		seg, p, _ = strings.Cut(p, "/")
		if seg == "" || len(seg) > 6 || !strings.ContainsAny(seg, ".%") {
			continue
		}
		if d, err := url.PathUnescape(seg); err != nil || d == "." || d == ".." {
			return true // undecodable escapes are invalid too
		}
	}
	return false
}
