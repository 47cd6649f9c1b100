package master

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/balance"
	"github.com/cloudbrowser-go/cloudbrowser/master/reach"
)

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
	addWorkerAt(t, m, "w-good", good.Listener.Addr().String())
	addWorkerAt(t, m, "w-refused", refused)
	addWorkerAt(t, m, "w-testnet", "192.0.2.1:8000") // RFC 5737: never routed

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
