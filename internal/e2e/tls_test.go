package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/tlsfront/tlstest"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium"
)

// HTTPS on the public listener (--tls-cert), with certificates made at
// test time: a test CA, a first server certificate for 127.0.0.1 and
// localhost, and a second one the tests reload to.

// tlsFiles are a test CA, two server pairs and the files the cluster
// reads (holding the first pair).
type tlsFiles struct {
	ca            *tlstest.CA
	first, second tlstest.Pair
	dir           string
	cert, key     string
}

func newTLSFiles(t *testing.T) *tlsFiles {
	t.Helper()
	f := &tlsFiles{ca: tlstest.NewCA(t), dir: t.TempDir()}
	f.first, f.second = f.ca.Issue(t), f.ca.Issue(t)
	f.cert, f.key = f.first.Write(t, f.dir)
	return f
}

// flags are the command's TLS flags.
func (f *tlsFiles) flags() []string { return []string{"--tls-cert", f.cert, "--tls-key", f.key} }

// rotate writes the second pair over the first (each file by rename).
func (f *tlsFiles) rotate(t *testing.T) { f.second.Write(t, f.dir) }

// serial is the certificate serial a new TLS connection to addr gets.
func (f *tlsFiles) serial(addr string) (*big.Int, error) {
	c, err := tls.Dial("tcp", addr, f.ca.ClientConfig())
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber, nil
}

// tlsUser is an end user's HTTP client trusting the test CA, with a
// cookie jar and no automatic redirects.
func (f *tlsFiles) user(t *testing.T, base string, keepAlive bool) *user {
	jar, _ := cookiejar.New(nil)
	tr := &http.Transport{TLSClientConfig: f.ca.ClientConfig(), DisableKeepAlives: !keepAlive}
	t.Cleanup(tr.CloseIdleConnections)
	return &user{t: t, base: base, c: &http.Client{Jar: jar, Transport: tr, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// visit follows path's redirects as u and checks every answer on the way
// over HTTPS: HSTS on each, and every cookie Secure. It returns the last
// path (a browser's engine page).
func visit(t *testing.T, u *user, path string) string {
	t.Helper()
	cookies := 0
	for range 10 {
		resp, err := u.c.Get(u.base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if got := resp.Header.Values("Strict-Transport-Security"); len(got) != 1 || !strings.HasPrefix(got[0], "max-age=") {
			t.Errorf("GET %s (%s, worker %q): HSTS %q, want one max-age", path, resp.Status, resp.Header.Get("X-CB-Worker"), got)
		}
		for _, c := range resp.Cookies() {
			cookies++
			if !c.Secure {
				t.Errorf("GET %s: cookie %s is not Secure", path, c.Name)
			}
		}
		if resp.StatusCode != http.StatusFound {
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %s: %s", path, resp.Status)
			}
			if cookies == 0 {
				t.Errorf("visiting %s set no cookie to check", path)
			}
			return path
		}
		path = resp.Header.Get("Location")
	}
	t.Fatalf("redirect loop from %s", path)
	return ""
}

// engineSocket is a client engine WebSocket over TLS, as u.
type engineSocket struct {
	t    *testing.T
	conn *websocket.Conn
	seq  int
}

func (f *tlsFiles) dialEngine(t *testing.T, u *user, browserPath string) *engineSocket {
	t.Helper()
	base, _ := url.Parse(u.base)
	h := http.Header{"Origin": {u.base}}
	for _, ck := range u.c.Jar.Cookies(base) {
		h.Add("Cookie", ck.String())
	}
	d := websocket.Dialer{TLSClientConfig: f.ca.ClientConfig(), HandshakeTimeout: 10 * time.Second}
	conn, resp, err := d.DialContext(ctxT(t, 10*time.Second), "wss://"+base.Host+browserPath+"/ws", h)
	if err != nil {
		t.Fatalf("wss dial %s: %v (%v)", browserPath, err, resp)
	}
	t.Cleanup(func() { conn.Close() })
	return &engineSocket{t: t, conn: conn}
}

// ping sends a ping and reads until its pong, on the same connection.
func (s *engineSocket) ping() error {
	s.seq++
	if err := s.conn.WriteJSON(map[string]any{"t": "ping", "seq": s.seq}); err != nil {
		return err
	}
	for {
		_ = s.conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		typ, data, err := s.conn.ReadMessage()
		if err != nil {
			return err
		}
		var m struct {
			T   string
			Seq int
		}
		if typ == websocket.TextMessage && json.Unmarshal(data, &m) == nil && m.T == "pong" && m.Seq == s.seq {
			return nil
		}
	}
}

// load keeps requests going over HTTPS, some on kept-alive connections
// and some each on a new one (a TLS handshake per request), until stop.
type load struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	errs       []string
	stopc      chan struct{}
	wg         sync.WaitGroup
}

func startLoad(urls []string, clients []*http.Client) *load {
	l := &load{stopc: make(chan struct{})}
	for i, c := range clients {
		u := urls[i%len(urls)]
		l.wg.Go(func() {
			for {
				select {
				case <-l.stopc:
					return
				default:
				}
				resp, err := c.Get(u)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("%s", resp.Status)
					}
				}
				if err != nil {
					l.failed.Add(1)
					l.mu.Lock()
					if len(l.errs) < 5 {
						l.errs = append(l.errs, fmt.Sprintf("GET %s: %v", u, err))
					}
					l.mu.Unlock()
					continue
				}
				l.ok.Add(1)
			}
		})
	}
	return l
}

// more waits until n more requests succeeded.
func (l *load) more(t *testing.T, n int64) {
	t.Helper()
	target := l.ok.Load() + n
	testutil.Eventually(t, 30*time.Second, func() error {
		if got := l.ok.Load(); got < target {
			return fmt.Errorf("%d requests done, waiting for %d", got, target)
		}
		return nil
	})
}

// stop ends the load and fails t for any request that failed.
func (l *load) stop(t *testing.T) {
	t.Helper()
	close(l.stopc)
	l.wg.Wait()
	if f := l.failed.Load(); f > 0 {
		t.Errorf("%d of %d requests failed during the reload: %v", f, f+l.ok.Load(), l.errs)
	}
	t.Logf("load: %d requests, none failed", l.ok.Load())
}

// loadClients are two clients on kept-alive connections and two making a
// new connection (a full handshake) per request, sharing u's cookies.
func (f *tlsFiles) loadClients(t *testing.T, u *user) []*http.Client {
	var out []*http.Client
	for _, keep := range []bool{true, true, false, false} {
		tr := &http.Transport{TLSClientConfig: f.ca.ClientConfig(), DisableKeepAlives: !keep}
		t.Cleanup(tr.CloseIdleConnections)
		out = append(out, &http.Client{Jar: u.c.Jar, Transport: tr, Timeout: 30 * time.Second})
	}
	return out
}

// reloadUnderLoad rewrites the certificate files and sends SIGHUP to p
// while requests flow and the sockets are open: no request fails, every
// socket still answers on its connection, and new connections get the
// second certificate.
func (f *tlsFiles) reloadUnderLoad(t *testing.T, p *proc, public string, urls []string, u *user, socks []*engineSocket) {
	t.Helper()
	if got, err := f.serial(public); err != nil || got.Cmp(f.first.Serial) != 0 {
		t.Fatalf("before the reload: serial %v, %v; want the first %v", got, err, f.first.Serial)
	}
	l := startLoad(urls, f.loadClients(t, u))
	l.more(t, 20)
	f.rotate(t)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// Every process behind the port: several new connections in a row
	// (the kernel spreads them across the proxies sharing it).
	testutil.Eventually(t, 30*time.Second, func() error {
		for range 8 {
			got, err := f.serial(public)
			if err != nil {
				return err
			}
			if got.Cmp(f.second.Serial) != 0 {
				return fmt.Errorf("a new connection got serial %v, want the second certificate's %v", got, f.second.Serial)
			}
		}
		return nil
	})
	l.more(t, 20)
	l.stop(t)
	for i, s := range socks {
		if err := s.ping(); err != nil {
			t.Errorf("engine socket %d opened before the reload: %v", i, err)
		}
	}
	if !logContains(p, "SIGHUP") {
		t.Errorf("%s did not log the SIGHUP", p.name)
	}
}

// pinnedBrowsers starts the end users' Chromium trusting the test server
// certificates by their public keys (not the CA): the fingerprint pinned.
func (f *tlsFiles) pinnedBrowsers(t *testing.T) *chromium.Runtime {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rt, err := chromium.New(ctx, chromium.Config{Logger: zerolog.Nop(), ExtraFlags: []string{
		"--ignore-certificate-errors-spki-list=" + f.first.SPKISHA256Base64 + "," + f.second.SPKISHA256Base64}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

// countSockets makes b's page count the WebSockets it opens from now on
// (in window.__cbSockets): a reconnecting engine opens a new one.
func countSockets(t *testing.T, b browser.Browser) {
	t.Helper()
	const patch = `(() => {
		const W = window.WebSocket;
		window.__cbSockets = 0;
		window.WebSocket = function (url, protocols) {
			window.__cbSockets++;
			return protocols === undefined ? new W(url) : new W(url, protocols);
		};
		Object.assign(window.WebSocket, {CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3});
		window.WebSocket.prototype = W.prototype;
		return "patched";
	})()`
	var got string
	if err := b.Evaluate(context.Background(), patch, &got); err != nil || got != "patched" {
		t.Fatalf("patching WebSocket: %q, %v", got, err)
	}
}

// TestTLSSeparateProxy: a proxy process serving TLS in front of a master
// that knows nothing of it. A real Chromium (the test certificates pinned
// by fingerprint) comes in over the plain-HTTP redirect and uses an app
// over HTTPS: the engine's WebSocket goes over TLS and is relayed, not
// handed to the worker on this host; every cookie is Secure and every
// page sends HSTS, the worker's included (it believes the proxy's signed
// https). Then the certificate is replaced and SIGHUP sent while the
// engine and other sockets are open and requests flow: nothing drops.
func TestTLSSeparateProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	needChromium(t)
	f := newTLSFiles(t)
	apps, _ := filepath.Abs("testdata/apps")
	c := startCluster(t, clusterOpts{proxies: 0, workers: 1, runtime: "chromium", extra: []string{"--apps", apps}})
	px := c.start("proxy-tls", append([]string{"proxy", "--master", c.rmi, "--listen", anyPort, "--admin", anyPort,
		"--secret-file", filepath.Join(c.dir, "data", "proxy.key"), "--name", "tls-proxy", "--https-redirect", anyPort}, f.flags()...)...)
	pa := px.addrs(t)
	c.waitFor("the TLS proxy subscribed", 20*time.Second, func(st *wire.ClusterStatus) bool { return len(st.Proxies) == 2 })
	waitHTTP(t, "http://"+pa["admin"]+"/readyz", 20*time.Second)
	base := "https://" + pa["public"]

	// The redirect, as any client sees it.
	resp, err := newUser(t, "http://"+pa["redirect"]).c.Get("http://" + pa["redirect"] + "/typing?from=http")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if want := base + "/typing?from=http"; resp.StatusCode != http.StatusPermanentRedirect || resp.Header.Get("Location") != want {
		t.Fatalf("redirect: %s to %q, want 308 to %q", resp.Status, resp.Header.Get("Location"), want)
	}

	// A user's Chromium, told the plain-HTTP address.
	users := f.pinnedBrowsers(t)
	alice := open(t, users, "http://"+pa["redirect"]+"/typing")
	eventually(t, alice, "alice's engine connects over TLS", "document.body.dataset.status", "live")
	eventually(t, alice, "alice sees frames", "Number(document.body.dataset.frames || 0) > 0", "true")
	eventually(t, alice, "alice was sent to https", "location.origin", base)

	// A Go user: cookies, HSTS, and an engine socket of its own.
	bob := f.user(t, base, true)
	bobPath := visit(t, bob, "/typing")
	bobSock := f.dialEngine(t, bob, bobPath)
	if err := bobSock.ping(); err != nil {
		t.Fatal(err)
	}
	m := scrape(t, "http://"+pa["admin"]+"/metrics", "")
	if v := value(m, "cloudbrowser_proxy_websockets_handed_off_total", nil); v != 0 {
		t.Errorf("TLS sockets handed off: %v, want 0 (they must be relayed)", v)
	}
	if v := value(m, "cloudbrowser_proxy_websockets_total", nil); v < 2 {
		t.Errorf("relayed sockets: %v, want alice's and bob's", v)
	}

	countSockets(t, alice)
	f.reloadUnderLoad(t, px, pa["public"], []string{base + bobPath, base + "/"}, bob, []*engineSocket{bobSock})
	eventually(t, alice, "alice's engine still live", "document.body.dataset.status", "live")
	eventually(t, alice, "alice's engine opened no new socket", "window.__cbSockets", "0")
	x0, y0 := canvasOrigin(t, alice)
	click(t, alice, x0+60, y0+60)
	typeText(t, alice, "tls")
	eventually(t, alice, "typing after the reload reached the virtual page", "document.title", "typed:tls|clicks:0 · CloudBrowser")
}

// TestTLSEmbedded: the master's embedded proxy serves TLS and its
// redirect listener; a real Chromium uses an app over HTTPS; the
// master's pages on the public port and the worker's send HSTS, cookies
// are Secure; a reload by SIGHUP to the master keeps the sockets open.
func TestTLSEmbedded(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	needChromium(t)
	f := newTLSFiles(t)
	apps, _ := filepath.Abs("testdata/apps")
	c := startCluster(t, clusterOpts{proxies: 0, workers: 1, runtime: "chromium",
		extra: append([]string{"--apps", apps, "--https-redirect", anyPort}, f.flags()...)})
	base := "https://" + c.public
	redirect := c.master.addrs(t)["redirect"]
	if redirect == "" {
		t.Fatal("the master's ready file has no redirect address")
	}

	u := f.user(t, base, true)
	for _, path := range []string{"/admin", "/healthz", "/"} { // the master's dashboard and health, the home page
		resp, err := u.c.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode >= 500 || resp.Header.Get("Strict-Transport-Security") == "" {
			t.Errorf("GET %s: %s, HSTS %q", path, resp.Status, resp.Header.Get("Strict-Transport-Security"))
		}
	}
	bobPath := visit(t, u, "/typing")
	sock := f.dialEngine(t, u, bobPath)
	if err := sock.ping(); err != nil {
		t.Fatal(err)
	}

	users := f.pinnedBrowsers(t)
	alice := open(t, users, "http://"+redirect+"/typing")
	eventually(t, alice, "alice's engine connects over TLS", "document.body.dataset.status", "live")
	eventually(t, alice, "alice was sent to https", "location.origin", base)
	countSockets(t, alice)

	f.reloadUnderLoad(t, c.master, c.public, []string{base + bobPath, base + "/healthz"}, u, []*engineSocket{sock})
	eventually(t, alice, "alice's engine still live", "document.body.dataset.status", "live")
	eventually(t, alice, "alice's engine opened no new socket", "window.__cbSockets", "0")
}

// TestTLSProxyManager: the master's two proxy processes (one port) get
// the pair; a SIGHUP to the master reaches both, under load, with engine
// sockets open through them.
func TestTLSProxyManager(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	f := newTLSFiles(t)
	c := startCluster(t, clusterOpts{proxies: 2, workers: 1, extra: f.flags()})
	base := "https://" + c.public
	var socks []*engineSocket
	var u *user
	for range 4 { // spread over both processes, most likely
		u = f.user(t, base, true)
		s := f.dialEngine(t, u, visit(t, u, "/hello"))
		if err := s.ping(); err != nil {
			t.Fatal(err)
		}
		socks = append(socks, s)
	}
	f.reloadUnderLoad(t, c.master, c.public, []string{base + "/"}, u, socks)
	if got := c.mustStatus(); len(got.Proxies) != 2 {
		t.Errorf("proxies after the reload: %+v", got.Proxies)
	}
}
