package e2e

import (
	"context"
	"fmt"
	hophdr "github.com/cloudbrowser-go/cloudbrowser/internal/hop"
	"github.com/cloudbrowser-go/cloudbrowser/internal/secret"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// metricsToken is the token workers require on /metrics.
func (c *cluster) metricsToken() string {
	c.t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, "data", "metrics.token"))
	if err != nil {
		c.t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

const notRelayed = "only accepts requests relayed by the cluster proxies"

// TestTrustedHops: a worker answers only requests relayed by the cluster's
// proxies. Straight to its port, pages, WebSockets and logins get 403 (so a
// forged X-Forwarded-For there reaches nothing); through a proxy they work,
// and a forged X-Forwarded-For sent to the proxy does not change the client
// address the login limits see. The worker's /metrics needs the metrics
// token.
func TestTrustedHops(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	apps, _ := filepath.Abs("testdata/apps")
	// The per-name limit is out of the way: only the per-address limit
	// (30 failures, the default) can lock.
	c := startCluster(t, clusterOpts{proxies: 2, workers: 1, extra: []string{"--apps", apps, "--login-max-failures", "1000"}})
	st := c.mustStatus()
	worker := "http://" + st.Workers[0].HTTPAddr
	base := "http://" + c.public

	// Pages: through the proxy the user gets a browser; straight to the
	// worker, the same URL is refused.
	u := newUser(t, base)
	hops := u.open("/typing")
	last := hops[len(hops)-1]
	if last.status != 200 || !strings.Contains(last.path, "/b/") {
		t.Fatalf("through the proxy: %+v", hops)
	}
	direct := newUser(t, worker)
	for _, path := range []string{"/typing", last.path, "/secure/login"} {
		if h := direct.get(path); h.status != http.StatusForbidden || !strings.Contains(h.body, notRelayed) {
			t.Fatalf("GET %s straight to the worker: %d %.300s", path, h.status, h.body)
		}
	}
	// Forged hop headers do not help either.
	req, _ := http.NewRequest("GET", worker+last.path, nil)
	req.Header.Set("X-CB-Hop", fmt.Sprintf("v1.%d.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", time.Now().Unix()))
	req.Header.Set("X-Forwarded-For", "203.0.113.1")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("forged hop: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// WebSocket: the proxy relays it, the worker refuses it directly even
	// with the user's cookies.
	conn := dialSocket(t, u, "ws://"+c.public+last.path+"/ws")
	if m, err := readText(t, conn); err != nil || m["t"] != "hello" {
		t.Fatalf("socket through the proxy: %v %v", m, err)
	}
	h := http.Header{"Origin": {base}}
	pub, _ := url.Parse(base + last.path)
	for _, ck := range u.c.Jar.Cookies(pub) {
		h.Add("Cookie", ck.String())
	}
	ws, resp, err := websocket.DefaultDialer.DialContext(ctxT(t, 10*time.Second), "ws://"+st.Workers[0].HTTPAddr+last.path+"/ws", h)
	if err == nil {
		ws.Close()
		t.Fatal("socket straight to the worker was accepted")
	}
	if resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("socket straight to the worker: %v %v", resp, err)
	}
	resp.Body.Close()

	// Logins straight to the worker, each with a new forwarded address:
	// refused before any password is checked.
	for i := 0; i < 35; i++ {
		req, _ := http.NewRequest("POST", worker+"/secure/login", strings.NewReader(url.Values{"user": {"x"}, "password": {"y"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i+1))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), notRelayed) {
			t.Fatalf("login %d straight to the worker: %d %.300s", i+1, resp.StatusCode, b)
		}
	}

	// 35 failed logins through the proxy, each claiming another address:
	// the worker sees the real one (loopback), which gets locked.
	lu := newUser(t, base)
	m := csrfField.FindStringSubmatch(lu.get("/secure/login").body)
	if m == nil {
		t.Fatal("no CSRF token on the login page")
	}
	var statuses []int
	var lastBody string
	for i := 0; i < 35; i++ {
		req, _ := http.NewRequest("POST", base+"/secure/login", strings.NewReader(url.Values{"csrf": {m[1]},
			"user": {fmt.Sprintf("nobody%d", i)}, "password": {"wrong"}, "next": {"/secure"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i+1))
		resp, err := lu.c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		statuses = append(statuses, resp.StatusCode)
		lastBody = string(b)
	}
	if statuses[0] != http.StatusUnauthorized || statuses[34] != http.StatusTooManyRequests ||
		!strings.Contains(lastBody, "Too many failed attempts") {
		t.Fatalf("35 failed logins with forged X-Forwarded-For: statuses %v, last body %.300s", statuses, lastBody)
	}

	// The worker's /metrics: refused without the token, served with it.
	for _, tc := range []struct {
		auth   string
		status int
	}{{"", 401}, {"Bearer " + c.token, 401}, {"Bearer " + c.metricsToken(), 200}} {
		req, _ := http.NewRequest("GET", worker+"/metrics", nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || tc.status == 401 && !strings.Contains(string(b), "metrics token") {
			t.Errorf("worker /metrics with %q: %d %.200s, want %d", tc.auth, resp.StatusCode, b, tc.status)
		}
	}
	// Health checks stay open to tooling.
	waitHTTP(t, worker+"/healthz", 5*time.Second)
}

// TestSecondMasterSamePublicPort: with --proxies 0 the public port is not
// shared: a second master on the same --listen fails to start and says why,
// and the first keeps answering every request.
func TestSecondMasterSamePublicPort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	c := startCluster(t, clusterOpts{proxies: 0, workers: 0})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "master", "--data-dir", filepath.Join(t.TempDir(), "data"), "--rmi", anyPort,
		"--gossip", "127.0.0.1:0", "--admin", anyPort, "--listen", c.public, "--proxies", "0")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the second master kept running on the same public port:\n%s", tail2(out))
	}
	if err == nil || !strings.Contains(string(out), "--listen "+c.public+" is already in use") {
		t.Fatalf("second master: %v\n%s", err, tail2(out))
	}
	for i := 0; i < 20; i++ {
		resp, err := http.Get("http://" + c.public + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), c.mustStatus().MasterID) {
			t.Fatalf("request %d answered by someone else: %d %s", i, resp.StatusCode, b)
		}
	}
}

func tail2(b []byte) string {
	s := string(b)
	if len(s) > 3000 {
		s = s[len(s)-3000:]
	}
	return s
}

// signAsProxy makes u's requests carry a valid proxy hop signature, as an
// operator's tooling holding the cluster secret could: for tests that must
// reach one particular worker.
func (c *cluster) signAsProxy(u *user) *user {
	c.t.Helper()
	sec, err := secret.Load(filepath.Join(c.dir, "data", "cluster.secret"))
	if err != nil {
		c.t.Fatal(err)
	}
	u.c.Transport = hopSigner{key: secret.Derive(sec, "http-hop", hophdr.KeyLen)}
	return u
}

type hopSigner struct{ key []byte }

func (s hopSigner) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(hophdr.Header, hophdr.Sign(s.key, time.Now(), hophdr.Fields{Method: r.Method, Host: r.URL.Host, URI: r.URL.RequestURI()}))
	return http.DefaultTransport.RoundTrip(r)
}
