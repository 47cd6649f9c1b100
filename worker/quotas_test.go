package worker

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/httpserve"
)

func setQuotas(w *Worker, q wire.Quotas) { w.quota.limits.Store(&q) }

// TestBrowserQuota: browsers per user and per client address on a worker,
// across instances, whatever the user; closing a browser or its instance
// frees the place.
func TestBrowserQuota(t *testing.T) {
	type step struct {
		op       string // "new" (in instance inst), "close" (the n-th made), "close-instance"
		inst     int
		user, ip string
		n        int
		refused  string // quota name expected ("" = accepted)
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"per user, across instances", []step{
			{op: "new", inst: 0, user: "alice", ip: "192.0.2.1"},
			{op: "new", inst: 1, user: "alice", ip: "192.0.2.2"},
			{op: "new", inst: 1, user: "alice", ip: "192.0.2.3", refused: wire.QuotaBrowsersPerUser},
			{op: "new", inst: 0, user: "bob", ip: "192.0.2.3"},
		}},
		{"per address, whatever the identity", []step{
			{op: "new", inst: 0, user: "a", ip: "192.0.2.1"},
			{op: "new", inst: 0, user: "b", ip: "192.0.2.1"},
			{op: "new", inst: 1, user: "c", ip: "192.0.2.1"},
			{op: "new", inst: 1, user: "d", ip: "192.0.2.1", refused: wire.QuotaBrowsersPerIP},
			{op: "new", inst: 1, user: "d", ip: "192.0.2.9"},
		}},
		{"closing a browser frees its place", []step{
			{op: "new", inst: 0, user: "alice", ip: "192.0.2.1"},
			{op: "new", inst: 0, user: "alice", ip: "192.0.2.1"},
			{op: "new", inst: 0, user: "alice", ip: "192.0.2.1", refused: wire.QuotaBrowsersPerUser},
			{op: "close", n: 0},
			{op: "new", inst: 0, user: "alice", ip: "192.0.2.1"},
		}},
		{"closing an instance frees its browsers' places", []step{
			{op: "new", inst: 0, user: "a", ip: "192.0.2.1"},
			{op: "new", inst: 0, user: "b", ip: "192.0.2.1"},
			{op: "new", inst: 0, user: "c", ip: "192.0.2.1"},
			{op: "new", inst: 1, user: "d", ip: "192.0.2.1", refused: wire.QuotaBrowsersPerIP},
			{op: "close-instance", inst: 0},
			{op: "new", inst: 1, user: "d", ip: "192.0.2.1"},
			{op: "new", inst: 1, user: "e", ip: "192.0.2.1"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, _ := newTestWorker(t)
			setQuotas(w, wire.Quotas{BrowsersPerUser: 2, BrowsersPerIP: 3})
			ctx := context.Background()
			app := wire.App{Name: "M", MountPoint: "multi", Entry: "https://example.test/", Strategy: wire.MultiInstance}
			if err := w.apps.AddApplication(ctx, app); err != nil {
				t.Fatal(err)
			}
			var insts []*instance
			for _, iid := range []string{"w-test.quotaquota01", "w-test.quotaquota02"} {
				if err := w.apps.CreateInstance(ctx, wire.CreateInstance{App: app, InstanceID: iid, Owner: "alice"}); err != nil {
					t.Fatal(err)
				}
				in, _ := w.instances.get(iid)
				insts = append(insts, in)
			}
			var made []*vbrowser
			for i, s := range tc.steps {
				switch s.op {
				case "close":
					w.browsers.closeBrowser(made[s.n].inst, made[s.n], "test")
					continue
				case "close-instance":
					w.instances.close(ctx, insts[s.inst].info.ID, "test")
					continue
				}
				vb, err := w.browsers.newBrowserFrom(ctx, insts[s.inst], s.user, s.ip, false)
				var qe *httpserve.QuotaError
				switch {
				case s.refused == "" && err != nil:
					t.Fatalf("step %d (%s from %s): %v", i, s.user, s.ip, err)
				case s.refused == "":
					made = append(made, vb)
				case !errors.As(err, &qe) || qe.Limit != s.refused || !strings.Contains(qe.Msg, "Close some"):
					t.Fatalf("step %d (%s from %s): %v, want the %s quota", i, s.user, s.ip, err, s.refused)
				}
			}
		})
	}
}

// The master's OpenBrowserFor carries the refusal with its code and words.
func TestOpenBrowserQuotaCode(t *testing.T) {
	w, _ := newTestWorker(t)
	setQuotas(w, wire.Quotas{BrowsersPerIP: 1})
	ctx := context.Background()
	app, _ := w.catalog.app("hello")
	for _, iid := range []string{"w-test.openopenopen1", "w-test.openopenopen2"} {
		if err := w.apps.CreateInstance(ctx, wire.CreateInstance{App: app, InstanceID: iid}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.apps.OpenBrowserFor(ctx, wire.OpenBrowser{InstanceID: "w-test.openopenopen1", User: "a", ClientIP: "192.0.2.1"}); err != nil {
		t.Fatal(err)
	}
	_, err := w.apps.OpenBrowserFor(ctx, wire.OpenBrowser{InstanceID: "w-test.openopenopen2", User: "b", ClientIP: "192.0.2.1"})
	var we *wire.Error
	if !errors.As(err, &we) || we.Code != wire.CodeQuota || !strings.Contains(we.Msg, "Your network address already has 1 virtual browsers") {
		t.Fatalf("second browser from the address: %v", err)
	}
}

// TestSocketQuota: the (N+1)-th socket on a browser, and past the
// per-address limit, is told why and closed; one leaving frees its place.
func TestSocketQuota(t *testing.T) {
	for _, tc := range []struct {
		name   string
		q      wire.Quotas
		want   string
		refuse int // the socket (0-based) refused
	}{
		{"per browser", wire.Quotas{SocketsPerBrowser: 3}, "already has 3 windows connected", 3},
		{"per address", wire.Quotas{SocketsPerIP: 2}, "Your network address already has 2 windows", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newHubFixture(t, httpserve.RoleReader)
			setQuotas(f.w, tc.q)
			var open []*websocket.Conn
			for range tc.refuse {
				conn, _ := f.dial(t, true)
				open = append(open, conn)
			}
			refused := f.dialRaw(t)
			m, err := nextText(t, refused)
			if err != nil || m["t"] != "closed" || !strings.Contains(m["reason"].(string), tc.want) {
				t.Fatalf("socket past the limit: %v %v", m, err)
			}
			_, _, err = refused.ReadMessage()
			var ce *websocket.CloseError
			if !errors.As(err, &ce) || ce.Code != websocket.ClosePolicyViolation {
				t.Fatalf("close of the refused socket: %v", err)
			}
			// One leaves: a new one gets in (the server notices the close
			// asynchronously, so wait for it).
			open[0].Close()
			testutil.Eventually(t, 10*time.Second, testutil.Cond("f.browser(t).hub.Count() == tc.refuse-1", func() bool { return f.browser(t).hub.Count() == tc.refuse-1 }))
			f.dial(t, true)
		})
	}
}

func (f *hubFixture) dialRaw(t *testing.T) *websocket.Conn {
	t.Helper()
	h := http.Header{"Origin": {f.srv.URL}, "Cookie": {f.cookie.String()}}
	conn, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(f.srv.URL, "http")+f.loc+"/ws", h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func (f *hubFixture) browser(t *testing.T) *vbrowser {
	in, _ := f.w.instances.get(f.iid)
	bs := in.browserList()
	if len(bs) != 1 {
		t.Fatalf("%d browsers", len(bs))
	}
	return bs[0]
}
