package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// addAuthorCLI creates an author with the CLI and returns its token.
func addAuthorCLI(t *testing.T, c *cluster, name string) string {
	t.Helper()
	out, err := c.cli(t, "authors", "add", name)
	if err != nil {
		t.Fatalf("authors add %s: %v\n%s", name, err, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "cba_") {
			return strings.TrimSpace(line)
		}
	}
	t.Fatalf("authors add %s printed no token:\n%s", name, out)
	return ""
}

// postArchive deploys a raw archive with token and returns status and body.
func postArchive(t *testing.T, c *cluster, token string, arch []byte) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+c.admin+"/api/v1/apps", bytes.NewReader(arch))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestRobustDeploys: a file over the RMI frame limit reaches
// the worker and its virtual browser; a hard-link bomb is refused and the
// previous version keeps serving; authors cannot replace each other's apps
// (the admin can); a deploy a worker cannot take is not 201.
func TestRobustDeploys(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes and Chromium")
	}
	needChromium(t)
	c := startCluster(t, clusterOpts{proxies: 0, workers: 1, runtime: "chromium"})
	base := "http://" + c.public
	authorTok, _ := os.ReadFile(filepath.Join(c.dir, "data", "author.token"))

	// 10 MiB of noise: does not compress under the 8 MiB RMI frame.
	big := make([]byte, 10<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	var sum uint64
	for _, b := range big {
		sum = (sum + uint64(b)) % 1_000_000_007
	}
	dir := filepath.Join(c.dir, "bigapp")
	writeBundle(t, dir, `{"name":"Big","mountPoint":"bigapp","entry":"index.html","strategy":"singleAppInstance"}`,
		`<!doctype html><title>loading</title><script>
fetch("big.bin").then(function (r) { return r.arrayBuffer(); }).then(function (buf) {
  var a = new Uint8Array(buf), s = 0;
  for (var i = 0; i < a.length; i++) { s = (s + a[i]) % 1000000007; }
  document.title = "big:" + a.length + ":" + s;
}, function (e) { document.title = "failed:" + e; });
</script>`)
	if err := os.WriteFile(filepath.Join(dir, "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	// A symlink inside the bundle is packed as a copy of its target.
	if err := os.Symlink("index.html", filepath.Join(dir, "alias.html")); err != nil {
		t.Fatal(err)
	}

	t.Run("file over the frame limit reaches the virtual browser", func(t *testing.T) {
		out, err := c.cli(t, "deploy", dir)
		if err != nil || !strings.Contains(out, "deployed /bigapp version 1") {
			t.Fatalf("deploy: %v\n%s", err, out)
		}
		users := userBrowsers(t)
		u := open(t, users, base+"/bigapp")
		eventually(t, u, "engine", "document.body.dataset.status", "live")
		eventually(t, u, "the 10 MiB file loaded in the virtual browser", "document.title",
			fmt.Sprintf("big:%d:%d · CloudBrowser", len(big), sum))
	})

	t.Run("symlink leaving the bundle is refused by the CLI", func(t *testing.T) {
		evil := filepath.Join(c.dir, "evil")
		writeBundle(t, evil, `{"name":"Evil","mountPoint":"evil","entry":"index.html"}`, "x")
		if err := os.Symlink("../data/admin.token", filepath.Join(evil, "token.txt")); err != nil {
			t.Fatal(err)
		}
		out, err := c.cli(t, "deploy", evil)
		if err == nil || !strings.Contains(out, `token.txt: symbolic link to "../data/admin.token", outside the bundle directory`) {
			t.Fatalf("deploy with an escaping symlink: %v\n%s", err, out)
		}
	})

	t.Run("hard-link bomb refused, previous version kept", func(t *testing.T) {
		var buf bytes.Buffer
		gz := gzip.NewWriter(&buf)
		tw := tar.NewWriter(gz)
		file := func(name string, data []byte) {
			_ = tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg})
			_, _ = tw.Write(data)
		}
		file("app.json", []byte(`{"name":"Bomb","mountPoint":"bigapp","entry":"index.html"}`))
		file("index.html", []byte("bomb"))
		file("payload", bytes.Repeat([]byte("x"), 1<<20))
		for i := range 100 {
			_ = tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("l%d", i), Typeflag: tar.TypeLink, Linkname: "payload"})
		}
		tw.Close()
		gz.Close()
		st, body := postArchive(t, c, strings.TrimSpace(string(authorTok)), buf.Bytes())
		if st != http.StatusBadRequest || !strings.Contains(body, `l0 is a hard link (to \"payload\")`) {
			t.Fatalf("hard-link bomb: %d %s", st, body)
		}
		out, err := c.cli(t, "apps", "list")
		if err != nil || !regexp.MustCompile(`/bigapp\s+Big\s+singleAppInstance\s+1\s`).MatchString(out) {
			t.Fatalf("after the bomb: %v\n%s", err, out)
		}
		if hs := newUser(t, base).open("/bigapp"); hs[len(hs)-1].status != 200 {
			t.Fatalf("/bigapp after the bomb: %+v", hs)
		}
	})

	t.Run("authors own their mount points", func(t *testing.T) {
		bob, carol := addAuthorCLI(t, c, "bob"), addAuthorCLI(t, c, "carol")
		bobDir := filepath.Join(c.dir, "bobapp")
		writeBundle(t, bobDir, `{"name":"Bob's","mountPoint":"bobapp","entry":"index.html"}`, "bob")
		if out, err := c.cli(t, "deploy", "--token", bob, bobDir); err != nil || !strings.Contains(out, "deployed /bobapp version 1") {
			t.Fatalf("bob deploys: %v\n%s", err, out)
		}
		writeBundle(t, bobDir, `{"name":"Carol's","mountPoint":"bobapp","entry":"index.html"}`, "carol")
		out, err := c.cli(t, "deploy", "--token", carol, bobDir)
		if err == nil || !strings.Contains(out, "403") || !strings.Contains(out, `/bobapp belongs to the author "bob"`) {
			t.Fatalf("carol replacing bob's app: %v\n%s", err, out)
		}
		if out, err := c.cli(t, "apps", "remove", "--token", carol, "bobapp"); err == nil || !strings.Contains(out, `belongs to the author "bob"`) {
			t.Fatalf("carol removing bob's app: %v\n%s", err, out)
		}
		// The shared author token is the author "author": not bob either.
		if out, err := c.cli(t, "deploy", "--token", strings.TrimSpace(string(authorTok)), bobDir); err == nil || !strings.Contains(out, "403") {
			t.Fatalf("shared author replacing bob's app: %v\n%s", err, out)
		}
		if out, err := c.cli(t, "deploy", "--token", c.token, bobDir); err != nil || !strings.Contains(out, "deployed /bobapp version 2") {
			t.Fatalf("admin replacing bob's app: %v\n%s", err, out)
		}
		out, err = c.cli(t, "apps", "list")
		if err != nil || !regexp.MustCompile(`/bobapp\s.*\s2\s.*\sbob\n`).MatchString(out) {
			t.Fatalf("apps list lacks the owner: %v\n%s", err, out)
		}
		if out, err := c.cli(t, "apps", "disable", "--token", bob, "bobapp"); err != nil {
			t.Fatalf("bob disabling his app: %v\n%s", err, out)
		}
		if out, err := c.cli(t, "authors", "list"); err != nil || !strings.Contains(out, "bob") || strings.Contains(out, "cba_") {
			t.Fatalf("authors list: %v\n%s", err, out)
		}
		if out, err := c.cli(t, "authors", "remove", "bob"); err != nil || !strings.Contains(out, "author bob removed") {
			t.Fatalf("authors remove: %v\n%s", err, out)
		}
		if out, err := c.cli(t, "apps", "enable", "--token", bob, "bobapp"); err == nil || !strings.Contains(out, "invalid token") {
			t.Fatalf("removed author's token: %v\n%s", err, out)
		}
	})

	t.Run("deploy a worker cannot take is not 201", func(t *testing.T) {
		c.workerArgs = append(c.workerArgs, "--max-app-bytes", fmt.Sprint(1<<20))
		small := c.startWorker("w-e2esmall")
		c.waitFor("small worker registered", 30*time.Second, func(st *wire.ClusterStatus) bool { return connected(st) == 2 })
		// The worker's registration ends after it fetched (and here refused)
		// the large apps; a deploy before would race with it.
		testutil.Eventually(t, 30*time.Second, testutil.Cond("the small worker registered", func() bool { return logContains(small, "registered with master") }))
		if !logContains(small, "over this worker's limit of 1048576 bytes") {
			t.Fatal("the small worker did not refuse /bigapp at registration")
		}
		mid := filepath.Join(c.dir, "midapp")
		writeBundle(t, mid, `{"name":"Mid","mountPoint":"midapp","entry":"index.html"}`, "mid")
		if err := os.WriteFile(filepath.Join(mid, "mid.bin"), bytes.Repeat([]byte("m"), 2<<20), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := c.cli(t, "deploy", mid)
		if err == nil || !strings.Contains(out, "502") || !strings.Contains(out, "1 of 2 workers did not install it") ||
			!strings.Contains(out, "w-e2esmall") || !strings.Contains(out, "limit of 1048576 bytes") || strings.Contains(out, "w-e2e1") {
			t.Fatalf("deploy to a worker that cannot take it: %v\n%s", err, out)
		}
		// Stored on the master all the same.
		if out, err := c.cli(t, "apps", "list"); err != nil || !strings.Contains(out, "/midapp") {
			t.Fatalf("apps list after a partial deploy: %v\n%s", err, out)
		}
	})
}
