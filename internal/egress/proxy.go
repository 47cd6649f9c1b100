package egress

import (
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Endpoint is one browser's exit: a forward HTTP proxy on a loopback port
// that applies its tenant's policy. Each endpoint has its own connection
// pool, so a connection opened under one tenant is never reused under
// another.
type Endpoint struct {
	g      *Guard
	ln     net.Listener
	srv    *http.Server
	tr     *http.Transport
	rp     *httputil.ReverseProxy
	tenant atomic.Pointer[Tenant]
	job    atomic.Pointer[jobState] // the job the browser runs (jobs.go)
	done   chan struct{}

	mu      sync.Mutex
	tunnels map[net.Conn]struct{}
	closed  bool
	once    sync.Once
	// watch are one-shot watchers of the next request to a host:port
	// (OnNextRequest).
	watch map[string]*watcher
}

// watcher is one OnNextRequest; claimed: the request it waits for was
// taken as the job's document (claimDocument).
type watcher struct {
	fn      func(time.Time)
	claimed bool
}

// OnNextRequest calls fn, once, when this endpoint has contacted hostport
// ("example.com:443") for the browser: an http request written to the
// site, or the connection of a CONNECT made (or the attempt failed). It is
// when the site sees the visit, or just after: the job start gate spaces
// a host's visits from it, and a time taken later than the site's only
// widens the gap the site sees (taken before the dial and the forwarding,
// which take up to a few hundred ms under load, it narrowed it: CI saw
// 0.91 s between requests to a 1/s host). The returned func drops the
// watcher if it has not fired.
func (e *Endpoint) OnNextRequest(hostport string, fn func(at time.Time)) (cancel func()) {
	key := watchKey(hostport)
	e.mu.Lock()
	if e.watch == nil {
		e.watch = map[string]*watcher{}
	}
	w := &watcher{fn: fn}
	e.watch[key] = w
	e.mu.Unlock()
	return func() {
		e.mu.Lock()
		if e.watch[key] == w {
			delete(e.watch, key)
		}
		e.mu.Unlock()
	}
}

// contacting fires and drops the watcher of host:port, if any.
func (e *Endpoint) contacting(host string, port int) {
	key := watchKey(net.JoinHostPort(host, strconv.Itoa(port)))
	e.mu.Lock()
	w := e.watch[key]
	delete(e.watch, key)
	e.mu.Unlock()
	if w != nil {
		w.fn(time.Now())
	}
}

func watchKey(hostport string) string {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return normalizeHost(hostport)
	}
	return net.JoinHostPort(normalizeHost(host), port)
}

type tenantKey struct{}

// Open starts an endpoint with tenant t (nil = no app yet).
func (g *Guard) Open(t *Tenant) (*Endpoint, error) {
	g.mu.Lock()
	closed := g.closed
	g.mu.Unlock()
	if closed {
		return nil, errors.New("egress: guard closed")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("egress: listen: %w", err)
	}
	e := &Endpoint{g: g, ln: ln, done: make(chan struct{}), tunnels: map[net.Conn]struct{}{}}
	if t == nil {
		t = &Tenant{}
	}
	e.tenant.Store(t)
	e.tr = &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			host, port, err := splitHostPort(addr, 80)
			if err != nil {
				return nil, err
			}
			t, _ := ctx.Value(tenantKey{}).(*Tenant)
			return g.dial(ctx, t, host, port)
		},
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       60 * time.Second,
		ResponseHeaderTimeout: 60 * time.Second,
		DisableCompression:    true, // pass the page's encoding through
	}
	e.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// Absolute-form request: the URL is the target already.
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Del("Proxy-Connection")
			pr.Out.Header.Del("Proxy-Authorization")
		},
		Transport:     e.tr,
		FlushInterval: -1,
		ErrorHandler:  e.forwardError,
		ModifyResponse: func(res *http.Response) error {
			if js, ok := res.Request.Context().Value(jobKey{}).(*jobState); ok {
				js.redirected(res.Request.URL, res)
			}
			return nil
		},
	}
	e.srv = &http.Server{Handler: http.HandlerFunc(e.serve), ReadHeaderTimeout: 30 * time.Second,
		ErrorLog: nil}
	g.mu.Lock()
	g.endpoints[e] = struct{}{}
	g.mu.Unlock()
	go func() {
		defer close(e.done)
		_ = e.srv.Serve(ln)
	}()
	return e, nil
}

// ProxyURL is the endpoint's address as a proxy server URL for Chromium.
func (e *Endpoint) ProxyURL() string { return "http://" + e.ln.Addr().String() }

// Tenant returns the current tenant.
func (e *Endpoint) Tenant() *Tenant { return e.tenant.Load() }

// Assign gives the endpoint a new tenant (a pooled browser leased for an
// app). Idle connections of the previous tenant are dropped.
func (e *Endpoint) Assign(t *Tenant) {
	if t == nil {
		t = &Tenant{}
	}
	e.tenant.Store(t)
	if js := e.job.Swap(nil); js != nil { // a new tenant ends any job (EndJob's refusals)
		js.end()
	}
	e.tr.CloseIdleConnections()
}

// Close stops the endpoint and cuts its open tunnels.
func (e *Endpoint) Close() error {
	e.once.Do(func() {
		_ = e.srv.Close()
		e.mu.Lock()
		e.closed = true
		for c := range e.tunnels {
			_ = c.Close()
		}
		e.mu.Unlock()
		e.tr.CloseIdleConnections()
		<-e.done
		e.g.mu.Lock()
		delete(e.g.endpoints, e)
		e.g.mu.Unlock()
	})
	return nil
}

func (e *Endpoint) serve(w http.ResponseWriter, r *http.Request) {
	t := e.tenant.Load()
	if r.Method == http.MethodConnect {
		e.connect(w, r, t)
		return
	}
	if r.URL.Scheme != "http" || r.URL.Host == "" {
		// Only absolute http:// requests come from a browser through a
		// proxy (https goes through CONNECT).
		e.g.blocked(t, ReasonScheme, r.URL.String())
		refuse(w, http.StatusBadRequest, r.Host, "this is a forward proxy for virtual browsers")
		return
	}
	host, port, err := splitHostPort(r.URL.Host, 80)
	if err != nil {
		refuse(w, http.StatusBadRequest, r.URL.Host, "bad host")
		return
	}
	if app, ok := e.g.internalApp(host); ok {
		e.internal(w, r, t, app, port)
		return
	}
	ctx := r.Context()
	var sent func()
	if js := e.job.Load(); js != nil {
		doc := e.claimDocument(host, port)
		var release func()
		var ok bool
		sent, release, ok = js.admit(ctx, w, e, t, r.URL.String(), net.JoinHostPort(host, strconv.Itoa(port)), doc, false, r.URL)
		if !ok {
			return
		}
		defer release()
		if js.mode.DocumentOnly {
			ctx = context.WithValue(ctx, jobKey{}, js)
		}
	}
	var once sync.Once
	contacted := func() {
		once.Do(func() {
			e.contacting(host, port)
			if sent != nil {
				sent()
			}
		})
	}
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { contacted() },
	})
	r = r.WithContext(context.WithValue(ctx, tenantKey{}, t))
	e.rp.ServeHTTP(w, r)
	contacted() // not written (refused, failed): the attempt still counts
}

// internal serves the tenant's own internal origin and refuses others'.
func (e *Endpoint) internal(w http.ResponseWriter, r *http.Request, t *Tenant, app string, port int) {
	if t.App == "" || app != t.App || port != 80 {
		reason := ReasonOtherApp
		if app == "" {
			reason = ReasonInternal
		}
		e.g.blocked(t, reason, r.URL.Host)
		refuse(w, http.StatusForbidden, r.URL.Host, "this app's browsers can load only their own app's files")
		return
	}
	if t.Internal == nil {
		http.NotFound(w, r)
		return
	}
	r2 := r.Clone(r.Context())
	r2.RequestURI = r.URL.RequestURI()
	r2.Header.Del("Proxy-Connection")
	t.Internal.ServeHTTP(w, r2)
}

// connect opens a tunnel (HTTPS, WebSockets) after the guard's check.
func (e *Endpoint) connect(w http.ResponseWriter, r *http.Request, t *Tenant) {
	host, port, err := splitHostPort(r.Host, 443)
	if err != nil {
		refuse(w, http.StatusBadRequest, r.Host, "bad CONNECT target")
		return
	}
	if _, ok := e.g.internalApp(host); ok {
		// Internal origins are plain http, served by the proxy itself.
		e.g.blocked(t, ReasonInternal, r.Host)
		refuse(w, http.StatusForbidden, r.Host, "internal origins are served over http only")
		return
	}
	js := e.job.Load()
	sent := func() {}
	if js != nil {
		doc := e.claimDocument(host, port)
		var release func()
		var ok bool
		sent, release, ok = js.admit(r.Context(), w, e, t, r.Host, net.JoinHostPort(host, strconv.Itoa(port)), doc, true, nil)
		if !ok {
			return
		}
		defer release() // the tunnel is the request: in flight until it closes
	}
	ctx, cancel := context.WithTimeout(r.Context(), e.g.cfg.DialTimeout)
	up, err := e.g.dial(ctx, t, host, port)
	cancel()
	e.contacting(host, port) // connected (the site saw it), or failed
	sent()
	if err != nil {
		e.dialFailed(w, t, r.Host, err)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		up.Close()
		refuse(w, http.StatusInternalServerError, r.Host, "cannot tunnel")
		return
	}
	down, buf, err := hj.Hijack()
	if err != nil {
		up.Close()
		return
	}
	if !e.track(down, up) || (js != nil && !js.trackTunnel(down)) {
		down.Close()
		up.Close()
		return
	}
	defer e.untrack(down, up)
	if js != nil {
		defer js.untrackTunnel(down)
	}
	if _, err := down.Write([]byte("HTTP/1.1 200 Connection Established\r\n\r\n")); err != nil {
		return
	}
	// Bytes the client sent after the CONNECT head (a TLS hello sent
	// eagerly) are in buf.
	if n := buf.Reader.Buffered(); n > 0 {
		head, _ := buf.Reader.Peek(n)
		if _, err := up.Write(head); err != nil {
			return
		}
	}
	relay(down, up)
}

func (e *Endpoint) track(cs ...net.Conn) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return false
	}
	for _, c := range cs {
		e.tunnels[c] = struct{}{}
	}
	return true
}

func (e *Endpoint) untrack(cs ...net.Conn) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, c := range cs {
		delete(e.tunnels, c)
		_ = c.Close()
	}
}

// relay copies both ways until either side ends, then closes both.
func relay(a, b net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	cp := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		// Half-close so the other direction can finish, then the
		// caller closes both.
		if tc, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = tc.CloseWrite()
		} else {
			_ = dst.Close()
		}
	}
	go cp(a, b)
	go cp(b, a)
	wg.Wait()
}

func (e *Endpoint) forwardError(w http.ResponseWriter, r *http.Request, err error) {
	t, _ := r.Context().Value(tenantKey{}).(*Tenant)
	e.dialFailed(w, t, r.URL.Host, err)
}

func (e *Endpoint) dialFailed(w http.ResponseWriter, t *Tenant, target string, err error) {
	var be *BlockedError
	if errors.As(err, &be) {
		e.g.blocked(t, be.Reason, target)
		refuse(w, http.StatusForbidden, target, blockedWhy(be.Reason))
		return
	}
	if errors.Is(err, context.Canceled) {
		return // the browser went away
	}
	refuse(w, http.StatusBadGateway, target, "could not connect")
}

func blockedWhy(reason string) string {
	switch reason {
	case ReasonCluster:
		return "it is one of the cluster's own services"
	case string(Metadata):
		return "it is a cloud metadata address"
	case ReasonScheme:
		return "the request is malformed"
	}
	return "it is a " + reason + " address; virtual browsers may reach public addresses only, unless the app or the cluster allows it"
}

// refuse answers a proxy request the guard did not let through.
func refuse(w http.ResponseWriter, code int, target, why string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-CloudBrowser-Egress", "refused")
	// Readable by the page's own fetch: the app sees why, not an opaque
	// network error. The page says nothing the page did not ask about.
	w.Header().Set("Access-Control-Allow-Origin", "*")
	w.Header().Set("Access-Control-Expose-Headers", "X-CloudBrowser-Egress")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, "<!doctype html><title>Blocked</title><h1>"+strconv.Itoa(code)+" blocked by CloudBrowser</h1><p>"+
		html.EscapeString(target)+" cannot be reached from this virtual browser: "+html.EscapeString(why)+".</p>")
}
