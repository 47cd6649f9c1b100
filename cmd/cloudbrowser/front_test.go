package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/config"
	"github.com/cloudbrowser-go/cloudbrowser/internal/procfs"
	"github.com/cloudbrowser-go/cloudbrowser/internal/supervise"
	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master"
)

const frontSecret = "0123456789abcdef0123456789abcdef"

// startAssembled starts a master of cfg with its public side, as the
// master and up commands do.
func startAssembled(t *testing.T, cfg master.Config) (*master.Master, error) {
	t.Helper()
	m, err := master.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.SetFront(newFront(m))
	if err := m.Start(context.Background()); err != nil {
		m.Close()
		return nil, err
	}
	t.Cleanup(func() { m.Close() })
	return m, nil
}

func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestEmbeddedProxy: with --proxies 0 one proxy in the master's process
// serves the public address: the master routes its requests in process,
// its admin endpoints are the fallback (/metrics behind the admin token,
// with the proxy's series), it shows in the status, and a second master
// on the same address fails instead of sharing it.
func TestEmbeddedProxy(t *testing.T) {
	m, err := startAssembled(t, master.Config{Secret: frontSecret, AdminToken: "admintok", PublicAddr: "127.0.0.1:0",
		Logger: testutil.Logger(t),
		Apps:   []wire.App{{Name: "Hello", MountPoint: "hello", Entry: "https://example.test/", Strategy: wire.SingleAppInstance, Public: true}}})
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + m.PublicAddr()
	if code, body := get(t, base+"/healthz", ""); code != http.StatusOK || !strings.Contains(body, m.ID()) {
		t.Errorf("/healthz on the public port: %d %s", code, body)
	}
	if code, _ := get(t, base+"/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("/metrics on the public port without a token: %d, want 401", code)
	}
	if code, body := get(t, base+"/metrics", "admintok"); code != http.StatusOK || !strings.Contains(body, "cloudbrowser_proxy_requests_total") {
		t.Errorf("/metrics with the admin token: %d, proxy series present: %v", code, strings.Contains(body, "cloudbrowser_proxy_requests_total"))
	}
	if code, body := get(t, base+"/", ""); code != http.StatusOK || !strings.Contains(body, `href="/hello"`) {
		t.Errorf("home page: %d, lists the public app: %v", code, strings.Contains(body, `href="/hello"`))
	}
	// No worker yet: the master's in-process answer is "starting".
	if code, _ := get(t, base+"/hello", ""); code != http.StatusServiceUnavailable {
		t.Errorf("an app with no worker registered: %d, want 503", code)
	}
	st := m.Status()
	i := slices.IndexFunc(st.Proxies, func(p wire.ProxyStatus) bool { return p.Embedded })
	if i < 0 || st.Proxies[i].Addr != m.PublicAddr() || st.Proxies[i].Requests < 5 {
		t.Errorf("status proxies %+v: want the embedded one on %s with the requests above", st.Proxies, m.PublicAddr())
	}

	_, err = startAssembled(t, master.Config{Secret: frontSecret, AdminToken: "admintok", PublicAddr: m.PublicAddr(), Logger: zerolog.Nop()})
	var fe *config.FieldError
	if !errors.As(err, &fe) || fe.Field != "PublicAddr" || !strings.Contains(err.Error(), "already in use") {
		t.Errorf("a second master on %s: %v, want PublicAddr already in use", m.PublicAddr(), err)
	}
}

// TestProxyProcsAdoptAndForget: the proxy processes a previous master
// recorded are adopted when they run today's command line, stopped when
// beyond --proxies; a clean stop ends them and forgets the records.
func TestProxyProcsAdoptAndForget(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("adoption reads /proc")
	}
	logs := &testutil.SyncBuffer{}
	// A stand-in proxy whose command line stays as started (no exec).
	command := []string{"/bin/sh", "-c", "while :; do sleep 0.1; done", "fake-proxy"}
	m, err := startAssembled(t, master.Config{Secret: frontSecret, AdminToken: "admintok", DataDir: t.TempDir(),
		Proxies: 1, ProxyCommand: command, Logger: zerolog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	set := m.ProxySettings()
	set.PublicAddr = testutil.RefusedAddr(t) // nobody serves it: free to use
	p := newProxyProcs(m, set)

	// What a master killed with -9 leaves: proxy-1 as today's master would
	// start it, proxy-2 beyond today's --proxies 1.
	previous := func(i int) supervise.ID {
		argv := append([]string{command[0]}, p.args(i, set.PublicAddr)...)
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { _ = cmd.Wait() }() // reaped, so a stopped one is gone
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		testutil.Eventually(t, 5*time.Second, testutil.Cond("the stand-in runs its command line", func() bool {
			live, err := procfs.Cmdline(cmd.Process.Pid)
			return err == nil && slices.Equal(live, argv)
		}))
		id, err := supervise.Identify(cmd.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		name := "proxy-" + string(rune('0'+i))
		if err := m.ProxyTable().Put(master.ProxyRecord{Name: name, ID: id, Args: argv}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	one, two := previous(1), previous(2)

	addr, err := p.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if addr != set.PublicAddr {
		t.Errorf("Start returned %q, want %q", addr, set.PublicAddr)
	}
	for _, msg := range []string{"adopting the proxy a previous master started", "stopping a previous master's extra proxy"} {
		if !logs.Contains(msg) {
			t.Errorf("no %q in the log", msg)
		}
	}
	testutil.Eventually(t, 5*time.Second, testutil.Cond("proxy-1 adopted", func() bool {
		return slices.Equal(p.pids(), []int{one.Pid})
	}))
	if two.Running() {
		t.Error("the extra proxy still runs")
	}
	recs, err := m.ProxyTable().All()
	if err != nil || len(recs) != 1 || recs["proxy-1"].ID != one {
		t.Errorf("records after adoption: %+v %v, want proxy-1's only", recs, err)
	}

	p.Stop(context.Background())
	if one.Running() {
		t.Error("the adopted proxy runs after a clean stop")
	}
	if recs, err := m.ProxyTable().All(); err != nil || len(recs) != 0 {
		t.Errorf("records after a clean stop: %+v %v, want none", recs, err)
	}
}
