package master

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/balance"
	"github.com/cloudbrowser-go/cloudbrowser/master/reach"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// registerAt registers a fake worker that advertises addr.
func registerAt(t *testing.T, m *Master, id, addr string) {
	t.Helper()
	node, err := rmi.New(rmi.Config{Name: id, Secret: []byte(testSecret)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := node.Dial(ctx, m.RMIAddr())
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeWorker{id: id, apps: map[string]wire.App{}, conn: c, node: node}
	info := wire.WorkerInfo{ID: id, HTTPAddr: addr, Gossip: id + ".g1"}
	if _, err := (contract.WorkerManagerClient{C: c}).Register(ctx, info, nil, rmi.Export(f)); err != nil {
		t.Fatal(err)
	}
}

// TestUnreachableWorkerReported: a worker that registers over its own RMI
// connection but advertises an address nobody can dial (a refused port,
// TEST-NET-1) is reported unreachable, with the error, in the status the
// admin API and the dashboard read; a worker answering at its address is
// reported reachable.
func TestUnreachableWorkerReported(t *testing.T) {
	m := startMaster(t, balance.LeastLoad)
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-CB-Worker", "w-good") // what a worker's /healthz says
	}))
	t.Cleanup(good.Close)
	refused := testutil.RefusedAddr(t)
	registerAt(t, m, "w-good", good.Listener.Addr().String())
	registerAt(t, m, "w-refused", refused)
	registerAt(t, m, "w-testnet", "192.0.2.1:8000") // RFC 5737: never routed

	srv := httptest.NewServer(m.admin.handler(false))
	t.Cleanup(srv.Close)
	want := map[string]string{"w-good": reach.StateReachable, "w-refused": reach.StateUnreachable, "w-testnet": reach.StateUnreachable}
	var got map[string]wire.WorkerStatus
	// The default probe timeout (5 s) bounds the TEST-NET-1 probe.
	testutil.Eventually(t, 60*time.Second, func() error {
		st, body := call(t, srv, "tok", "GET", "/api/v1/cluster", nil)
		if st != http.StatusOK {
			return fmt.Errorf("GET /api/v1/cluster: %d %s", st, body)
		}
		var cs wire.ClusterStatus
		if err := json.Unmarshal([]byte(body), &cs); err != nil {
			return err
		}
		got = map[string]wire.WorkerStatus{}
		for _, w := range cs.Workers {
			got[w.ID] = w
			if w.Reach == "" {
				return fmt.Errorf("%s not probed yet", w.ID)
			}
		}
		if len(got) != len(want) {
			return fmt.Errorf("%d workers, want %d", len(got), len(want))
		}
		return nil
	})
	for id, state := range want {
		w := got[id]
		if w.Reach != state || w.State != "connected" || w.ReachChecked.IsZero() {
			t.Errorf("%s: state %q reach %q (%q) checked %v, want connected and %s", id, w.State, w.Reach, w.ReachError, w.ReachChecked, state)
		}
		if unreachable := state == reach.StateUnreachable; unreachable != (w.ReachError != "") || (unreachable && !strings.Contains(w.ReachError, w.HTTPAddr)) {
			t.Errorf("%s: reach error %q: want one naming %s exactly when unreachable", id, w.ReachError, w.HTTPAddr)
		}
	}
	if e := got["w-refused"].ReachError; !strings.Contains(e, "connection refused") {
		t.Errorf("w-refused: error %q, want connection refused", e)
	}
}
