package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/bundle"
)

// TestJobsIsolation: through the binary, with real Chromium, an author's
// logged-in pool and results are the author's: another author naming the
// app gets 403, reading the author's job 404, while the author gets the
// logged-in page; a grant lets the other author in, a revocation out again.
func TestJobsIsolation(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	needChromium(t)
	// No start-up apps: only alice's pool warms browsers (2-core CI).
	c := startCluster(t, clusterOpts{proxies: 0, workers: 1, runtime: "chromium", extra: []string{"--apps", ""}})
	author := func(name string) string {
		t.Helper()
		st, _, b := c.api("POST", "/api/v1/authors", c.token, map[string]string{"name": name})
		var out struct{ Token string }
		if st != http.StatusCreated || json.Unmarshal(b, &out) != nil || out.Token == "" {
			t.Fatalf("author %s: %d %s", name, st, b)
		}
		return out.Token
	}
	alice, bob := author("alice"), author("bob")

	// Alice deploys the pool demo (its pool signs in to its bundled site)
	// at a mount point of her own.
	const mount = "alicepool"
	files := map[string][]byte{}
	for _, f := range []string{"app.json", "login.html", "search.html"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "apps", "pooldemo", f))
		if err != nil {
			t.Fatal(err)
		}
		files[f] = bytes.ReplaceAll(b, []byte("pooldemo"), []byte(mount))
	}
	files["app.json"] = bytes.Replace(files["app.json"], []byte(`"minSize": 2`), []byte(`"minSize": 1`), 1)
	arch, err := (&bundle.Bundle{Files: files}).Pack()
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", "http://"+c.admin+"/api/v1/apps", bytes.NewReader(arch))
	req.Header.Set("Authorization", "Bearer "+alice)
	req.Header.Set("Content-Type", "application/gzip")
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || !strings.Contains(string(b), `"owner": "alice"`) {
		t.Fatalf("alice deploys: %d %s", resp.StatusCode, b)
	}

	page := "http://" + mount + ".app.cloudbrowser.internal/search.html"
	render := "/api/v1/render?format=text&app=" + mount + "&url=" + url.QueryEscape(page)
	spec := map[string]any{"kind": "render", "url": page, "format": "text", "app": mount}
	const signedIn = "Signed in as demo"

	// Alice renders through her pool, then submits the same render: a
	// cache hit, done at once, whose result is hers.
	if st, _, b := c.api("GET", render, alice, nil); st != 200 || !strings.Contains(string(b), signedIn) {
		t.Fatalf("alice's render: %d %q", st, b)
	}
	st, hdr, b := c.api("POST", "/api/v1/jobs", alice, spec)
	var job apiJob
	if st != 200 || hdr.Get("X-Cache") != "HIT" || json.Unmarshal(b, &job) != nil || job.ID == "" {
		t.Fatalf("alice's job: %d %s %s", st, hdr.Get("X-Cache"), b)
	}

	steps := []struct {
		name   string
		token  string
		method string
		path   string
		body   any
		status int
		want   string
	}{
		{"bob renders through alice's pool", bob, "GET", render, nil, 403, `"field": "app"`},
		{"bob submits a job naming alice's app", bob, "POST", "/api/v1/jobs", spec, 403, `"field": "app"`},
		{"the jobs token renders through alice's pool", c.jobsToken(), "GET", render, nil, 403, `"field": "app"`},
		{"bob reads alice's job", bob, "GET", "/api/v1/jobs/" + job.ID, nil, 404, "not found"},
		{"bob reads alice's result", bob, "GET", "/api/v1/jobs/" + job.ID + "/result", nil, 404, "not found"},
		{"bob cancels alice's job", bob, "DELETE", "/api/v1/jobs/" + job.ID, nil, 404, "not found"},
		{"bob lists jobs", bob, "GET", "/api/v1/jobs", nil, 200, `"jobs": []`},
		{"alice reads her result", alice, "GET", "/api/v1/jobs/" + job.ID + "/result", nil, 200, signedIn},
		{"alice grants bob", alice, "PUT", "/api/v1/apps/" + mount + "/job-users/bob", nil, 200, `"bob"`},
		{"bob renders through alice's pool, granted", bob, "GET", render, nil, 200, signedIn},
		{"alice revokes bob", alice, "DELETE", "/api/v1/apps/" + mount + "/job-users/bob", nil, 200, `"jobUsers": []`},
		{"bob renders through alice's pool, revoked", bob, "GET", render, nil, 403, `"field": "app"`},
		{"an author named jobs", c.token, "POST", "/api/v1/authors", map[string]string{"name": "jobs"}, 400, "reserved"},
	}
	for _, s := range steps {
		st, _, b := c.api(s.method, s.path, s.token, s.body)
		if st != s.status || !strings.Contains(string(b), s.want) {
			t.Fatalf("%s: %d %q, want %d with %q", s.name, st, b, s.status, s.want)
		}
		if s.status != 200 && strings.Contains(string(b), signedIn) {
			t.Fatalf("%s: the refusal carries alice's page: %q", s.name, b)
		}
	}
}
