package master

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/auth"
	"github.com/cloudbrowser-go/cloudbrowser/master/balance"
)

// dirMaster starts a master on data directory dir with its admin API; stop
// closes both (also at the end of the test), so the same directory can be
// opened again by the next master.
func dirMaster(t *testing.T, dir string) (m *Master, srv *httptest.Server, stop func()) {
	t.Helper()
	m, err := New(Config{Secret: testSecret, AdminToken: "admintok", Apps: testApps, DataDir: dir,
		Balancer: balance.LeastLoad, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		m.Close()
		t.Fatal(err)
	}
	srv = httptest.NewServer(m.admin.handler(false))
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			srv.Close()
			m.Close()
		}
	}
	t.Cleanup(stop)
	return m, srv, stop
}

// drainingOf returns the draining flag of every worker in the cluster status.
func drainingOf(t *testing.T, srv *httptest.Server) map[string]bool {
	t.Helper()
	st, body := call(t, srv, "admintok", "GET", "/api/v1/cluster", nil)
	if st != http.StatusOK {
		t.Fatalf("cluster status: %d %s", st, body)
	}
	var cs wire.ClusterStatus
	if err := json.Unmarshal([]byte(body), &cs); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, w := range cs.Workers {
		out[w.ID] = w.Draining
	}
	return out
}

// TestDrainSurvivesRestart: an admin's drain holds after a master restart
// (the worker registers again and gets no new instances) until an undrain;
// a leaving worker's draining is not kept.
func TestDrainSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	m1, srv1, stop1 := dirMaster(t, dir)
	addWorker(t, m1, "w-a")
	addWorker(t, m1, "w-b")
	addWorker(t, m1, "w-c")
	if st, body := call(t, srv1, "admintok", "POST", "/api/v1/workers/w-b/drain", nil); st != http.StatusOK {
		t.Fatalf("drain: %d %s", st, body)
	}
	if _, err := m1.workers.Moves.Leave(context.Background(), "w-c"); err != nil {
		t.Fatal(err)
	}
	stop1()

	m2, srv2, stop2 := dirMaster(t, dir)
	a := addWorker(t, m2, "w-a")
	addWorker(t, m2, "w-b")
	addWorker(t, m2, "w-c")
	want := map[string]bool{"w-a": false, "w-b": true, "w-c": false}
	if got := drainingOf(t, srv2); !maps.Equal(got, want) {
		t.Fatalf("draining after restart: %v, want %v", got, want)
	}
	for i := range 6 {
		p, err := a.place(t, "multi", "u")
		if err != nil || p.WorkerID == "w-b" {
			t.Fatalf("placement %d: %+v %v (w-b was drained before the restart)", i, p, err)
		}
	}
	if st, body := call(t, srv2, "admintok", "POST", "/api/v1/workers/w-b/undrain", nil); st != http.StatusOK {
		t.Fatalf("undrain: %d %s", st, body)
	}
	stop2()

	_, srv3, _ := dirMaster(t, dir)
	// Not registered yet: nothing stored to clear, so unknown.
	if st, body := call(t, srv3, "admintok", "POST", "/api/v1/workers/w-b/undrain", nil); st != http.StatusNotFound {
		t.Fatalf("undrain of an unregistered worker without a stored drain: %d %s", st, body)
	}
}

// TestUndrainClearsStoredDrainOfAbsentWorker: a drained worker that went
// away can be undrained, so it does not come back drained.
func TestUndrainClearsStoredDrainOfAbsentWorker(t *testing.T) {
	dir := t.TempDir()
	m1, srv1, stop1 := dirMaster(t, dir)
	addWorker(t, m1, "w-b")
	if st, body := call(t, srv1, "admintok", "POST", "/api/v1/workers/w-b/drain", nil); st != http.StatusOK {
		t.Fatalf("drain: %d %s", st, body)
	}
	stop1()
	_, srv2, stop2 := dirMaster(t, dir)
	if st, body := call(t, srv2, "admintok", "POST", "/api/v1/workers/w-b/undrain", nil); st != http.StatusOK {
		t.Fatalf("undrain of an absent, drained worker: %d %s", st, body)
	}
	stop2()
	m3, srv3, _ := dirMaster(t, dir)
	addWorker(t, m3, "w-b")
	if got := drainingOf(t, srv3); got["w-b"] {
		t.Fatalf("w-b draining after undrain and restart: %v", got)
	}
}

// TestDeletedStartupAppStaysDeleted: a start-up app (Config.Apps, --apps)
// deleted through the API is not deployed again by the next start; an
// explicit deploy of its mount point clears the deletion.
func TestDeletedStartupAppStaysDeleted(t *testing.T) {
	dir := t.TempDir()
	m1, srv1, stop1 := dirMaster(t, dir)
	if st, body := call(t, srv1, "admintok", "DELETE", "/api/v1/apps/hello", nil); st != http.StatusOK {
		t.Fatalf("delete: %d %s", st, body)
	}
	if _, ok := m1.apps.Get("hello"); ok {
		t.Fatal("hello still mounted after delete")
	}
	stop1()

	m2, srv2, stop2 := dirMaster(t, dir)
	if _, ok := m2.apps.Get("hello"); ok {
		t.Fatal("deleted start-up app deployed again by a restart")
	}
	if _, ok := m2.apps.Get("notes"); !ok {
		t.Fatal("the other start-up apps are gone")
	}
	if st, body := call(t, srv2, "admintok", "GET", "/api/v1/apps", nil); st != http.StatusOK || strings.Contains(body, `"mountPoint":"hello"`) {
		t.Fatalf("app list after restart: %d %s", st, body)
	}
	// Deployed again explicitly (as the start-up set would, without a
	// stored bundle): the next start keeps it.
	if _, _, err := m2.apps.Add(context.Background(), testApps[0], auth.AdminPrincipal); err != nil {
		t.Fatal(err)
	}
	stop2()

	m3, _, _ := dirMaster(t, dir)
	if _, ok := m3.apps.Get("hello"); !ok {
		t.Fatal("hello deployed again after its deletion is missing after a restart")
	}
}
