package master

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/secret"
	"github.com/cloudbrowser-go/cloudbrowser/internal/session"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/rmi"
)

// Each role calls only its own RMI services; holders of the cluster secret
// call everything. A refused call is an rmi.ErrForbidden error reply.
func TestRoleEnforcement(t *testing.T) {
	m := startMaster(t, "")
	dial := func(t *testing.T, role, key string) *rmi.Conn { return dialMaster(t, m, "c-"+role, role, key) }
	workerKey := secret.RoleKey(testSecret, secret.RoleWorker)
	proxyKey := secret.RoleKey(testSecret, secret.RoleProxy)
	calls := map[string]func(ctx context.Context, c *rmi.Conn) error{
		"WorkerManager.Instances": func(ctx context.Context, c *rmi.Conn) error {
			_, err := contract.WorkerManagerClient{C: c}.Instances(ctx, "hello", "someone")
			return err
		},
		"Accounts.Login": func(ctx context.Context, c *rmi.Conn) error {
			_, err := contract.AccountsClient{C: c}.Login(ctx, wire.LoginRequest{User: "nobody", Password: "x"})
			return err
		},
		"Router.Apps": func(ctx context.Context, c *rmi.Conn) error {
			_, err := contract.RouterClient{C: c}.Apps(ctx)
			return err
		},
		"Cluster.Info": func(ctx context.Context, c *rmi.Conn) error {
			_, err := contract.ClusterClient{C: c}.Info(ctx)
			return err
		},
		"AppManager.List": func(ctx context.Context, c *rmi.Conn) error {
			_, err := contract.AppManagerClient{C: c}.List(ctx)
			return err
		},
	}
	tests := []struct {
		role, key string
		allowed   []string
	}{
		{secret.RoleWorker, workerKey, []string{"WorkerManager.Instances", "Accounts.Login", "Cluster.Info"}},
		{secret.RoleProxy, proxyKey, []string{"Router.Apps", "Cluster.Info"}},
		{secret.RoleWorker, testSecret, []string{"WorkerManager.Instances", "Accounts.Login", "Cluster.Info"}},
		{rmi.RoleCluster, testSecret, []string{"WorkerManager.Instances", "Accounts.Login", "Router.Apps", "Cluster.Info", "AppManager.List"}},
	}
	for _, tc := range tests {
		c := dial(t, tc.role, tc.key)
		for name, call := range calls {
			t.Run(tc.role+"/"+name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				err := call(ctx, c)
				want := false
				for _, a := range tc.allowed {
					want = want || a == name
				}
				if forbidden := errors.Is(err, rmi.ErrForbidden); forbidden == want {
					t.Fatalf("role %s calling %s: %v (allowed: %v)", tc.role, name, err, want)
				}
				if want && err != nil {
					t.Fatalf("role %s calling %s: %v", tc.role, name, err)
				}
			})
		}
	}
	// A role key proves only its role.
	for _, tc := range []struct{ role, key string }{{secret.RoleProxy, workerKey}, {secret.RoleWorker, proxyKey}, {rmi.RoleCluster, workerKey}} {
		n, err := rmi.New(rmi.Config{Name: "c", Role: tc.role, Secret: []byte(tc.key)})
		if err != nil {
			t.Fatal(err)
		}
		_, err = n.Dial(context.Background(), m.RMIAddr())
		_ = n.Close()
		if !errors.Is(err, rmi.ErrAuth) {
			t.Errorf("role %s with another role's key: %v, want ErrAuth", tc.role, err)
		}
	}
}

// Cluster.Info hands each role the keys it needs and no more.
func TestClusterInfoKeys(t *testing.T) {
	m := startMaster(t, "")
	for _, tc := range []struct {
		role     string
		sessions bool
	}{{secret.RoleWorker, true}, {secret.RoleProxy, false}} {
		n, err := rmi.New(rmi.Config{Name: "c", Role: tc.role, Secret: []byte(secret.RoleKey(testSecret, tc.role))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.Close() })
		c, err := n.Dial(context.Background(), m.RMIAddr())
		if err != nil {
			t.Fatal(err)
		}
		var info wire.ClusterInfo
		if err := c.Call(context.Background(), wire.ObjCluster, "Info", &info); err != nil {
			t.Fatal(err)
		}
		if string(info.Keys.Gossip) != string(secret.Derive(testSecret, "gossip", 32)) {
			t.Errorf("%s: wrong gossip key", tc.role)
		}
		if got := string(info.Keys.Session) == string(session.Key(testSecret, "session")) &&
			string(info.Keys.AdminSession) == string(session.Key(testSecret, "admin-session")) &&
			string(info.Keys.Anonymous) == string(session.Key(testSecret, "anonymous-identity")); got != tc.sessions {
			t.Errorf("%s: session keys handed over = %v, want %v", tc.role, got, tc.sessions)
		}
	}
}

// The master writes the role keys next to the cluster secret, 0600, and
// rewrites them when the secret changes.
func TestRoleKeyFiles(t *testing.T) {
	dir := t.TempDir()
	for _, sec := range []string{testSecret, "another-cluster-secret-0123456789"} {
		m, err := New(Config{Secret: sec, AdminToken: "tok", DataDir: dir, Logger: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		for _, role := range []string{secret.RoleWorker, secret.RoleProxy} {
			p := m.RoleKeyFile(role)
			if p != filepath.Join(dir, role+".key") {
				t.Errorf("key file %s", p)
			}
			st, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != 0o600 {
				t.Errorf("%s mode %v, want 0600", p, st.Mode().Perm())
			}
			k, err := secret.Load(p)
			if err != nil || k != secret.RoleKey(sec, role) {
				t.Errorf("%s holds %q, %v", p, k, err)
			}
		}
		m.Close()
	}
}

// dialMaster connects to m's RMI port as name in role with key.
func dialMaster(t *testing.T, m *Master, name, role, key string) *rmi.Conn {
	t.Helper()
	n, err := rmi.New(rmi.Config{Name: name, Role: role, Secret: []byte(key)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := n.Dial(ctx, m.RMIAddr())
	if err != nil {
		t.Fatal(err)
	}
	return c
}
