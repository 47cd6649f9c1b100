package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/secret"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// noApps is all an impostor's Application Manager offers.
type noApps struct{}

func (noApps) Ping(ctx context.Context) error { return nil }

// TestWorkerKeyHolderIsolated: a worker-key holder (an attacker with the
// shared worker.key) tries, against the real master, to read and write an
// instance hosted by a real worker: without registering, after
// registering as a new worker, and by registering as the hosting worker.
// Every attempt is refused; the real worker, enrolled with the shared key
// as a new id, reconnects with its own key after a master restart, and the
// shared key still cannot take its id.
func TestWorkerKeyHolderIsolated(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	apps, _ := filepath.Abs("testdata/apps")
	c := startCluster(t, clusterOpts{proxies: 1, workers: 0, extra: []string{"--apps", apps}})
	data := filepath.Join(c.dir, "data")
	const host = "w-e2ehost"
	c.start(host, "worker", "--master", c.rmi, "--secret-file", filepath.Join(data, "worker.key"),
		"--id", host, "--listen", "127.0.0.1:0", "--runtime", "none")
	c.waitFor("the worker with the shared key registered", 30*time.Second, func(st *wire.ClusterStatus) bool { return hasWorker(st, host) && connected(st) == 1 })

	hops := newUser(t, "http://"+c.public).open("/typing")
	m := browserURL.FindStringSubmatch(hops[len(hops)-1].path)
	if m == nil {
		t.Fatalf("no browser URL: %+v", hops)
	}
	iid := m[2]

	key, err := secret.Load(filepath.Join(data, "worker.key"))
	if err != nil {
		t.Fatal(err)
	}
	dial := func(name string) *rmi.Conn {
		node, err := rmi.New(rmi.Config{Name: name, Role: secret.RoleWorker, Secret: []byte(key), Logger: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { node.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := node.Dial(ctx, c.rmi)
		if err != nil {
			t.Fatal(err)
		}
		return conn
	}
	register := func(conn *rmi.Conn, id string) (wire.RegisterReply, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return contract.WorkerManagerClient{C: conn}.Register(ctx, wire.WorkerInfo{ID: id, HTTPAddr: "127.0.0.1:1"}, nil, rmi.Export(noApps{}))
	}
	tryAll := func(who string, conn *rmi.Conn) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		is := contract.InstanceStateClient{C: conn}
		if st, err := is.Get(ctx, iid, ""); err == nil {
			t.Errorf("%s: Get allowed (%+v)", who, st)
		}
		if b, err := is.Browsers(ctx, iid, ""); err == nil {
			t.Errorf("%s: Browsers allowed (%d snapshots)", who, len(b.Browsers))
		}
		if _, err := is.Write(ctx, wire.StateWrite{Instance: iid, Epoch: 1, Op: wire.StateSet, Key: "k", Value: []byte(`1`)}); err == nil {
			t.Errorf("%s: Write allowed", who)
		}
		if err := is.SaveBrowser(ctx, wire.SaveBrowser{Instance: iid, Epoch: 1, Remove: m[3]}); err == nil {
			t.Errorf("%s: SaveBrowser allowed", who)
		}
	}

	tryAll("unregistered", dial("w-e2emallory"))
	impostor := dial(host)
	if _, err := register(impostor, host); err == nil || !strings.Contains(err.Error(), "enrolled already") {
		t.Fatalf("the shared key registered as the live %s: %v", host, err)
	}
	tryAll("refused impostor", impostor)
	mallory := dial("w-e2emallory")
	rep, err := register(mallory, "w-e2emallory")
	if err != nil {
		t.Fatalf("a new id with the shared key: %v", err)
	}
	if rep.WorkerKey == "" {
		t.Fatal("a new id was not given its own key")
	}
	tryAll("registered as another worker", mallory)
	mallory.Close()
	c.waitFor("the real worker still serves", 10*time.Second, func(st *wire.ClusterStatus) bool { return hasWorker(st, host) })

	// The real worker proves its id with the key it was given: it comes
	// back after a master restart; the shared key still cannot take it.
	c.master.kill()
	c.startMaster(clusterOpts{proxies: 1, extra: []string{"--apps", apps}})
	c.waitFor("the enrolled worker back with its own key", 60*time.Second, func(st *wire.ClusterStatus) bool {
		return hasWorker(st, host) && connected(st) == 1
	})
	if _, err := register(dial(host), host); err == nil {
		t.Fatalf("after a master restart the shared key registered as %s", host)
	}
	if b, err := os.ReadFile(filepath.Join(data, "worker.key")); err != nil || len(b) == 0 {
		t.Fatalf("worker.key: %v", err)
	}
}
