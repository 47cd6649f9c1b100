package master

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/cdpticket"
	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/secret"
	"github.com/cloudbrowser-go/cloudbrowser/internal/session"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// TestOneStepSessionOverRMI: a proxy process asks the master for a
// one-step CDP session over RMI (Router.OpenSession): the real placer puts
// it on a worker, the answer is its CDP path with a ticket the workers
// accept, it is listed like any session, and Router.CloseSession ends it
// on its worker. A refusal is an answer, not an error; a worker may not
// ask.
func TestOneStepSessionOverRMI(t *testing.T) {
	m, srv := sessionsMaster(t, nil)
	w := addWorker(t, m, "w1")
	proxy := contract.RouterClient{C: dialMaster(t, m, "proxy-1", secret.RoleProxy, secret.RoleKey(testSecret, secret.RoleProxy))}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	res, err := proxy.OpenSession(ctx, wire.SessionOpen{Query: "app=multi&token=bottok&width=800&height=600", ClientIP: "192.0.2.1", RequestID: "r1"})
	if err != nil || res.Status != 0 {
		t.Fatalf("open: %+v %v", res, err)
	}
	u, err := url.ParseRequestURI(res.Path)
	if err != nil || u.Path != "/multi/a/"+res.InstanceID+"/b/"+res.BrowserID+"/cdp" || !m.workers.Known(res.InstanceID) {
		t.Fatalf("path %q (instance known: %v)", res.Path, m.workers.Known(res.InstanceID))
	}
	key := session.Key(testSecret, cdpticket.Purpose)
	cl, ok := cdpticket.Check(key, res.InstanceID, res.BrowserID, u.Query().Get("ticket"), clockOf(m).Now())
	if !ok || cl.Session != res.ID || cl.KeepAlive != 0 || cl.Width != 800 || cl.Height != 600 {
		t.Errorf("ticket %+v %v", cl, ok)
	}
	if st, body := call(t, srv, "bottok", "GET", "/api/v1/sessions/"+res.ID, nil); st != http.StatusOK || !strings.Contains(body, `"keepAlive": "0s"`) {
		t.Errorf("the session in the API: %d %s", st, body)
	}

	for _, tc := range []struct {
		name, query string
		status      int
		field       string
	}{
		{"a wrong token", "app=multi&token=nope", http.StatusUnauthorized, ""},
		{"an unknown app", "app=nope&token=bottok", http.StatusNotFound, "app"},
		{"a bad setting", "app=multi&token=bottok&keepAlive=forever", http.StatusBadRequest, "keepAlive"},
	} {
		got, err := proxy.OpenSession(ctx, wire.SessionOpen{Query: tc.query})
		if err != nil || got.Status != tc.status || got.Field != tc.field || got.Error == "" {
			t.Errorf("%s: %+v %v, want %d naming %q", tc.name, got, err, tc.status, tc.field)
		}
	}

	if err := proxy.CloseSession(ctx, res.ID); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	closed := slices.Clone(w.closeAsks)
	w.mu.Unlock()
	if !slices.Equal(closed, []string{res.InstanceID}) {
		t.Errorf("instances closed on the worker: %v", closed)
	}
	if st, body := call(t, srv, "bottok", "GET", "/api/v1/sessions/"+res.ID, nil); st != http.StatusNotFound {
		t.Errorf("after CloseSession: %d %s", st, body)
	}
	if st, body := call(t, srv, "admintok", "GET", "/metrics", nil); st != http.StatusOK ||
		!strings.Contains(body, `cloudbrowser_master_automation_sessions_ended_total{reason="unconnected"} 1`) ||
		!strings.Contains(body, `cloudbrowser_master_automation_cdp_opens_total{result="opened"} 1`) ||
		!strings.Contains(body, `cloudbrowser_master_automation_cdp_opens_total{result="refused"} 3`) {
		t.Errorf("metrics: %d\n%s", st, grepLines(body, "automation"))
	}

	// The Router is the proxies': a worker may not open sessions.
	wc := contract.RouterClient{C: dialMaster(t, m, "w-x", secret.RoleWorker, secret.RoleKey(testSecret, secret.RoleWorker))}
	if _, err := wc.OpenSession(ctx, wire.SessionOpen{Query: "app=multi&token=bottok"}); !errors.Is(err, rmi.ErrForbidden) {
		t.Errorf("a worker opening a session: %v, want ErrForbidden", err)
	}
}
