package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

func writeBundle(t *testing.T, dir, manifest, index string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(filepath.Join(dir, "app.json"), []byte(manifest), 0o644)
	_ = os.WriteFile(filepath.Join(dir, "index.html"), []byte(index), 0o644)
}

func (c *cluster) cli(t *testing.T, args ...string) (string, error) {
	t.Helper()
	full := append(args[:1:1], append([]string{"--master", "http://" + c.admin, "--data-dir", filepath.Join(c.dir, "data")}, args[1:]...)...)
	if args[0] == "apps" || args[0] == "authors" {
		full = append([]string{args[0], args[1], "--master", "http://" + c.admin, "--data-dir", filepath.Join(c.dir, "data")}, args[2:]...)
	}
	out, err := exec.Command(binary, full...).CombinedOutput()
	return string(out), err
}

func instanceVersion(st *wire.ClusterStatus, iid string) int {
	for _, in := range st.Instances {
		if in.ID == iid {
			return in.Version
		}
	}
	return -1
}

// TestDeployLifecycle: an author deploys, redeploys (old instances keep
// their version), an admin disables, enables and removes; apps survive a
// master restart; bad bundles are refused with every problem named.
func TestDeployLifecycle(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	c := startCluster(t, clusterOpts{proxies: 0, workers: 1})
	base := "http://" + c.public
	dir := filepath.Join(c.dir, "bundle")

	// Invalid bundle: refused before upload, every field named.
	writeBundle(t, dir, `{"name":"","mountPoint":"Bad Name","entry":"missing.html","strategy":"often"}`, "x")
	out, err := c.cli(t, "deploy", dir)
	if err == nil {
		t.Fatalf("invalid bundle deployed:\n%s", out)
	}
	for _, want := range []string{"name: is required", "mountPoint:", "strategy:", "entry:"} {
		if !strings.Contains(out, want) {
			t.Errorf("deploy output lacks %q:\n%s", want, out)
		}
	}

	// Version 1 with the author token (the default for deploy).
	writeBundle(t, dir, `{"name":"Deployed","mountPoint":"dep","entry":"index.html","strategy":"singleInstancePerUser"}`, "v1")
	if out, err := c.cli(t, "deploy", dir); err != nil || !strings.Contains(out, "deployed /dep version 1") {
		t.Fatalf("deploy v1: %v\n%s", err, out)
	}
	alice := newUser(t, base)
	hops := alice.open("/dep")
	m := browserURL.FindStringSubmatch(hops[len(hops)-1].path)
	if m == nil {
		t.Fatalf("opening /dep: %+v", hops)
	}
	iid1, alicePath := m[2], hops[len(hops)-1].path

	// Version 2: alice keeps her v1 instance, bob gets v2.
	writeBundle(t, dir, `{"name":"Deployed","mountPoint":"dep","entry":"index.html","strategy":"singleInstancePerUser"}`, "v2")
	if out, err := c.cli(t, "deploy", dir); err != nil || !strings.Contains(out, "version 2") {
		t.Fatalf("deploy v2: %v\n%s", err, out)
	}
	hops = newUser(t, base).open("/dep")
	iid2 := browserURL.FindStringSubmatch(hops[len(hops)-1].path)[2]
	st := c.mustStatus()
	if v1, v2 := instanceVersion(st, iid1), instanceVersion(st, iid2); v1 != 1 || v2 != 2 {
		t.Fatalf("instance versions: alice %d (want 1), bob %d (want 2)", v1, v2)
	}

	// Another author cannot remove the shared author's app; the admin
	// token disables.
	authorTok, _ := os.ReadFile(filepath.Join(c.dir, "data", "author.token"))
	req, _ := http.NewRequest(http.MethodDelete, "http://"+c.admin+"/api/v1/apps/dep", nil)
	req.Header.Set("Authorization", "Bearer "+addAuthorCLI(t, c, "mallory"))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("another author removing an app: %v %v", resp.Status, err)
	}
	if out, err := c.cli(t, "apps", "disable", "dep"); err != nil {
		t.Fatalf("disable: %v %s", err, out)
	}
	if h := newUser(t, base).get("/dep"); h.status != 503 || !strings.Contains(h.body, "disabled") {
		t.Fatalf("disabled app: %d %s", h.status, h.body)
	}
	if h := newUser(t, base).get("/"); strings.Contains(h.body, `href="/dep"`) {
		t.Fatal("disabled app on the home page")
	}
	if h := alice.get(alicePath); h.status != 200 {
		t.Fatalf("existing browser of a disabled app: %d", h.status)
	}
	if out, err := c.cli(t, "apps", "enable", "dep"); err != nil {
		t.Fatalf("enable: %v %s", err, out)
	}

	// A hostile archive is refused by the master with a clear message.
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	_ = tw.WriteHeader(&tar.Header{Name: "../../etc/evil", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg})
	_, _ = tw.Write([]byte("x"))
	tw.Close()
	gz.Close()
	req, _ = http.NewRequest(http.MethodPost, "http://"+c.admin+"/api/v1/apps", &buf)
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(authorTok)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("hostile archive: %s", resp.Status)
	}

	// Apps survive a master restart.
	c.master.kill()
	c.startMaster(clusterOpts{proxies: 0})
	c.waitFor("worker back", 30*time.Second, func(st *wire.ClusterStatus) bool { return connected(st) == 1 })
	out, err = c.cli(t, "apps", "list")
	if err != nil || !strings.Contains(out, "/dep") || !strings.Contains(out, "singleInstancePerUser  2") {
		t.Fatalf("after restart: %v\n%s", err, out)
	}
	if hs := newUser(t, base).open("/dep"); hs[len(hs)-1].status != 200 {
		t.Fatalf("/dep after restart: %+v", hs)
	}
	if out, err := c.cli(t, "apps", "remove", "dep"); err != nil || !strings.Contains(out, "removed") {
		t.Fatalf("remove: %v %s", err, out)
	}
	if h := newUser(t, base).get("/dep"); h.status != 404 {
		t.Fatalf("removed app: %d", h.status)
	}
}
