package e2e

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

func workerDraining(st *wire.ClusterStatus, id string) bool {
	for _, w := range st.Workers {
		if w.ID == id {
			return w.Draining
		}
	}
	return false
}

// TestOperatorStateSurvivesMasterRestart: an admin's drain holds after a
// kill -9 of the master (new users are not placed on the drained worker),
// and a start-up app deleted through the API stays deleted when the master
// starts again with --apps samples.
func TestOperatorStateSurvivesMasterRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	o := clusterOpts{proxies: 0, workers: 2, extra: []string{"--apps", "samples"}}
	c := startCluster(t, o)
	const drained = "w-e2e2"
	c.adminPost("/api/v1/workers/" + drained + "/drain")

	c.master.kill()
	c.startMaster(o)
	st := c.waitFor("workers re-registered", 30*time.Second, func(st *wire.ClusterStatus) bool { return connected(st) == 2 })
	if !workerDraining(st, drained) {
		t.Fatalf("%s not draining after the master restart: %+v", drained, st.Workers)
	}
	base := "http://" + c.public
	for i := range 6 {
		hops := newUser(t, base).open("/notes")
		last := hops[len(hops)-1]
		if last.status != http.StatusOK || last.worker == "" {
			t.Fatalf("user %d: %+v", i, hops)
		}
		if last.worker == drained {
			t.Fatalf("user %d placed on the drained worker %s after a master restart", i, drained)
		}
	}

	if h := newUser(t, base).open("/hello"); h[len(h)-1].status != http.StatusOK {
		t.Fatalf("/hello before the delete: %+v", h)
	}
	req, _ := http.NewRequest(http.MethodDelete, "http://"+c.admin+"/api/v1/apps/hello", nil)
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("DELETE /api/v1/apps/hello: %s %s", resp.Status, body)
	}

	c.master.stop() // a clean restart this time
	c.startMaster(o)
	c.waitFor("workers re-registered", 30*time.Second, func(st *wire.ClusterStatus) bool { return connected(st) == 2 })
	h := newUser(t, base).get("/hello")
	if h.status != http.StatusNotFound || !strings.Contains(h.body, "There is no application at this address") {
		t.Fatalf("/hello after delete and restart with --apps samples: want 404, got %d %.200s", h.status, h.body)
	}
	if h := newUser(t, base).open("/notes"); h[len(h)-1].status != http.StatusOK {
		t.Fatalf("/notes after the restart: %+v", h)
	}
}
