package sessions

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/cdpticket"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/auth"
)

// TestParseQuery: the one-step URL's parameters, read as the POST body's
// fields are, and every bad one named.
func TestParseQuery(t *testing.T) {
	for _, tc := range []struct {
		name, query string
		want        Request
		field, msg  string // the error's; "" = none
	}{
		{"defaults", "app=hello&token=x", Request{App: "hello", Timeout: DefaultTimeout, IdleTimeout: DefaultIdleTimeout}, "", ""},
		{"app with a slash", "app=%2Fhello", Request{App: "hello", Timeout: DefaultTimeout, IdleTimeout: DefaultIdleTimeout}, "", ""},
		{"every setting", "app=hello&timeout=10m&idleTimeout=90000&keepAlive=30s&width=1280&height=720",
			Request{App: "hello", Timeout: 10 * time.Minute, IdleTimeout: 90 * time.Second, KeepAlive: 30 * time.Second, Viewport: &Viewport{1280, 720}}, "", ""},
		{"keep-alive 0", "app=hello&keepAlive=0", Request{App: "hello", Timeout: DefaultTimeout, IdleTimeout: DefaultIdleTimeout}, "", ""},

		{"no app", "token=x", Request{}, "app", "required in the query"},
		{"blank app", "app=+", Request{}, "app", "required"},
		{"unknown parameter", "app=hello&idle_timeout=5m", Request{}, "idle_timeout", "unknown parameter"},
		{"twice", "app=hello&timeout=1m&timeout=2m", Request{}, "timeout", "more than once"},
		{"empty timeout", "app=hello&timeout=", Request{}, "timeout", "empty"},
		{"timeout not a duration", "app=hello&timeout=soon", Request{}, "timeout", `"soon" is not a duration`},
		{"negative timeout", "app=hello&timeout=-1s", Request{}, "timeout", "must not be negative"},
		{"sub-second timeout", "app=hello&timeout=500", Request{}, "timeout", "at least 1s"},
		{"absurd timeout", "app=hello&timeout=25h", Request{}, "timeout", "at most 24h0m0s"},
		{"absurd timeout in ms", "app=hello&timeout=86400001", Request{}, "timeout", "at most 24h0m0s"},
		{"huge timeout in ms", "app=hello&timeout=99999999999999999999", Request{}, "timeout", "is not a duration"},
		{"zero idle timeout", "app=hello&idleTimeout=0s", Request{}, "idleTimeout", "at least 1s"},
		{"negative keep-alive", "app=hello&keepAlive=-5", Request{}, "keepAlive", "must not be negative"},
		{"width alone", "app=hello&width=800", Request{}, "height", "required with width"},
		{"height alone", "app=hello&height=600", Request{}, "width", "required with height"},
		{"narrow", "app=hello&width=50&height=600", Request{}, "width", "between 100 and 4096"},
		{"too tall", "app=hello&width=800&height=5000", Request{}, "height", "between 100 and 4096"},
		{"width not a number", "app=hello&width=big&height=600", Request{}, "width", "whole number of CSS pixels"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := url.ParseQuery(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ParseQuery(q)
			var fe *FieldError
			switch {
			case tc.field == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.field == "":
				if got.App != tc.want.App || got.Timeout != tc.want.Timeout || got.IdleTimeout != tc.want.IdleTimeout ||
					got.KeepAlive != tc.want.KeepAlive || (got.Viewport == nil) != (tc.want.Viewport == nil) ||
					(got.Viewport != nil && *got.Viewport != *tc.want.Viewport) {
					t.Errorf("got %+v (viewport %v), want %+v (viewport %v)", got, got.Viewport, tc.want, tc.want.Viewport)
				}
			case !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(err.Error(), tc.msg):
				t.Errorf("error %v, want field %q containing %q", err, tc.field, tc.msg)
			}
		})
	}
}

// TestOpenCDP: a one-step request opens a session with the defaults (it
// ends when its client leaves: no keep-alive) and answers its CDP path;
// the token may be in the query or the Authorization header; refusals
// carry the API's statuses, fields and Retry-After.
func TestOpenCDP(t *testing.T) {
	f := newFixture(t, "", 2, nil, nil)
	ctx := context.Background()
	res := f.svc.OpenCDP(ctx, wire.SessionOpen{Query: "app=hello&token=" + botTok, ClientIP: "192.0.2.7", RequestID: "r1"})
	if res.Status != 0 || res.App != "hello" || res.InstanceID != "w1.i1" || res.BrowserID != "b1" || res.ID == "" {
		t.Fatalf("opened %+v", res)
	}
	u, err := url.ParseRequestURI(res.Path)
	if err != nil || u.Path != "/hello/a/w1.i1/b/b1/cdp" {
		t.Fatalf("path %q", res.Path)
	}
	cl, ok := cdpticket.Check(testKey, "w1.i1", "b1", u.Query().Get("ticket"), start.Add(time.Minute))
	if !ok || cl.Session != res.ID || cl.Owner != auth.AutomationPrincipal || cl.KeepAlive != 0 || cl.Idle != DefaultIdleTimeout || cl.Width != 0 {
		t.Errorf("ticket claims %+v %v: want the defaults, no keep-alive", cl, ok)
	}
	f.host.mu.Lock()
	pl := f.host.places[0]
	f.host.mu.Unlock()
	if pl.ClientIP != "192.0.2.7" || !pl.New || pl.User != auth.AutomationPrincipal {
		t.Errorf("place request %+v", pl)
	}
	if vs := f.list(botTok, ""); len(vs) != 1 || vs[0].ID != res.ID || vs[0].KeepAlive != "0s" {
		t.Errorf("listed %+v", vs)
	}

	// The header, and the settings from the query.
	res2 := f.svc.OpenCDP(ctx, wire.SessionOpen{Query: "app=hello&timeout=1m&keepAlive=30s&width=600&height=400", Authorization: "Bearer " + f.alice})
	if res2.Status != 403 || res2.Field != "app" {
		t.Errorf("alice on hello: %+v", res2)
	}
	res2 = f.svc.OpenCDP(ctx, wire.SessionOpen{Query: "app=hello&timeout=1m&keepAlive=30s&width=600&height=400", Authorization: "Bearer " + sharedTok})
	u2, _ := url.ParseRequestURI(res2.Path)
	cl2, ok := cdpticket.Check(testKey, res2.InstanceID, res2.BrowserID, u2.Query().Get("ticket"), start)
	if res2.Status != 0 || !ok || cl2.KeepAlive != 30*time.Second || cl2.Width != 600 || cl2.Height != 400 || !cl2.Expires.Equal(start.Add(time.Minute)) {
		t.Errorf("with settings: %+v, claims %+v", res2, cl2)
	}

	for _, tc := range []struct {
		name       string
		req        wire.SessionOpen
		status     int
		field, msg string
		retryAfter int64
		challenge  bool
	}{
		{"no token", wire.SessionOpen{Query: "app=hello"}, 401, "", "missing token", 0, true},
		{"not a bearer header", wire.SessionOpen{Query: "app=hello", Authorization: "Basic eDp5"}, 401, "", "missing token", 0, true},
		{"a wrong token", wire.SessionOpen{Query: "app=hello&token=nope"}, 401, "", "invalid token", 0, true},
		{"the header wins over the query", wire.SessionOpen{Query: "app=hello&token=" + botTok, Authorization: "Bearer nope"}, 401, "", "invalid token", 0, true},
		{"the jobs token", wire.SessionOpen{Query: "app=hello&token=" + jobsTok}, 403, "", "automation.token", 0, false},
		{"an unknown app", wire.SessionOpen{Query: "app=nowhere&token=" + botTok}, 404, "app", "no application is mounted at /nowhere", 0, false},
		{"an app it may not use", wire.SessionOpen{Query: "app=alices&token=" + botTok}, 403, "app", "may not open sessions", 0, false},
		{"a disabled app", wire.SessionOpen{Query: "app=off&token=" + botTok}, 409, "app", "disabled", 0, false},
		{"no app", wire.SessionOpen{Query: "token=" + botTok}, 400, "app", "required", 0, false},
		{"a bad field", wire.SessionOpen{Query: "app=hello&width=20&height=400&token=" + botTok}, 400, "width", "between 100 and 4096", 0, false},
		{"a bad query", wire.SessionOpen{Query: "app=hello&token=%zz"}, 400, "query", "invalid URL escape", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := f.svc.OpenCDP(ctx, tc.req)
			if got.Status != tc.status || got.Field != tc.field || !strings.Contains(got.Error, tc.msg) || got.RetryAfter != tc.retryAfter ||
				(got.Challenge != "") != tc.challenge || got.Path != "" || got.ID != "" {
				t.Errorf("%+v; want %d, field %q, error containing %q, Retry-After %d, challenge %v", got, tc.status, tc.field, tc.msg, tc.retryAfter, tc.challenge)
			}
		})
	}
	// The automation token's second session reaches its maximum: the
	// third waits until the first ends.
	if r := f.svc.OpenCDP(ctx, wire.SessionOpen{Query: "app=hello&token=" + botTok}); r.Status != 0 {
		t.Fatalf("second: %+v", r)
	}
	if r := f.svc.OpenCDP(ctx, wire.SessionOpen{Query: "app=hello&token=" + botTok}); r.Status != 429 || r.RetryAfter != 900 ||
		!strings.Contains(r.Error, "at most 2 automation sessions") {
		t.Errorf("over the maximum: %+v, want 429, Retry-After 900 (the first ends in 15m)", r)
	}
	if got := counter(t, f.svc.m.cdpOpens.WithLabelValues("opened")); got != 3 {
		t.Errorf("opened metric %v", got)
	}
	if got := counter(t, f.svc.m.cdpOpens.WithLabelValues("refused")); got != 13 {
		t.Errorf("refused metric %v, want 13", got)
	}
}

// TestOpenCDPQueue: a one-step request that finds no browser and a full
// queue is refused with 429 and Retry-After, before any WebSocket.
func TestOpenCDPQueue(t *testing.T) {
	host := &fakeHost{instances: map[string]bool{}, apps: map[string]fakeApp{"hello": {users: []string{auth.AutomationPrincipal}}},
		queueMax: 1, queueWait: time.Hour}
	f := newFixture(t, "", 0, host, nil)
	host.mu.Lock()
	host.busy = 1 << 30
	host.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	waiter := make(chan wire.SessionOpened, 1)
	go func() { waiter <- f.svc.OpenCDP(ctx, wire.SessionOpen{Query: "app=hello&token=" + botTok}) }()
	testutil.Eventually(t, 10*time.Second, testutil.Cond("one waiting", func() bool { return f.svc.Waiting() == 1 }))
	got := f.svc.OpenCDP(context.Background(), wire.SessionOpen{Query: "app=hello&token=" + botTok})
	if got.Status != 429 || got.RetryAfter != 5 || !strings.Contains(got.Error, "already wait") {
		t.Errorf("with the queue full: %+v", got)
	}
	cancel() // the waiting client leaves
	if w := <-waiter; w.Status == 0 {
		t.Errorf("a request whose client left opened %+v", w)
	}
	if n := f.svc.Open(); n != 0 {
		t.Errorf("%d sessions open", n)
	}
}

// TestUnconnected: a one-step session the proxy could not connect is
// ended at its word (its instance closed); an unknown one is no error.
func TestUnconnected(t *testing.T) {
	f := newFixture(t, "", 0, nil, nil)
	res := f.svc.OpenCDP(context.Background(), wire.SessionOpen{Query: "app=hello&token=" + botTok})
	if res.Status != 0 {
		t.Fatalf("open: %+v", res)
	}
	if err := f.svc.Unconnected(context.Background(), res.ID); err != nil {
		t.Fatal(err)
	}
	if closed := f.host.closedList(); len(closed) != 1 || closed[0] != res.InstanceID {
		t.Errorf("closed %v", closed)
	}
	if n := len(f.list(botTok, "")); n != 0 {
		t.Errorf("%d sessions listed", n)
	}
	if got := counter(t, f.svc.m.ended.WithLabelValues(ReasonUnconnected)); got != 1 {
		t.Errorf("ended{unconnected} %v", got)
	}
	if err := f.svc.Unconnected(context.Background(), res.ID); err != nil {
		t.Errorf("again: %v", err)
	}
	// A client that left while its browser was placed: the session is
	// placed (placement is not cut short) and ended at once.
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if res := f.svc.OpenCDP(gone, wire.SessionOpen{Query: "app=hello&token=" + botTok}); res.Status != 408 || res.Path != "" {
		t.Errorf("a client gone: %+v", res)
	}
	if closed := f.host.closedList(); len(closed) != 2 {
		t.Errorf("closed %v: the gone client's instance is not closed", closed)
	}
	if n := len(f.list(botTok, "")); n != 0 {
		t.Errorf("%d sessions listed after the client left", n)
	}
	// A worker that cannot be reached keeps it (it ends at its time).
	res = f.svc.OpenCDP(context.Background(), wire.SessionOpen{Query: "app=hello&token=" + botTok})
	f.host.setCloseErr(errors.New("worker unreachable"))
	if err := f.svc.Unconnected(context.Background(), res.ID); err == nil || !strings.Contains(err.Error(), "worker unreachable") {
		t.Errorf("unreachable worker: %v", err)
	}
}
