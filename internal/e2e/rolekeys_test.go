package e2e

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// rmiTap is a TCP relay in front of the master's RMI port that records
// every byte in both directions, as an eavesdropper on the network would.
type rmiTap struct {
	addr string
	testutil.SyncBuffer
}

func startTap(t *testing.T, target string) *rmiTap {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &rmiTap{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(io.MultiWriter(out, r), in); out.Close() })
			wg.Go(func() { _, _ = io.Copy(io.MultiWriter(in, r), out); in.Close() })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return r
}

func hasWorker(st *wire.ClusterStatus, id string) bool {
	for _, w := range st.Workers {
		if w.ID == id {
			return true
		}
	}
	return false
}

// TestRoleKeysAndSealedRMI: the master writes worker.key and proxy.key; its
// proxy children run on proxy.key; a worker holding the proxy key cannot
// register (clear error in its log, absent from the status) while one with
// the worker key does; and a login through the proxy never puts the
// password on the RMI wire in clear text.
func TestRoleKeysAndSealedRMI(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	apps, _ := filepath.Abs("testdata/apps")
	c := startCluster(t, clusterOpts{proxies: 1, workers: 0, extra: []string{"--apps", apps}})
	data := filepath.Join(c.dir, "data")
	for _, f := range []string{"worker.key", "proxy.key"} {
		st, err := os.Stat(filepath.Join(data, f))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v, want 0600", f, st.Mode().Perm())
		}
	}
	workerArgs := func(id, key, master string) []string {
		return []string{"worker", "--master", master, "--secret-file", filepath.Join(data, key),
			"--id", id, "--listen", "127.0.0.1:0", "--runtime", "none"}
	}

	// A stolen proxy key does not make a worker.
	bad := c.start("w-e2ebad", workerArgs("w-e2ebad", "proxy.key", c.rmi)...)
	deadline := time.Now().Add(30 * time.Second)
	for !logContains(bad, "server rejected our key for role \\\"worker\\\"") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if !logContains(bad, "server rejected our key for role \\\"worker\\\"") {
		t.Fatal("the worker with the proxy key did not log why it cannot connect")
	}
	if !logContains(c.master, "did not prove the worker key or the cluster secret") {
		t.Error("the master did not log the refused worker")
	}

	// The worker key works; its RMI goes through the tap.
	tap := startTap(t, c.rmi)
	good := c.start("w-e2egood", workerArgs("w-e2egood", "worker.key", tap.addr)...)
	st := c.waitFor("the worker with the worker key registered", 30*time.Second, func(st *wire.ClusterStatus) bool {
		return connected(st) == 1 && hasWorker(st, "w-e2egood")
	})
	if hasWorker(st, "w-e2ebad") {
		t.Fatal("the worker with the proxy key appears in the cluster status")
	}

	// A real login through the proxy: the worker checks the password with
	// the master over the tapped connection.
	const password = "correct horse battery"
	if out, err := c.cliStdin(t, password+"\n", "users", "add", "alice"); err != nil {
		t.Fatalf("users add: %v %s", err, out)
	}
	base := "http://" + c.public
	alice := newUser(t, base)
	login := alice.get("/secure/login")
	m := csrfField.FindStringSubmatch(login.body)
	if login.status != 200 || m == nil {
		t.Fatalf("login page: %d %s", login.status, login.body)
	}
	resp, err := alice.c.PostForm(base+"/secure/login", url.Values{"csrf": {m[1]}, "user": {"alice"}, "password": {password}, "next": {"/secure"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/secure" {
		t.Fatalf("login: %s %s", resp.Status, resp.Header.Get("Location"))
	}
	// The session the worker issued (with the key the master handed it)
	// opens the app.
	hops := alice.open("/secure")
	if last := hops[len(hops)-1]; last.status != 200 || browserURL.FindStringSubmatch(last.path) == nil {
		t.Fatalf("after login: %+v", hops)
	}
	capture := tap.Bytes()
	if !bytes.Contains(capture, []byte("w-e2egood")) { // the handshake names the worker
		t.Fatalf("the tap saw no RMI traffic (%d bytes)", len(capture))
	}
	for _, s := range []string{password, "alice", "Login"} {
		if bytes.Contains(capture, []byte(s)) {
			t.Errorf("RMI capture (%d bytes) contains %q in clear text", len(capture), s)
		}
	}
	if strings.Contains(string(capture), "secure") {
		t.Error("RMI capture contains an app name in clear text")
	}
	bad.stop()
	good.stop()
}
