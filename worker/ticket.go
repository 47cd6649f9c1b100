package worker

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
)

// Socket tickets (engine.Tickets) carry a client engine's user to the
// worker's socket URL; this is the worker's side: the URL's configuration
// and the answers that hand tickets out (http.go).

// socketOrigin checks Config.SocketURL and returns it as scheme://host
// ("" stays "").
func socketOrigin(s string) (string, error) {
	if s == "" {
		return "", nil
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "", config.Errorf("SocketURL", "%q is not a URL: %v", s, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return "", config.Errorf("SocketURL", "%q: want an http:// or https:// address (its WebSockets are ws:// or wss://)", s)
	case u.Host == "" || u.Hostname() == "":
		return "", config.Errorf("SocketURL", "%q has no host", s)
	case u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
		return "", config.Errorf("SocketURL", "%q: want only scheme, host and port, e.g. https://w2.example.com", s)
	}
	return u.Scheme + "://" + u.Host, nil
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
