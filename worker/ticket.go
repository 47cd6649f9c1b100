package worker

import (
	"net/url"

	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
)

// Socket tickets (engine.Tickets) carry a client engine's user to the
// worker's socket URL. The worker checks the URL's configuration here;
// httpserve issues and redeems the tickets.

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
