package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		ip   string
		want Class
	}{
		{"8.8.8.8", Public},
		{"2606:4700:4700::1111", Public},
		{"127.0.0.1", Loopback},
		{"127.0.0.2", Loopback},
		{"127.255.255.254", Loopback},
		{"::1", Loopback},
		{"::ffff:127.0.0.1", Loopback},
		{"::ffff:7f00:1", Loopback},
		{"::127.0.0.1", Loopback},     // IPv4-compatible
		{"64:ff9b::7f00:1", Loopback}, // NAT64 of 127.0.0.1
		{"64:ff9b::a00:1", Private},   // NAT64 of 10.0.0.1
		{"64:ff9b::808:808", Public},  // NAT64 of 8.8.8.8
		{"2002:7f00:1::1", Loopback},  // 6to4 of 127.0.0.1
		{"2002:c0a8:101::1", Private}, // 6to4 of 192.168.1.1
		{"2001:0:0a00:1::1", Private}, // Teredo server 10.0.0.1
		{"0.0.0.0", Unspecified},
		{"0.1.2.3", Unspecified},
		{"::", Unspecified},
		{"10.1.2.3", Private},
		{"172.16.0.1", Private},
		{"172.31.255.255", Private},
		{"172.32.0.1", Public},
		{"192.168.1.1", Private},
		{"fd00::1", Private},
		{"fc00::1", Private},
		{"169.254.169.254", Metadata},
		{"::ffff:169.254.169.254", Metadata},
		{"fd00:ec2::254", Metadata},
		{"100.100.100.200", Metadata},
		{"169.254.1.1", LinkLocal},
		{"fe80::1", LinkLocal},
		{"fe80::1%eth0", LinkLocal},
		{"100.64.0.1", CGNAT},
		{"100.127.255.255", CGNAT},
		{"224.0.0.1", LinkLocal},
		{"239.1.1.1", Multicast},
		{"ff02::1", LinkLocal},
		{"ff05::1", Multicast},
		{"255.255.255.255", Reserved},
		{"240.0.0.1", Reserved},
		{"198.18.0.1", Reserved},
		{"fec0::1", Reserved},
	} {
		if got := Classify(netip.MustParseAddr(tc.ip)); got != tc.want {
			t.Errorf("Classify(%s) = %s, want %s", tc.ip, got, tc.want)
		}
	}
}

func TestParseRule(t *testing.T) {
	ip := netip.MustParseAddr
	for _, tc := range []struct {
		rule    string
		host    string
		ip      string
		port    int
		want    bool
		wantErr bool
	}{
		{rule: "10.0.0.0/8", host: "x", ip: "10.9.9.9", port: 80, want: true},
		{rule: "10.0.0.0/8", host: "x", ip: "11.0.0.1", port: 80},
		{rule: "10.0.0.0/8:443", host: "x", ip: "10.0.0.1", port: 443, want: true},
		{rule: "10.0.0.0/8:443", host: "x", ip: "10.0.0.1", port: 80},
		{rule: "127.0.0.1:8080", host: "localhost", ip: "127.0.0.1", port: 8080, want: true},
		{rule: "127.0.0.1:8080", host: "localhost", ip: "::ffff:127.0.0.1", port: 8080, want: true},
		{rule: "::ffff:127.0.0.1", host: "x", ip: "127.0.0.1", port: 1, want: true},
		{rule: "[::1]:8080", host: "x", ip: "::1", port: 8080, want: true},
		{rule: "fd00::/8", host: "x", ip: "fd12::1", port: 1, want: true},
		{rule: "intranet.example", host: "INTRANET.example.", ip: "10.0.0.1", port: 1, want: true},
		{rule: "intranet.example", host: "evil-intranet.example", ip: "10.0.0.1", port: 1},
		{rule: "*.corp.example", host: "a.b.corp.example", ip: "10.0.0.1", port: 1, want: true},
		{rule: "*.corp.example", host: "corp.example", ip: "10.0.0.1", port: 1},
		{rule: "*.corp.example", host: "xcorp.example", ip: "10.0.0.1", port: 1},
		{rule: "intranet.example:8443", host: "intranet.example", ip: "10.0.0.1", port: 8443, want: true},
		{rule: "intranet.example:8443", host: "intranet.example", ip: "10.0.0.1", port: 443},
		{rule: "", wantErr: true},
		{rule: "host:99999", wantErr: true},
		{rule: "http://x/", wantErr: true},
		{rule: "a b", wantErr: true},
		{rule: "x:y:z", wantErr: true},
	} {
		r, err := ParseRule(tc.rule)
		if tc.wantErr {
			if err == nil {
				t.Errorf("ParseRule(%q) accepted", tc.rule)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseRule(%q): %v", tc.rule, err)
			continue
		}
		if got := r.Match(tc.host, ip(tc.ip), tc.port); got != tc.want {
			t.Errorf("%q.Match(%s, %s, %d) = %v, want %v", tc.rule, tc.host, tc.ip, tc.port, got, tc.want)
		}
	}
}

func mustRules(t *testing.T, rs ...string) []Rule {
	t.Helper()
	out, err := ParseRules("test", rs)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestCheck(t *testing.T) {
	g, err := New(Config{Cluster: []string{":7070", "10.0.0.5:8000"}, Allow: mustRules(t, "169.254.169.254:80")})
	if err != nil {
		t.Fatal(err)
	}
	app := &Tenant{App: "a", Allow: mustRules(t, "127.0.0.0/8", "10.0.0.0/8", "fd00:ec2::254")}
	for _, tc := range []struct {
		t      *Tenant
		ip     string
		port   int
		ok     bool
		reason string
	}{
		{nil, "8.8.8.8", 443, true, ""},
		{nil, "127.0.0.1", 80, false, "loopback"},
		{app, "127.0.0.1", 80, true, ""},
		{app, "127.0.0.1", 7070, false, ReasonCluster}, // cluster ports beat any rule
		{app, "0.0.0.0", 7070, false, ReasonCluster},
		{app, "10.0.0.5", 8000, false, ReasonCluster},
		{app, "10.0.0.6", 8000, true, ""},
		{app, "fd00:ec2::254", 80, false, "metadata"}, // apps cannot allow metadata
		{nil, "169.254.169.254", 80, true, ""},        // the operator can
		{nil, "169.254.169.254", 81, false, "metadata"},
	} {
		ok, reason := g.Check(tc.t, "h", netip.MustParseAddr(tc.ip), tc.port)
		if ok != tc.ok || reason != tc.reason {
			t.Errorf("Check(%v, %s:%d) = %v %q, want %v %q", tc.t != nil, tc.ip, tc.port, ok, reason, tc.ok, tc.reason)
		}
	}
}

// target is a loopback server that counts what reaches it.
type target struct {
	*httptest.Server
	hits atomic.Int64
	port string
}

func newTarget(t *testing.T, addr string) *target {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s: %v", addr, err)
	}
	tg := &target{}
	tg.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tg.hits.Add(1)
		fmt.Fprint(w, "secret of "+r.Host)
	}))
	tg.Server.Listener = ln
	tg.Start()
	t.Cleanup(tg.Close)
	_, tg.port, _ = net.SplitHostPort(ln.Addr().String())
	return tg
}

// rawGet sends one absolute-form request line through the proxy, as a
// browser would, and returns the status and body.
func rawGet(t *testing.T, proxy, rawURL string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(proxy, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", rawURL, u.Host)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestProxyRefusesURLTricks(t *testing.T) {
	tg := newTarget(t, "127.0.0.1:0")
	var blocked sync.Map
	g, err := New(Config{InternalSuffix: ".app.test.internal", OnBlock: func(app, reason, target string) {
		blocked.Store(target, reason)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	e, err := g.Open(&Tenant{App: "a"})
	if err != nil {
		t.Fatal(err)
	}
	p := tg.port
	for _, u := range []string{
		"http://127.0.0.1:" + p + "/",
		"http://x@127.0.0.1:" + p + "/", // userinfo
		"http://x:y@127.0.0.1:" + p + "/metrics",
		"http://localhost:" + p + "/",
		"http://localhost.:" + p + "/", // trailing dot
		"http://LOCALHOST:" + p + "/",
		"http://0.0.0.0:" + p + "/",
		"http://[::ffff:127.0.0.1]:" + p + "/",
		"http://[::ffff:7f00:1]:" + p + "/",
		"http://127.0.0.2:" + p + "/",
		"http://[::1]:" + p + "/",
		"http://2130706433:" + p + "/", // decimal 127.0.0.1: not a name, not an address
	} {
		code, body := rawGet(t, e.ProxyURL(), u)
		if code < 400 || strings.Contains(body, "secret") {
			t.Errorf("%s: %d %q, want refused", u, code, body)
		}
	}
	if n := tg.hits.Load(); n != 0 {
		t.Fatalf("the loopback service got %d requests", n)
	}
	if _, ok := blocked.Load("127.0.0.1:" + p); !ok {
		t.Error("a refusal was not reported")
	}
	// Names under .localhost are this machine without asking DNS (RFC
	// 6761): refused as loopback, not "could not connect".
	for _, u := range []string{"http://foo.localhost:" + p + "/", "http://a.b.localhost.:" + p + "/"} {
		code, _ := rawGet(t, e.ProxyURL(), u)
		host := strings.TrimSuffix(strings.TrimPrefix(u, "http://"), "/")
		if reason, _ := blocked.Load(host); code != http.StatusForbidden || reason != string(Loopback) {
			t.Errorf("%s: %d, reason %v; want 403 as loopback", u, code, reason)
		}
	}
	_ = e.Close()
}

func TestProxyTenantRulesAndInternalOrigins(t *testing.T) {
	tg := newTarget(t, "127.0.0.1:0")
	g, err := New(Config{InternalSuffix: ".app.test.internal"})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	own := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "file "+r.URL.Path) })
	e, err := g.Open(nil)
	if err != nil {
		t.Fatal(err)
	}
	// No app yet: loopback refused, no internal origin.
	if code, _ := rawGet(t, e.ProxyURL(), "http://127.0.0.1:"+tg.port+"/"); code != http.StatusForbidden {
		t.Fatalf("unassigned: %d", code)
	}
	if code, _ := rawGet(t, e.ProxyURL(), "http://a.app.test.internal/x.html"); code != http.StatusForbidden {
		t.Fatalf("unassigned internal: %d", code)
	}
	e.Assign(&Tenant{App: "a", Allow: mustRules(t, "127.0.0.1:"+tg.port), Internal: own})
	if code, body := rawGet(t, e.ProxyURL(), "http://127.0.0.1:"+tg.port+"/"); code != 200 || !strings.Contains(body, "secret") {
		t.Fatalf("allowed by the app: %d %q", code, body)
	}
	if code, body := rawGet(t, e.ProxyURL(), "http://a.app.test.internal/x.html"); code != 200 || body != "file /x.html" {
		t.Fatalf("own origin: %d %q", code, body)
	}
	if code, _ := rawGet(t, e.ProxyURL(), "http://A.app.test.internal./x.html"); code != 200 {
		t.Fatalf("own origin, other spelling: %d", code)
	}
	for _, u := range []string{"http://b.app.test.internal/app.json", "http://app.test.internal/", "http://a.app.test.internal:8080/"} {
		if code, body := rawGet(t, e.ProxyURL(), u); code != http.StatusForbidden {
			t.Errorf("%s: %d %q, want 403", u, code, body)
		}
	}
}

func TestProxyConnect(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "tls ok") }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	g, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	client := func(e *Endpoint) *http.Client {
		pu, _ := url.Parse(e.ProxyURL())
		return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu),
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	}
	e, err := g.Open(&Tenant{App: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client(e).Get("https://127.0.0.1:" + port + "/"); err == nil || !strings.Contains(err.Error(), "Forbidden") {
		t.Fatalf("CONNECT to loopback: %v, want Forbidden", err)
	}
	e.Assign(&Tenant{App: "a", Allow: mustRules(t, "127.0.0.1")})
	resp, err := client(e).Get("https://127.0.0.1:" + port + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "tls ok" {
		t.Fatalf("tunnel body %q", b)
	}
	_ = e.Close()
}

// TestProxyRebinding: a name that resolved to an allowed address and then
// to a forbidden one is refused the second time; the check is on the
// address connected to, not the name.
func TestProxyRebinding(t *testing.T) {
	allowed := newTarget(t, "127.0.0.1:0")
	victim := newTarget(t, "127.0.0.2:"+allowed.port)
	var calls atomic.Int64
	g, err := New(Config{
		Allow: mustRules(t, "127.0.0.1"),
		Lookup: func(ctx context.Context, host string) ([]netip.Addr, error) {
			if host != "rebind.example" {
				return nil, fmt.Errorf("no such host %s", host)
			}
			if calls.Add(1) == 1 {
				return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
			}
			return []netip.Addr{netip.MustParseAddr("127.0.0.2")}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	e, err := g.Open(&Tenant{App: "a"})
	if err != nil {
		t.Fatal(err)
	}
	u := "http://rebind.example:" + allowed.port + "/"
	if code, body := rawGet(t, e.ProxyURL(), u); code != 200 || !strings.Contains(body, "secret") {
		t.Fatalf("first: %d %q", code, body)
	}
	// A kept-alive connection to the first address may be reused (it goes
	// where it went before); a new one must be checked again.
	e.tr.CloseIdleConnections()
	if code, _ := rawGet(t, e.ProxyURL(), u); code != http.StatusForbidden {
		t.Fatalf("after rebinding: %d, want 403", code)
	}
	if victim.hits.Load() != 0 {
		t.Fatal("the rebinding target was reached")
	}
}

func TestEndpointCloseCutsTunnels(t *testing.T) {
	ln := holdingListener(t)
	g, err := New(Config{Allow: mustRules(t, "127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	e, err := g.Open(nil)
	if err != nil {
		t.Fatal(err)
	}
	c, resp := openTunnel(t, e.ProxyURL(), ln.Addr().String())
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v", resp.Status)
	}
	_ = g.Close() // closes the endpoint
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("tunnel read after close: %v", err)
	}
	if _, err := g.Open(nil); err == nil {
		t.Fatal("open after close")
	}
}

// TestOnNextRequest: a watcher fires once, for the next request to its
// host:port (http and CONNECT), once the request went out (after the site
// got it, before the browser has the answer); others and a cancelled
// watcher never fire.
func TestOnNextRequest(t *testing.T) {
	var seen atomic.Int64 // unix ns of the site's last request
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(time.Now().UnixNano())
		fmt.Fprint(w, "ok")
	}))
	defer site.Close()
	secure := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "tls ok") }))
	defer secure.Close()
	g, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	e, err := g.Open(&Tenant{App: "a", Allow: mustRules(t, "127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	plain := site.Listener.Addr().String()
	var fired []time.Time
	var mu sync.Mutex
	record := func(at time.Time) { mu.Lock(); fired = append(fired, at); mu.Unlock() }
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(fired) }

	other := e.OnNextRequest("127.0.0.1:1", func(time.Time) { t.Error("watcher of another port fired") })
	defer other()
	e.OnNextRequest(plain, record)
	if code, _ := rawGet(t, e.ProxyURL(), "http://"+plain+"/"); code != 200 {
		t.Fatalf("GET through the endpoint: %d", code)
	}
	// Fired by the time the browser has the answer.
	if count() != 1 || seen.Load() == 0 {
		t.Fatalf("http: fired %v, site saw %v", fired, seen.Load())
	}
	if code, _ := rawGet(t, e.ProxyURL(), "http://"+plain+"/"); code != 200 || count() != 1 {
		t.Fatalf("second GET: %d, fired %d times, want once", code, count())
	}

	cancel := e.OnNextRequest(plain, record)
	cancel()
	if code, _ := rawGet(t, e.ProxyURL(), "http://"+plain+"/"); code != 200 || count() != 1 {
		t.Fatalf("a cancelled watcher fired (%d) or the GET failed (%d)", count(), code)
	}

	e.OnNextRequest(secure.Listener.Addr().String(), record)
	pu, _ := url.Parse(e.ProxyURL())
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := client.Get("https://" + secure.Listener.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	client.CloseIdleConnections()
	if count() != 2 {
		t.Fatalf("CONNECT: %d watchers fired, want 2", count())
	}
	_ = e.Close()
}
