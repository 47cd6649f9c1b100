package tlsfront

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// Redirect sends plain-HTTP visitors to HTTPS (--https-redirect): a 308
// (the method and body are kept, unlike a 301) to the same host, path and
// query on the HTTPS port, which is left out when it is 443.
type Redirect struct {
	// host is the canonical host[:port] of an https --public-url: users
	// reach the cluster there, whatever port the proxies bind behind a
	// port mapping. "" = the request's own host, on port.
	host string
	port atomic.Pointer[string] // the public listener's port, once bound
}

// NewRedirect returns a Redirect; publicURL is the --public-url ("" or
// http: the request's host and the public listener's port are used).
func NewRedirect(publicURL string) *Redirect {
	rd := &Redirect{}
	if u, err := url.Parse(publicURL); err == nil && u.Scheme == "https" && u.Host != "" {
		rd.host = u.Host
	}
	return rd
}

// SetPort gives the public listener's port, once bound (until then the
// redirect answers 503).
func (rd *Redirect) SetPort(port string) { rd.port.Store(&port) }

// Target is where a request to host (its Host header) for uri goes; false
// if host cannot be redirected.
func (rd *Redirect) Target(host, uri string) (string, bool) {
	if !strings.HasPrefix(uri, "/") {
		uri = "/" + uri
	}
	if rd.host != "" {
		return "https://" + rd.host + uri, true
	}
	p := rd.port.Load()
	if p == nil {
		return "", false
	}
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	name = strings.Trim(name, "[]")
	// A Host is a name or an address: nothing that could move the target
	// elsewhere (userinfo, a path) passes.
	if name == "" || strings.ContainsAny(name, "/\\@?#% \t") {
		return "", false
	}
	hostport := net.JoinHostPort(name, *p)
	if *p == "443" {
		hostport = name
		if strings.Contains(name, ":") {
			hostport = "[" + name + "]"
		}
	}
	return "https://" + hostport + uri, true
}

func (rd *Redirect) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if rd.host == "" && rd.port.Load() == nil {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "starting", http.StatusServiceUnavailable)
		return
	}
	to, ok := rd.Target(r.Host, r.URL.RequestURI())
	if !ok {
		http.Error(w, "bad Host header", http.StatusBadRequest)
		return
	}
	http.Redirect(w, r, to, http.StatusPermanentRedirect)
}

// RedirectServer serves a Redirect on its own listener.
type RedirectServer struct {
	ln   net.Listener
	srv  *http.Server
	done chan struct{}
}

// ListenRedirect binds addr and serves rd there until Close.
func ListenRedirect(ctx context.Context, addr string, rd *Redirect, log zerolog.Logger) (*RedirectServer, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("redirect listener: %w", err)
	}
	s := &RedirectServer{ln: ln, done: make(chan struct{}),
		srv: &http.Server{Handler: rd, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 30 * time.Second}}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Str("server", "https-redirect").Msg("redirect listener stopped")
		}
	}()
	log.Info().Str("addr", ln.Addr().String()).Msg("redirecting http to https")
	return s, nil
}

// Addr is the address as bound.
func (s *RedirectServer) Addr() string { return s.ln.Addr().String() }

// Close stops serving (in-flight redirects finish within ctx).
func (s *RedirectServer) Close(ctx context.Context) {
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
	<-s.done
}
