package master

import (
	"context"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/secret"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/balance"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// sharedWorkerKey is the master's worker.key for testSecret.
var sharedWorkerKey = secret.RoleKey(testSecret, secret.RoleWorker)

// dialWorker connects as worker id, declaring the worker role and proving
// key (the shared worker key or an id's own key).
func dialWorker(t *testing.T, m *Master, id, key string) (*fakeWorker, error) {
	t.Helper()
	node, err := rmi.New(rmi.Config{Name: id, Role: secret.RoleWorker, Secret: []byte(key)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { node.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := node.Dial(ctx, m.RMIAddr())
	if err != nil {
		return nil, err
	}
	return &fakeWorker{id: id, node: node, conn: c, apps: map[string]wire.App{}}, nil
}

// registerAs dials as worker id with key and registers.
func registerAs(t *testing.T, m *Master, id, key string, insts ...wire.InstanceInfo) (*fakeWorker, wire.RegisterReply, error) {
	t.Helper()
	f, err := dialWorker(t, m, id, key)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rep, err := contract.WorkerManagerClient{C: f.conn}.Register(ctx, wire.WorkerInfo{ID: id, HTTPAddr: "127.0.0.1:1", Gossip: id + ".g"}, insts, rmi.Export(f))
	return f, rep, err
}

// TestWorkerIdentity: a worker id is proven by its own key. The shared
// worker key registers an id once, the first time the cluster sees it,
// and the reply hands over the id's key; after that the shared key cannot
// register that id, live, disconnected, dead, or after a master restart.
func TestWorkerIdentity(t *testing.T) {
	dir := t.TempDir()
	start := func() *Master {
		cfg := testConfig(balance.RoundRobin)
		cfg.DataDir = dir
		m, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		return m
	}
	m := start()
	defer func() { m.Close() }()

	// A new id with the shared key: enrolled, and given its own key.
	a, rep, err := registerAs(t, m, "w-a", sharedWorkerKey)
	if err != nil {
		t.Fatal(err)
	}
	if rep.WorkerKey != secret.WorkerKey(testSecret, "w-a") {
		t.Fatalf("enrolment reply's key %q, want the id's key", rep.WorkerKey)
	}
	p, err := a.place(t, "notes", "alice")
	if err != nil {
		t.Fatal(err)
	}
	// Its own key registers it again (a reconnection), and is not handed
	// out again.
	if _, rep, err := registerAs(t, m, "w-a", rep.WorkerKey); err != nil || rep.WorkerKey != "" {
		t.Fatalf("re-registration with the id's key: %v, key handed out again: %v", err, rep.WorkerKey != "")
	}

	taken := []struct {
		name   string
		before func()
	}{
		{"while it is live", func() {}},
		{"once it is declared dead", func() { m.workers.Dead("w-a", "test") }},
		{"after a master restart", func() {
			m.Close()
			m = start()
		}},
	}
	for _, tc := range taken {
		t.Run(tc.name, func(t *testing.T) {
			tc.before()
			_, _, err := registerAs(t, m, "w-a", sharedWorkerKey, wire.InstanceInfo{ID: p.InstanceID, App: "notes", Owner: "alice", Worker: "w-a", Epoch: 1})
			if code(err) != wire.CodeForbidden {
				t.Fatalf("the shared key took over w-a: %v, want %s", err, wire.CodeForbidden)
			}
		})
	}
	// Another id's key does not prove w-a either (the handshake fails).
	if _, err := dialWorker(t, m, "w-a", secret.WorkerKey(testSecret, "w-b")); err == nil {
		t.Fatal("w-b's key proved w-a")
	}
	// The id's own key still does, and the cluster secret too.
	if _, _, err := registerAs(t, m, "w-a", secret.WorkerKey(testSecret, "w-a")); err != nil {
		t.Fatalf("w-a with its own key after a restart: %v", err)
	}
	if _, _, err := registerAs(t, m, "w-c", testSecret); err != nil {
		t.Fatalf("the cluster secret: %v", err)
	}
	if _, _, err := registerAs(t, m, "w-c", sharedWorkerKey); code(err) != wire.CodeForbidden {
		t.Fatalf("an id first registered with the cluster secret, then the shared key: %v", err)
	}
}

// TestInstanceStateNeedsHost: every read and write of an instance's stored
// state (its shared state, its browsers' cookies and storage) needs the
// worker that hosts it; a worker-key holder that never registered, or that
// registered as another worker, is refused.
func TestInstanceStateNeedsHost(t *testing.T) {
	m := startMaster(t, balance.RoundRobin)
	host, _, err := registerAs(t, m, "w-host", sharedWorkerKey)
	if err != nil {
		t.Fatal(err)
	}
	p, err := host.place(t, "notes", "alice")
	if err != nil {
		t.Fatal(err)
	}
	iid := p.InstanceID
	epoch := instanceInfos(t, m)[iid].Epoch
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	is := func(f *fakeWorker) contract.InstanceStateClient { return contract.InstanceStateClient{C: f.conn} }
	if _, err := is(host).Write(ctx, wire.StateWrite{Instance: iid, Epoch: epoch, Op: wire.StateSet, Key: "secret", Value: []byte(`"alice's"`)}); err != nil {
		t.Fatal(err)
	}
	if err := is(host).SaveBrowser(ctx, wire.SaveBrowser{Instance: iid, Epoch: epoch, Snapshot: snap("bbbbbbbbbbbb", "http://x.test/")}); err != nil {
		t.Fatal(err)
	}

	unregistered, err := dialWorker(t, m, "w-mallory", sharedWorkerKey)
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := registerAs(t, m, "w-other", sharedWorkerKey)
	if err != nil {
		t.Fatal(err)
	}
	ops := []struct {
		name string
		call func(c contract.InstanceStateClient) error
	}{
		{"Get", func(c contract.InstanceStateClient) error {
			st, err := c.Get(ctx, iid, "")
			if err == nil && len(st.Values) > 0 {
				t.Errorf("read %d values", len(st.Values))
			}
			return err
		}},
		{"Browsers", func(c contract.InstanceStateClient) error {
			b, err := c.Browsers(ctx, iid, "")
			if err == nil && len(b.Browsers) > 0 {
				t.Errorf("read %d snapshots", len(b.Browsers))
			}
			return err
		}},
		{"Write", func(c contract.InstanceStateClient) error {
			_, err := c.Write(ctx, wire.StateWrite{Instance: iid, Epoch: epoch, Op: wire.StateSet, Key: "secret", Value: []byte(`"mallory's"`)})
			return err
		}},
		{"SaveBrowser", func(c contract.InstanceStateClient) error {
			return c.SaveBrowser(ctx, wire.SaveBrowser{Instance: iid, Epoch: epoch, Snapshot: snap("bbbbbbbbbbbb", "http://evil.test/")})
		}},
	}
	for _, caller := range []struct {
		name string
		f    *fakeWorker
	}{{"unregistered", unregistered}, {"registered as another worker", other}} {
		for _, op := range ops {
			t.Run(caller.name+"/"+op.name, func(t *testing.T) {
				if err := op.call(is(caller.f)); err == nil {
					t.Fatalf("%s by %s allowed", op.name, caller.name)
				}
			})
		}
	}
	// The host still reads what it wrote, untouched.
	st, err := is(host).Get(ctx, iid, "")
	if err != nil || string(st.Values["secret"].Value) != `"alice's"` {
		t.Fatalf("host's read: %+v %v", st, err)
	}
	b, err := is(host).Browsers(ctx, iid, "")
	if err != nil || len(b.Browsers) != 1 || b.Browsers[0].URL != "http://x.test/" {
		t.Fatalf("host's snapshots: %+v %v", b, err)
	}
}
