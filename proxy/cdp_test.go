package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/urlkind"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// fakeSessions is the master as the one-step URL asks it: it answers
// with res (or err) and records the requests and the sessions ended.
type fakeSessions struct {
	mu     sync.Mutex
	res    wire.SessionOpened
	err    error
	opens  []wire.SessionOpen
	closed []string
}

func (f *fakeSessions) OpenSession(ctx context.Context, req wire.SessionOpen) (wire.SessionOpened, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.opens = append(f.opens, req)
	return f.res, f.err
}

func (f *fakeSessions) CloseSession(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = append(f.closed, id)
	return nil
}

func (f *fakeSessions) state() ([]wire.SessionOpen, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]wire.SessionOpen(nil), f.opens...), append([]string(nil), f.closed...)
}

// opened is a session as the master answers it, on the test's browser.
func opened() wire.SessionOpened {
	return wire.SessionOpened{ID: "s1", App: "chat", InstanceID: testInstance, BrowserID: testBrowser,
		Path: "/chat/a/" + testInstance + "/b/" + testBrowser + "/cdp?ticket=T1%2Bx"}
}

// seenWorker records what reached the worker and hands the upgrade to h.
type seenWorker struct {
	h    http.Handler
	seen chan *http.Request
}

func (s seenWorker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.seen <- r.Clone(context.Background())
	s.h.ServeHTTP(w, r)
}

// TestCDPOneStep: an upgrade to /cdp?app=…&token=… asks the master for a
// session with the request's query, header and address, and is relayed
// to the session's CDP endpoint: its ticket, not the client's token,
// reaches the worker.
func TestCDPOneStep(t *testing.T) {
	echo := newWSEcho()
	w := seenWorker{h: echo, seen: make(chan *http.Request, 4)}
	fr := &fakeRouter{route: startWorker(t, w)}
	fs := &fakeSessions{res: opened()}
	_, srv := startProxy(t, Config{Router: fr, Sessions: fs})

	c := dialWS(t, wsURL(srv.URL, "/cdp?app=chat&token=tok&timeout=1m"), http.Header{"Authorization": {"Bearer hdr"}})
	if err := c.WriteMessage(websocket.TextMessage, []byte(`{"id":1,"method":"Browser.getVersion"}`)); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := c.ReadMessage(); err != nil || string(msg) != `{"id":1,"method":"Browser.getVersion"}` {
		t.Fatalf("echo: %q %v", msg, err)
	}
	r := <-w.seen
	if r.RequestURI != "/chat/a/"+testInstance+"/b/"+testBrowser+"/cdp?ticket=T1%2Bx" || r.URL.Query().Get("ticket") != "T1+x" {
		t.Errorf("the worker got %q", r.RequestURI)
	}
	if r.Header.Get("Authorization") != "" || strings.Contains(r.RequestURI, "tok") {
		t.Errorf("the client's token reached the worker: %q %q", r.Header.Get("Authorization"), r.RequestURI)
	}
	opens, closed := fs.state()
	if len(closed) != 0 {
		t.Errorf("a connected session was ended by the proxy: %v", closed)
	}
	if len(opens) != 1 || opens[0].Query != "app=chat&token=tok&timeout=1m" || opens[0].Authorization != "Bearer hdr" ||
		opens[0].ClientIP != "127.0.0.1" || opens[0].RequestID == "" {
		t.Errorf("asked the master %+v", opens)
	}
	fr.mu.Lock()
	targets := fr.targets
	fr.mu.Unlock()
	if len(targets) != 1 || targets[0] != (urlkind.Target{Kind: urlkind.KindResource, App: "chat", InstanceID: testInstance, BrowserID: testBrowser, Rest: "cdp"}) {
		t.Errorf("routed %+v", targets)
	}
	c.Close()
	<-echo.ended
	if _, closed = fs.state(); len(closed) != 0 {
		t.Errorf("a connected session was ended by the proxy: %v", closed)
	}
}

// upgradeGet sends GET path with (or without) the WebSocket upgrade
// headers and returns the answer.
func upgradeGet(t *testing.T, base, path string, upgrade bool) (*http.Response, map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+path, nil)
	if upgrade {
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Sec-WebSocket-Version", "13")
		req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	}
	resp, err := client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp, body
}

// TestCDPRefusals: what the master refuses, and a master that cannot be
// asked, are answered as plain HTTP before any upgrade, with the
// sessions API's body, Retry-After and WWW-Authenticate; a request
// without an upgrade is told the URL is a WebSocket endpoint.
func TestCDPRefusals(t *testing.T) {
	for _, tc := range []struct {
		name       string
		res        wire.SessionOpened
		err        error
		upgrade    bool
		status     int
		field, msg string
		retryAfter string
		challenge  string
	}{
		{"not an upgrade", opened(), nil, false, 400, "", "WebSocket endpoint", "", ""},
		{"no token", wire.SessionOpened{Status: 401, Error: "missing token", Challenge: `Bearer realm="cloudbrowser"`}, nil, true, 401, "", "missing token", "", `Bearer realm="cloudbrowser"`},
		{"not allowed", wire.SessionOpened{Status: 403, Field: "app", Error: "app: may not"}, nil, true, 403, "app", "may not", "", ""},
		{"unknown app", wire.SessionOpened{Status: 404, Field: "app", Error: "app: no application"}, nil, true, 404, "app", "no application", "", ""},
		{"bad field", wire.SessionOpened{Status: 400, Field: "width", Error: "width: must be between"}, nil, true, 400, "width", "must be between", "", ""},
		{"over the limit", wire.SessionOpened{Status: 429, Error: "at most 10", RetryAfter: 42}, nil, true, 429, "", "at most 10", "42", ""},
		{"queue full", wire.SessionOpened{Status: 429, Error: "already wait", RetryAfter: 5}, nil, true, 429, "", "already wait", "5", ""},
		{"master unreachable", wire.SessionOpened{}, MasterError(rmi.ErrClosed), true, 503, "", "master could not be reached", "5", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fr := &fakeRouter{route: startWorker(t, newWSEcho())}
			fs := &fakeSessions{res: tc.res, err: tc.err}
			_, srv := startProxy(t, Config{Router: fr, Sessions: fs})
			resp, body := upgradeGet(t, srv.URL, "/cdp?app=chat", tc.upgrade)
			msg, _ := body["error"].(string)
			field, _ := body["field"].(string)
			if resp.StatusCode != tc.status || field != tc.field || !strings.Contains(msg, tc.msg) ||
				resp.Header.Get("Retry-After") != tc.retryAfter || resp.Header.Get("WWW-Authenticate") != tc.challenge {
				t.Errorf("%d %v (Retry-After %q, WWW-Authenticate %q); want %d, field %q, error containing %q, Retry-After %q",
					resp.StatusCode, body, resp.Header.Get("Retry-After"), resp.Header.Get("WWW-Authenticate"), tc.status, tc.field, tc.msg, tc.retryAfter)
			}
			if fr.calls.Load() != 0 {
				t.Error("a refused request was routed")
			}
			if opens, _ := fs.state(); tc.upgrade != (len(opens) == 1) {
				t.Errorf("asked the master %d times", len(opens))
			}
		})
	}

	t.Run("no master", func(t *testing.T) { // a proxy without one (benchmarks)
		_, srv := startProxy(t, Config{Router: &fakeRouter{}})
		if resp, _ := upgradeGet(t, srv.URL, "/cdp?app=chat&token=x", true); resp.StatusCode != http.StatusNotFound {
			t.Errorf("%d", resp.StatusCode)
		}
	})
	t.Run("below /cdp", func(t *testing.T) { // reserved, not the one-step URL
		fs := &fakeSessions{res: opened()}
		_, srv := startProxy(t, Config{Router: &fakeRouter{}, Sessions: fs})
		if resp, _ := upgradeGet(t, srv.URL, "/cdp/x?app=chat&token=x", true); resp.StatusCode != http.StatusNotFound {
			t.Errorf("%d", resp.StatusCode)
		}
		if opens, _ := fs.state(); len(opens) != 0 {
			t.Errorf("asked the master %+v", opens)
		}
	})
}

// TestCDPUnconnected: a session the proxy opened but could not connect
// its client to (no route, the worker unreachable or refusing) is ended
// at once; a master answer that is no Browser URL is not followed.
func TestCDPUnconnected(t *testing.T) {
	refusing := startWorker(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no valid ticket", http.StatusForbidden)
	}))
	for _, tc := range []struct {
		name   string
		res    wire.SessionOpened
		route  Route
		err    error
		status int
	}{
		{"worker gone", opened(), Route{}, ErrWorkerGone, http.StatusBadGateway},
		{"instance gone", opened(), Route{}, ErrUnknownInstance, http.StatusNotFound},
		{"master gone", opened(), Route{}, ErrMasterUnavailable, http.StatusServiceUnavailable},
		{"worker unreachable", opened(), Route{WorkerID: testWorker, Addr: testutil.RefusedAddr(t)}, nil, http.StatusBadGateway},
		{"worker refuses", opened(), refusing, nil, http.StatusForbidden},
		{"not a browser's path", wire.SessionOpened{ID: "s1", Path: "/admin/x"}, refusing, nil, http.StatusBadGateway},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fr := &fakeRouter{route: tc.route, err: tc.err}
			fs := &fakeSessions{res: tc.res}
			_, srv := startProxy(t, Config{Router: fr, Sessions: fs})
			resp, _ := upgradeGet(t, srv.URL, "/cdp?app=chat&token=x", true)
			if resp.StatusCode != tc.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if _, closed := fs.state(); len(closed) != 1 || closed[0] != "s1" {
				t.Errorf("sessions ended: %v, want [s1]", closed)
			}
		})
	}
}

// TestRemoteSessionsWithoutMaster: with no master connection the
// one-step URL's question fails fast as the master being unavailable.
func TestRemoteSessionsWithoutMaster(t *testing.T) {
	node, err := rmi.New(rmi.Config{Name: "p", Secret: []byte("0123456789abcdef0123456789abcdef")})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	r := &RemoteRouter{Client: node.NewClient(testutil.RefusedAddr(t), nil)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := r.OpenSession(ctx, wire.SessionOpen{Query: "app=x"}); !errors.Is(err, ErrMasterUnavailable) {
		t.Errorf("OpenSession = %v, want ErrMasterUnavailable", err)
	}
	if err := r.CloseSession(ctx, "s1"); !errors.Is(err, ErrMasterUnavailable) {
		t.Errorf("CloseSession = %v, want ErrMasterUnavailable", err)
	}
}
