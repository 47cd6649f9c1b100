package proxy

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/internal/hop"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/tlsfront"
	"github.com/cloudbrowser-go/cloudbrowser/internal/tlsfront/tlstest"
)

// tlsProxy serves a proxy of cfg over TLS with a fresh test certificate
// and returns the https base URL and a client config trusting it.
func tlsProxy(t *testing.T, cfg Config) (*Proxy, *testServer, *tls.Config) {
	t.Helper()
	ca := tlstest.NewCA(t)
	cert, key := ca.Issue(t).Write(t, t.TempDir())
	store, err := tlsfront.New(tlsfront.Files{Cert: cert, Key: key}, testutil.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.TLS = store.ServerConfig()
	p, srv := startProxy(t, cfg)
	srv.URL = "https://" + srv.Addr
	cc := ca.ClientConfig()
	cc.NextProtos = []string{"h2", "http/1.1"} // as browsers offer
	return p, srv, cc
}

// TestTLSFront: over TLS the proxy speaks HTTP/1.1 even to a client
// offering h2, tells the worker https (signed), sends HSTS, and relays a
// WebSocket to a worker on this host instead of handing it over (a TLS
// session cannot leave the process).
func TestTLSFront(t *testing.T) {
	key := make([]byte, hop.KeyLen)
	_, _ = rand.Read(key)
	route, echo, bad := handoffWorker(t, key)
	p, srv, cc := tlsProxy(t, Config{Router: &fakeRouter{route: route}, HopKey: func() []byte { return key }})

	conn, err := tls.Dial("tcp", srv.Addr, cc)
	if err != nil {
		t.Fatal(err)
	}
	if got := conn.ConnectionState().NegotiatedProtocol; got != "http/1.1" {
		t.Errorf("ALPN: %q, want http/1.1", got)
	}
	conn.Close()

	d := websocket.Dialer{TLSClientConfig: cc}
	c, resp, err := d.Dial("wss://"+srv.Addr+wsPath, nil)
	if err != nil {
		t.Fatalf("wss dial: %v (%v)", err, resp)
	}
	defer c.Close()
	echoOnce(t, c, "over tls")
	h := <-echo.hdr
	if h.Get("X-Forwarded-Proto") != "https" || h.Get("X-Forwarded-For") != "127.0.0.1" {
		t.Errorf("worker saw %v", h)
	}
	if bad.Load() != 0 {
		t.Errorf("%d requests without a valid hop", bad.Load())
	}
	if st := p.Stats(); st.WebSocketsHandedOff != 0 || st.WebSocketsTotal != 1 {
		t.Errorf("stats %+v: want the TLS WebSocket relayed, not handed off", st)
	}
	if !p.handoffs.allows(route) {
		t.Error("the worker's handoff socket was marked failed: TLS must not even try it")
	}

	// A plain page answer: HSTS too, from the proxy's own pages as well.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cc}}
	defer hc.CloseIdleConnections()
	for _, path := range []string{"/chat", "/admin"} { // a worker's answer, the proxy's 404
		resp, err := hc.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.ProtoMajor != 1 || resp.Header.Get("Strict-Transport-Security") != "max-age=31536000" {
			t.Errorf("GET %s: %s, HSTS %q", path, resp.Proto, resp.Header.Get("Strict-Transport-Security"))
		}
	}
}

// TestTrustedProxies: the worker is told the client address and scheme
// the trusted proxies name, and nothing a peer outside them says; for
// every peer × forwarded-header combination.
func TestTrustedProxies(t *testing.T) {
	route := echoWorker(t)
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}
	for _, tc := range []struct {
		name       string
		cfg        Config
		peer       string
		xff, xfp   string
		wantFor    string
		wantProto  string
		wantSecure bool // HSTS on the answer
	}{
		{"untrusted peer, forged headers", Config{TrustedProxies: trusted}, "203.0.113.7", "198.51.100.1", "https", "203.0.113.7", "http", false},
		{"trusted peer, no headers", Config{TrustedProxies: trusted}, "10.0.0.5", "", "", "10.0.0.5", "http", false},
		{"trusted peer names the client", Config{TrustedProxies: trusted}, "10.0.0.5", "198.51.100.1", "https", "198.51.100.1", "https", true},
		{"trusted peer, client-forged entry on the left", Config{TrustedProxies: trusted}, "10.0.0.5", "1.2.3.4, 198.51.100.1", "https", "198.51.100.1", "https", true},
		{"two trusted hops", Config{TrustedProxies: trusted}, "10.0.0.5", "198.51.100.1, 10.1.2.3", "http", "198.51.100.1", "http", false},
		{"trusted peer, garbage entry", Config{TrustedProxies: trusted}, "10.0.0.5", "nonsense", "", "10.0.0.5", "http", false},
		{"trusted IPv6 peer", Config{TrustedProxies: trusted}, "[2001:db8::1]", "2001:db8:ffff::9, 198.51.100.2", "https", "198.51.100.2", "https", true},
		{"old flag: any peer's proto", Config{TrustForwardedProto: true}, "203.0.113.7", "198.51.100.1", "https", "203.0.113.7", "https", true},
		{"old flag narrowed by the list", Config{TrustForwardedProto: true, TrustedProxies: trusted}, "203.0.113.7", "", "https", "203.0.113.7", "http", false},
		{"public https url", Config{PublicHTTPS: true, TrustedProxies: trusted}, "203.0.113.7", "", "http", "203.0.113.7", "https", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Router = &fakeRouter{route: route}
			tc.cfg.Logger = testutil.Logger(t)
			p := New(tc.cfg)
			defer p.Shutdown(context.Background())
			r := httptest.NewRequest("GET", "/chat", nil)
			r.RemoteAddr = tc.peer + ":4242"
			if tc.xff != "" {
				r.Header.Set("X-Forwarded-For", tc.xff)
			}
			if tc.xfp != "" {
				r.Header.Set("X-Forwarded-Proto", tc.xfp)
			}
			rec := httptest.NewRecorder()
			p.ServeHTTP(rec, r)
			var s seen
			if err := json.NewDecoder(rec.Body).Decode(&s); err != nil {
				t.Fatalf("status %d: %v", rec.Code, err)
			}
			if got := s.Header.Values("X-Forwarded-For"); len(got) != 1 || got[0] != tc.wantFor {
				t.Errorf("worker's X-Forwarded-For = %q, want %q", got, tc.wantFor)
			}
			if got := s.Header.Values("X-Forwarded-Proto"); len(got) != 1 || got[0] != tc.wantProto {
				t.Errorf("worker's X-Forwarded-Proto = %q, want %q", got, tc.wantProto)
			}
			if got := rec.Header().Get("Strict-Transport-Security") != ""; got != tc.wantSecure {
				t.Errorf("HSTS sent = %v, want %v", got, tc.wantSecure)
			}
		})
	}
}

// TestTrustedProxiesFallback: the master's handlers behind an embedded
// proxy (its fallback) see the user as the proxy does.
func TestTrustedProxiesFallback(t *testing.T) {
	type view struct{ remote, xff, xfp string }
	got := make(chan view, 1)
	fb := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- view{r.RemoteAddr, r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Forwarded-Proto")}
	})
	p := New(Config{Router: &fakeRouter{}, Fallback: fb, Logger: testutil.Logger(t),
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	defer p.Shutdown(context.Background())
	for _, tc := range []struct {
		peer, want string
	}{{"10.0.0.5", "198.51.100.1:4242"}, {"203.0.113.7", "203.0.113.7:4242"}} {
		r := httptest.NewRequest("GET", "/admin", nil)
		r.RemoteAddr = tc.peer + ":4242"
		r.Header.Set("X-Forwarded-For", "198.51.100.1")
		r.Header.Set("X-Forwarded-Proto", "https")
		p.ServeHTTP(httptest.NewRecorder(), r)
		if v := <-got; v != (view{remote: tc.want}) {
			t.Errorf("peer %s: the fallback saw %+v, want RemoteAddr %s and no forwarded headers", tc.peer, v, tc.want)
		}
	}
}

// TestPortProofTLS: a proxy joining a port its cluster's proxies serve
// over TLS gets their proof over TLS, and one that would serve the other
// protocol is refused.
func TestPortProofTLS(t *testing.T) {
	portKey := []byte("0123456789abcdef0123456789abcdef")
	_, srv, _ := tlsProxy(t, Config{Router: &fakeRouter{}, PortKey: func() []byte { return portKey }})
	ctx := context.Background()
	if err := ProbePort(ctx, srv.Addr, portKey); err != nil {
		t.Fatalf("probe of a TLS port: %v", err)
	}
	if err := sameTLS(ctx, srv.Addr, portKey, true); err != nil {
		t.Errorf("a TLS proxy joining TLS proxies: %v", err)
	}
	if err := sameTLS(ctx, srv.Addr, portKey, false); err == nil || !strings.Contains(err.Error(), "--tls-cert") {
		t.Errorf("a plain proxy joining TLS proxies: %v", err)
	}
	if err := ProbePort(ctx, srv.Addr, []byte("another cluster's key, 32 bytes!")); err == nil {
		t.Error("another cluster's key passed the probe")
	}
	_, plain := startProxy(t, Config{Router: &fakeRouter{}, PortKey: func() []byte { return portKey }})
	if err := sameTLS(ctx, plain.Addr, portKey, true); err == nil {
		t.Error("a TLS proxy joining plain proxies was not refused")
	}
	// Something that is not a proxy at all, over TLS, is still foreign.
	other := httptest.NewUnstartedServer(http.NotFoundHandler())
	other.Config.ErrorLog = log.New(io.Discard, "", 0) // the plain-text probe's handshake error
	other.StartTLS()
	defer other.Close()
	if err := ProbePort(ctx, other.Listener.Addr().String(), portKey); err == nil {
		t.Error("a foreign TLS server passed the probe")
	}
}

// TestHSTSOnce: a worker's own Strict-Transport-Security replaces the
// proxy's instead of adding a second header line.
func TestHSTSOnce(t *testing.T) {
	route := startWorker(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Strict-Transport-Security", "max-age=31536000")
	}))
	p := New(Config{Router: &fakeRouter{route: route}, PublicHTTPS: true, Logger: testutil.Logger(t)})
	defer p.Shutdown(context.Background())
	rec := httptest.NewRecorder()
	p.ServeHTTP(rec, httptest.NewRequest("GET", "/chat", nil))
	if got := rec.Header().Values("Strict-Transport-Security"); len(got) != 1 {
		t.Fatalf("HSTS lines %q, want one", got)
	}
}
