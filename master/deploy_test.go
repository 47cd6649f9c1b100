package master

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/bundle"
	"github.com/cloudbrowser-go/cloudbrowser/internal/contract"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/balance"
)

// apiMaster is a started master with both tokens and its admin API.
func apiMaster(t *testing.T) (*Master, *httptest.Server) {
	t.Helper()
	m, err := New(Config{Secret: testSecret, AdminToken: "admintok", AuthorToken: "authortok", Apps: testApps,
		Balancer: balance.LeastLoad, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.admin.handler(false))
	t.Cleanup(func() { srv.Close(); m.Close() })
	return m, srv
}

func archiveOf(t *testing.T, mount string, extra map[string][]byte) []byte {
	t.Helper()
	files := map[string][]byte{
		"app.json":   fmt.Appendf(nil, `{"name":"T","mountPoint":%q,"entry":"index.html"}`, mount),
		"index.html": []byte("hi"),
	}
	for n, d := range extra {
		files[n] = d
	}
	arch, err := (&bundle.Bundle{Files: files}).Pack()
	if err != nil {
		t.Fatal(err)
	}
	return arch
}

// call sends a request with token and returns the status and body.
func call(t *testing.T, srv *httptest.Server, token, method, path string, body []byte) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

func addAuthor(t *testing.T, srv *httptest.Server, name string) string {
	t.Helper()
	st, body := call(t, srv, "admintok", "POST", "/api/v1/authors", fmt.Appendf(nil, `{"name":%q}`, name))
	if st != http.StatusCreated {
		t.Fatalf("add author %s: %d %s", name, st, body)
	}
	var out struct{ Token string }
	_ = json.Unmarshal([]byte(body), &out)
	return out.Token
}

// TestDeployOwnership: mount points belong to the author who deployed them
// first; other authors get 403 naming the owner, the admin may do anything.
func TestDeployOwnership(t *testing.T) {
	m, srv := apiMaster(t)
	bob := addAuthor(t, srv, "bob")
	carol := addAuthor(t, srv, "carol")
	steps := []struct {
		name       string
		token      string
		method     string
		path       string
		body       []byte
		wantStatus int
		wantBody   string
	}{
		{"shared author deploys", "authortok", "POST", "/api/v1/apps", archiveOf(t, "own", nil), 201, `"owner": "author"`},
		{"bob replaces the author's app", bob, "POST", "/api/v1/apps", archiveOf(t, "own", nil), 403, `belongs to the author \"author\"`},
		{"bob disables it", bob, "POST", "/api/v1/apps/own/disable", nil, 403, `belongs to the author \"author\"`},
		{"bob deletes it", bob, "DELETE", "/api/v1/apps/own", nil, 403, `belongs to the author \"author\"`},
		{"admin replaces it", "admintok", "POST", "/api/v1/apps", archiveOf(t, "own", nil), 201, `"owner": "author"`},
		{"bob deploys his own", bob, "POST", "/api/v1/apps", archiveOf(t, "bobs", nil), 201, `"owner": "bob"`},
		{"bob redeploys", bob, "POST", "/api/v1/apps", archiveOf(t, "bobs", nil), 201, `"version": 2`},
		{"carol replaces bob's", carol, "POST", "/api/v1/apps", archiveOf(t, "bobs", nil), 403, `belongs to the author \"bob\"`},
		{"shared author disables bob's", "authortok", "POST", "/api/v1/apps/bobs/disable", nil, 403, `belongs to the author \"bob\"`},
		{"bob disables his own", bob, "POST", "/api/v1/apps/bobs/disable", nil, 200, `"disabled": true`},
		{"bob replaces a start-up app", bob, "POST", "/api/v1/apps", archiveOf(t, "hello", nil), 403, `belongs to the author \"admin\"`},
		{"unknown app", bob, "DELETE", "/api/v1/apps/nope", nil, 404, "no application"},
		{"bob deletes his own", bob, "DELETE", "/api/v1/apps/bobs", nil, 200, `"removed": true`},
		{"carol takes the freed mount point", carol, "POST", "/api/v1/apps", archiveOf(t, "bobs", nil), 201, `"owner": "carol"`},
		{"authors cannot manage authors", bob, "GET", "/api/v1/authors", nil, 403, "needs the admin token"},
		{"list authors shows no tokens", "admintok", "GET", "/api/v1/authors", nil, 200, `"name": "bob"`},
		{"duplicate author", "admintok", "POST", "/api/v1/authors", []byte(`{"name":"bob"}`), 409, "already exists"},
		{"reserved author name", "admintok", "POST", "/api/v1/authors", []byte(`{"name":"author"}`), 400, "reserved"},
		{"bad author name", "admintok", "POST", "/api/v1/authors", []byte(`{"name":"Bob Smith"}`), 400, "lowercase"},
		{"remove carol", "admintok", "DELETE", "/api/v1/authors/carol", nil, 200, `"removed": true`},
		{"carol's token is dead", carol, "GET", "/api/v1/apps", nil, 401, "invalid token"},
		{"remove unknown author", "admintok", "DELETE", "/api/v1/authors/carol", nil, 404, "no author"},
	}
	for _, s := range steps {
		st, body := call(t, srv, s.token, s.method, s.path, s.body)
		if st != s.wantStatus || !strings.Contains(body, s.wantBody) {
			t.Fatalf("%s: got %d %s, want %d with %q", s.name, st, body, s.wantStatus, s.wantBody)
		}
	}
	if _, body := call(t, srv, "admintok", "GET", "/api/v1/authors", nil); strings.Contains(body, "cba_") || strings.Contains(body, "oken") {
		t.Fatalf("author list leaks tokens: %s", body)
	}
	var rec storedAuthor
	if ok, _ := m.state.Get("authors", "bob", &rec); !ok || rec.TokenHash != tokenHash(bob) || strings.Contains(rec.TokenHash, bob) {
		t.Fatalf("bob's record: %+v", rec)
	}
}

// TestDeployReportsWorkerFailures: a deploy is 201 only when every worker
// took the new version; otherwise 502 names the workers and why, and the
// version stays current for workers that register later.
func TestDeployReportsWorkerFailures(t *testing.T) {
	m, srv := apiMaster(t)
	good := addWorker(t, m, "w-good")
	bad := addWorker(t, m, "w-bad")
	bad.failAdd.Store(true)
	st, body := call(t, srv, "authortok", "POST", "/api/v1/apps", archiveOf(t, "dep", nil))
	if st != http.StatusBadGateway || !strings.Contains(body, `"worker": "w-bad"`) || !strings.Contains(body, "disk full") ||
		!strings.Contains(body, "1 of 2 workers did not install it") || strings.Contains(body, `"worker": "w-good"`) {
		t.Fatalf("deploy with a failing worker: %d %s", st, body)
	}
	if !good.hasApp("dep") {
		t.Fatal("the healthy worker did not get the app")
	}
	if a, ok := m.apps.Get("dep"); !ok || a.Version != 1 {
		t.Fatalf("the version was not kept on the master: %+v", a)
	}
	if late := addWorker(t, m, "w-late"); !late.hasApp("dep") {
		t.Fatal("a worker registering later did not get the app")
	}
	bad.failAdd.Store(false)
	if st, body := call(t, srv, "authortok", "POST", "/api/v1/apps", archiveOf(t, "dep", nil)); st != http.StatusCreated {
		t.Fatalf("deploy with healthy workers: %d %s", st, body)
	}
}

// TestLargeBundleChunked: an app over the RMI frame limit reaches workers
// as a stub whose archive they fetch by chunks, on deploy and on
// registration.
func TestLargeBundleChunked(t *testing.T) {
	m, srv := apiMaster(t)
	w := addWorker(t, m, "w-a")
	big := make([]byte, 9<<20) // random: does not compress below the 8 MiB frame
	_, _ = rand.Read(big)
	st, body := call(t, srv, "authortok", "POST", "/api/v1/apps", archiveOf(t, "big", map[string][]byte{"big.bin": big}))
	if st != http.StatusCreated {
		t.Fatalf("deploying a 9 MiB file: %d %s", st, body)
	}
	check := func(f *fakeWorker) {
		t.Helper()
		f.mu.Lock()
		app, ok := f.apps["big"]
		f.mu.Unlock()
		if !ok || app.Files != nil || app.ArchiveSize == 0 {
			t.Fatalf("worker %s got %v (files %d, archive %d), want a stub", f.id, ok, len(app.Files), app.ArchiveSize)
		}
		files := fetchChunks(t, f, app)
		if !bytes.Equal(files["big.bin"], big) {
			t.Fatalf("worker %s: reassembled big.bin is %d bytes, differs", f.id, len(files["big.bin"]))
		}
	}
	check(w)
	check(addWorker(t, m, "w-late")) // registration reply stays under the frame limit
	// A superseded version is refused by name, not served half.
	_, err := contract.BundlesClient{C: w.conn}.BundleChunk(context.Background(), wire.BundleChunkRequest{Mount: "big", Version: 7})
	if code(err) != wire.CodeInvalid || !strings.Contains(err.Error(), "no longer current") {
		t.Fatalf("old version: %v", err)
	}
}

// fetchChunks does what a worker does with a stub.
func fetchChunks(t *testing.T, f *fakeWorker, app wire.App) map[string][]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var buf []byte
	calls := 0
	for int64(len(buf)) < app.ArchiveSize {
		chunk, err := contract.BundlesClient{C: f.conn}.BundleChunk(ctx, wire.BundleChunkRequest{Mount: app.MountPoint, Version: app.Version, Offset: int64(len(buf))})
		if err != nil {
			t.Fatal(err)
		}
		if len(chunk) == 0 || len(chunk) > wire.BundleChunkSize {
			t.Fatalf("chunk of %d bytes", len(chunk))
		}
		buf = append(buf, chunk...)
		calls++
	}
	if calls < 2 {
		t.Fatalf("%d bytes in %d chunk(s)", len(buf), calls)
	}
	sum := sha256.Sum256(buf)
	if hex.EncodeToString(sum[:]) != app.ArchiveSum {
		t.Fatal("checksum mismatch")
	}
	b, err := bundle.Unpack(bytes.NewReader(buf), bundle.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return b.Files
}

// storedAuthor is an author as the state store keeps it (bucket "authors"),
// written out here so that a change of the layout an existing state.db has
// fails the tests.
type storedAuthor struct {
	TokenHash string    `json:"tokenHash"` // hex SHA-256
	Created   time.Time `json:"created"`
}

func tokenHash(tok string) string {
	s := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(s[:])
}
