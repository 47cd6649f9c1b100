package master

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/bundle"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/auth"
	"github.com/cloudbrowser-go/cloudbrowser/master/balance"
	"github.com/cloudbrowser-go/cloudbrowser/master/jobs"
	"github.com/cloudbrowser-go/cloudbrowser/master/rendercache"
)

// isolationMaster is a started master with the admin, shared author and
// jobs tokens and its admin API; jobs find every site public and without
// robots.txt, and no worker runs them (they stay queued).
func isolationMaster(t *testing.T) (*Master, *httptest.Server) {
	t.Helper()
	jc := jobs.DefaultConfig()
	jc.Resolver = func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("93.184.215.14")}, nil
	}
	jc.Robots = func(context.Context, string, string) ([]byte, int, error) { return nil, http.StatusNotFound, nil }
	m, err := New(Config{Secret: testSecret, AdminToken: "admintok", AuthorToken: "authortok", JobsToken: "jobstok",
		Apps: testApps, Balancer: balance.LeastLoad, Logger: zerolog.Nop(), Jobs: jc})
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

// poolArchive is a bundle at mount whose pool logs its browsers in.
func poolArchive(t *testing.T, mount string) []byte {
	t.Helper()
	manifest := fmt.Sprintf(`{"name":"Secret","mountPoint":%q,"entry":"index.html",
		"pool":{"enabled":true,"minSize":1,"maxSize":1,"init":[{"navigate":"http://%s.app.cloudbrowser.internal/index.html"}]}}`, mount, mount)
	arch, err := (&bundle.Bundle{Files: map[string][]byte{"app.json": []byte(manifest), "index.html": []byte("signed in")}}).Pack()
	if err != nil {
		t.Fatal(err)
	}
	return arch
}

// apiCall is call with a deadline, so a request the old code let wait for
// a render that never comes fails instead of hanging.
func apiCall(t *testing.T, srv *httptest.Server, token, method, path, body string) (int, http.Header, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, srv.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(raw)
}

// TestJobsIsolation: a job, its result, its cache entries and monitors are
// their submitter's: another principal gets 404 for their ids and does not
// see them in lists; app= needs the right to use the app's pool (owner,
// admin, or a principal the owner granted, until revoked); no author may
// take the name of one of the master's own principals.
func TestJobsIsolation(t *testing.T) {
	m, srv := isolationMaster(t)
	alice := addAuthor(t, srv, "alice")
	bob := addAuthor(t, srv, "bob")
	const admin, jobsTok, shared = "admintok", "jobstok", "authortok"
	if st, body := call(t, srv, alice, "POST", "/api/v1/apps", poolArchive(t, "secret")); st != http.StatusCreated {
		t.Fatalf("alice deploys: %d %s", st, body)
	}
	if st, body := call(t, srv, bob, "POST", "/api/v1/apps", archiveOf(t, "bobs", nil)); st != http.StatusCreated {
		t.Fatalf("bob deploys: %d %s", st, body)
	}
	if !m.apps.pooledLogin("secret") {
		t.Fatal("/secret's pool does not log in")
	}

	// Alice's logged-in render of her account page is cached (as if a
	// worker had rendered it).
	const page = "http://secret.app.cloudbrowser.internal/account.html"
	aliceSpec := wire.JobSpec{Kind: wire.JobRender, URL: page, Format: wire.FormatText, App: "secret", User: "alice"}
	sig, canon, err := m.jobs.Cache().Key(aliceSpec, true)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := m.jobs.Cache().ReserveFor("alice", sig, canon, "seed", rendercache.NoCache); err != nil || res.Status != rendercache.Reserved {
		t.Fatalf("seed: %+v %v", res, err)
	}
	if _, _, err := m.jobs.Cache().Complete(sig, "seed", rendercache.Render{ContentType: "text/plain", Body: []byte("alice's account: 42 EUR")}); err != nil {
		t.Fatal(err)
	}

	const (
		render     = `{"kind":"render","url":"` + page + `","format":"text","app":"secret"}`
		queued     = `{"kind":"render","url":"` + page + `","format":"text","app":"secret","noCache":true}`
		public     = `{"kind":"render","url":"http://93.184.215.14/","format":"text","ignoreRobots":true}`
		publicApp  = `{"kind":"render","url":"http://93.184.215.14/","format":"text","ignoreRobots":true,"app":"hello"}`
		monitor    = `{"kind":"check","url":"` + page + `","app":"secret","interval":"1m"}`
		renderPath = "/api/v1/render?format=text&app=secret&url=" + page
	)
	ids := map[string]string{}
	type step struct {
		name         string
		token        string
		method, path string
		body         string
		status       int
		want         []string // in the body ({id} names an id saved before)
		not          []string // not in the body
		save         string   // save the answer's "id" under this name
	}
	steps := []step{
		// Submit one, with and without app=.
		{"alice renders through her pool", alice, "POST", "/api/v1/jobs", render, 200, []string{`"state": "done"`}, nil, "aliceDone"},
		{"bob names alice's app", bob, "POST", "/api/v1/jobs", render, 403, []string{`"field": "app"`, `pool of the application \"secret\"`}, nil, ""},
		{"the jobs token names alice's app", jobsTok, "POST", "/api/v1/jobs", render, 403, []string{`"field": "app"`}, nil, ""},
		{"the shared author names alice's app", shared, "POST", "/api/v1/jobs", render, 403, []string{`"field": "app"`}, nil, ""},
		{"the admin names alice's app", admin, "POST", "/api/v1/jobs", queued, 202, []string{`"state": "queued"`}, nil, "adminJob"},
		{"bob submits without app", bob, "POST", "/api/v1/jobs", public, 202, []string{`"state": "queued"`}, nil, "bobJob"},
		{"alice queues a render", alice, "POST", "/api/v1/jobs", queued, 202, []string{`"state": "queued"`}, nil, "aliceQueued"},
		{"the jobs token names an admin's app", jobsTok, "POST", "/api/v1/jobs", publicApp, 202, []string{`"state": "queued"`}, nil, ""},
		{"bob names bob's app", bob, "POST", "/api/v1/jobs", strings.Replace(public, `"ignoreRobots":true`, `"ignoreRobots":true,"app":"bobs"`, 1), 202, []string{`"state": "queued"`}, nil, ""},
		// Submit a batch.
		{"bob's batch names alice's app", bob, "POST", "/api/v1/jobs", "[" + public + "," + render + "]", 403, []string{`"field": "jobs[1].app"`}, nil, ""},
		{"alice's batch names her app", alice, "POST", "/api/v1/jobs", "[" + public + "," + queued + "]", 202, []string{`"jobs"`}, nil, ""},
		// Show, result, list, cancel.
		{"bob reads alice's job", bob, "GET", "/api/v1/jobs/{aliceDone}", "", 404, []string{"jobs: not found"}, []string{"secret"}, ""},
		{"bob reads an unknown job", bob, "GET", "/api/v1/jobs/nope", "", 404, []string{"jobs: not found"}, nil, ""},
		{"the jobs token reads alice's job", jobsTok, "GET", "/api/v1/jobs/{aliceDone}", "", 404, []string{"jobs: not found"}, nil, ""},
		{"alice reads her job", alice, "GET", "/api/v1/jobs/{aliceDone}", "", 200, []string{`"id": "{aliceDone}"`}, nil, ""},
		{"the admin reads alice's job", admin, "GET", "/api/v1/jobs/{aliceDone}", "", 200, []string{`"id": "{aliceDone}"`}, nil, ""},
		{"bob reads alice's result", bob, "GET", "/api/v1/jobs/{aliceDone}/result", "", 404, []string{"jobs: not found"}, []string{"42 EUR"}, ""},
		{"the jobs token reads alice's result", jobsTok, "GET", "/api/v1/jobs/{aliceDone}/result", "", 404, nil, []string{"42 EUR"}, ""},
		{"alice reads her result", alice, "GET", "/api/v1/jobs/{aliceDone}/result", "", 200, []string{"alice's account: 42 EUR"}, nil, ""},
		{"the admin reads alice's result", admin, "GET", "/api/v1/jobs/{aliceDone}/result", "", 200, []string{"42 EUR"}, nil, ""},
		{"bob lists jobs", bob, "GET", "/api/v1/jobs", "", 200, []string{"{bobJob}"}, []string{"{aliceDone}", "{aliceQueued}", "{adminJob}"}, ""},
		{"the jobs token lists jobs", jobsTok, "GET", "/api/v1/jobs", "", 200, nil, []string{"{aliceDone}", "{bobJob}"}, ""},
		{"alice lists jobs", alice, "GET", "/api/v1/jobs", "", 200, []string{"{aliceDone}", "{aliceQueued}"}, []string{"{bobJob}", "{adminJob}"}, ""},
		{"bob lists alice's jobs", bob, "GET", "/api/v1/jobs?user=alice", "", 403, []string{`"field": "user"`}, []string{"{aliceDone}"}, ""},
		{"bob lists his own by name", bob, "GET", "/api/v1/jobs?user=bob", "", 200, []string{"{bobJob}"}, nil, ""},
		{"the admin lists every job", admin, "GET", "/api/v1/jobs", "", 200, []string{"{aliceDone}", "{bobJob}", "{adminJob}"}, nil, ""},
		{"the admin lists alice's jobs", admin, "GET", "/api/v1/jobs?user=alice", "", 200, []string{"{aliceDone}"}, []string{"{bobJob}", "{adminJob}"}, ""},
		{"bob cancels alice's job", bob, "DELETE", "/api/v1/jobs/{aliceQueued}", "", 404, []string{"jobs: not found"}, nil, ""},
		{"alice's job still queued", alice, "GET", "/api/v1/jobs/{aliceQueued}", "", 200, []string{`"state": "queued"`}, nil, ""},
		{"alice cancels her job", alice, "DELETE", "/api/v1/jobs/{aliceQueued}", "", 200, []string{`"state": "cancelled"`}, nil, ""},
		{"the admin cancels bob's job", admin, "DELETE", "/api/v1/jobs/{bobJob}", "", 200, []string{`"state": "cancelled"`}, nil, ""},
		// The synchronous render.
		{"bob renders through alice's pool", bob, "GET", renderPath, "", 403, []string{`"field": "app"`}, []string{"42 EUR"}, ""},
		{"the jobs token renders through alice's pool", jobsTok, "GET", renderPath, "", 403, []string{`"field": "app"`}, []string{"42 EUR"}, ""},
		{"alice renders through her pool", alice, "GET", renderPath, "", 200, []string{"alice's account: 42 EUR"}, nil, ""},
		// Monitors.
		{"bob monitors through alice's pool", bob, "POST", "/api/v1/monitors", monitor, 403, []string{`"field": "app"`}, nil, ""},
		{"alice monitors through her pool", alice, "POST", "/api/v1/monitors", monitor, 201, []string{`"app": "secret"`}, nil, "aliceMon"},
		{"bob adds a monitor", bob, "POST", "/api/v1/monitors", `{"kind":"check","url":"http://93.184.215.14/","interval":"1m"}`, 201, nil, nil, "bobMon"},
		{"bob lists monitors", bob, "GET", "/api/v1/monitors", "", 200, []string{"{bobMon}"}, []string{"{aliceMon}"}, ""},
		{"bob lists alice's monitors", bob, "GET", "/api/v1/monitors?user=alice", "", 403, []string{`"field": "user"`}, nil, ""},
		{"bob reads alice's monitor", bob, "GET", "/api/v1/monitors/{aliceMon}", "", 404, []string{"jobs: not found"}, nil, ""},
		{"bob removes alice's monitor", bob, "DELETE", "/api/v1/monitors/{aliceMon}", "", 404, []string{"jobs: not found"}, nil, ""},
		{"alice lists monitors", alice, "GET", "/api/v1/monitors", "", 200, []string{"{aliceMon}"}, []string{"{bobMon}"}, ""},
		{"alice reads her monitor", alice, "GET", "/api/v1/monitors/{aliceMon}", "", 200, []string{"{aliceMon}"}, nil, ""},
		{"the admin lists every monitor", admin, "GET", "/api/v1/monitors", "", 200, []string{"{aliceMon}", "{bobMon}"}, nil, ""},
		{"the admin lists bob's monitors", admin, "GET", "/api/v1/monitors?user=bob", "", 200, []string{"{bobMon}"}, []string{"{aliceMon}"}, ""},
		{"alice removes her monitor", alice, "DELETE", "/api/v1/monitors/{aliceMon}", "", 204, nil, nil, ""},
		// Cache purge: a non-admin purges only their own partition.
		{"bob purges alice's page", bob, "POST", "/api/v1/cache/purge", `{"url":"` + page + `"}`, 200, []string{`"purged": 0`}, nil, ""},
		{"bob purges alice's signature", bob, "POST", "/api/v1/cache/purge", `{"url":"` + sig + `"}`, 200, []string{`"purged": 0`}, nil, ""},
		{"the jobs token purges alice's page", jobsTok, "POST", "/api/v1/cache/purge", `{"url":"` + page + `"}`, 200, []string{`"purged": 0`}, nil, ""},
		{"alice's render still cached", alice, "GET", renderPath, "", 200, []string{"42 EUR"}, nil, ""},
		{"alice purges her page", alice, "POST", "/api/v1/cache/purge", `{"url":"` + page + `"}`, 200, []string{`"purged": 1`}, nil, ""},
		// Granting the use of a pool, and taking it back.
		{"bob grants himself", bob, "PUT", "/api/v1/apps/secret/job-users/bob", "", 403, []string{`belongs to the author \"alice\"`}, nil, ""},
		{"the jobs token grants itself", jobsTok, "PUT", "/api/v1/apps/secret/job-users/jobs", "", 403, nil, nil, ""},
		{"bob reads the grants", bob, "GET", "/api/v1/apps/secret/job-users", "", 403, nil, nil, ""},
		{"grant to nobody", alice, "PUT", "/api/v1/apps/secret/job-users/nobody", "", 404, []string{`"field": "principal"`}, nil, ""},
		{"grant to the admin", alice, "PUT", "/api/v1/apps/secret/job-users/admin", "", 400, []string{`"field": "principal"`}, nil, ""},
		{"grant on an unknown app", alice, "PUT", "/api/v1/apps/nope/job-users/bob", "", 404, []string{"no application"}, nil, ""},
		{"alice grants bob", alice, "PUT", "/api/v1/apps/secret/job-users/bob", "", 200, []string{`"jobUsers": [`, `"bob"`, `"owner": "alice"`}, nil, ""},
		{"alice lists the grants", alice, "GET", "/api/v1/apps/secret/job-users", "", 200, []string{`"bob"`}, nil, ""},
		{"the admin lists the grants", admin, "GET", "/api/v1/apps/secret/job-users", "", 200, []string{`"bob"`}, nil, ""},
		{"bob names alice's app, granted", bob, "POST", "/api/v1/jobs", queued, 202, []string{`"state": "queued"`}, nil, "bobGranted"},
		{"bob monitors through alice's pool, granted", bob, "POST", "/api/v1/monitors", monitor, 201, nil, nil, ""},
		{"alice still does not see bob's job", alice, "GET", "/api/v1/jobs/{bobGranted}", "", 404, nil, nil, ""},
		{"alice revokes bob", alice, "DELETE", "/api/v1/apps/secret/job-users/bob", "", 200, []string{`"jobUsers": []`}, nil, ""},
		{"bob names alice's app, revoked", bob, "POST", "/api/v1/jobs", queued, 403, []string{`"field": "app"`}, nil, ""},
		{"bob renders through alice's pool, revoked", bob, "GET", renderPath, "", 403, []string{`"field": "app"`}, nil, ""},
		{"the admin grants bob", admin, "PUT", "/api/v1/apps/secret/job-users/bob", "", 200, []string{`"bob"`}, nil, ""},
		{"bob names alice's app, granted by the admin", bob, "POST", "/api/v1/jobs", queued, 202, nil, nil, ""},
		// The admin's apps are open to the jobs token until the admin says otherwise.
		{"the admin's app's grants", admin, "GET", "/api/v1/apps/hello/job-users", "", 200, []string{`"owner": "admin"`, `"jobs"`}, nil, ""},
		{"the admin revokes the jobs token", admin, "DELETE", "/api/v1/apps/hello/job-users/jobs", "", 200, []string{`"jobUsers": []`}, nil, ""},
		{"the jobs token names an admin's app, revoked", jobsTok, "POST", "/api/v1/jobs", publicApp, 403, []string{`"field": "app"`}, nil, ""},
		// Reserved names.
		{"an author named jobs", admin, "POST", "/api/v1/authors", `{"name":"jobs"}`, 400, []string{"reserved", `"field": "name"`}, nil, ""},
		{"an author named admin", admin, "POST", "/api/v1/authors", `{"name":"admin"}`, 400, []string{"reserved", `"field": "name"`}, nil, ""},
		{"an author named author", admin, "POST", "/api/v1/authors", `{"name":"author"}`, 400, []string{"reserved", `"field": "name"`}, nil, ""},
		{"a second bob", admin, "POST", "/api/v1/authors", `{"name":"bob"}`, 409, []string{`"field": "name"`}, nil, ""},
	}
	expand := func(s string) string {
		for k, v := range ids {
			s = strings.ReplaceAll(s, "{"+k+"}", v)
		}
		return s
	}
	for _, s := range steps {
		st, _, body := apiCall(t, srv, s.token, s.method, expand(s.path), s.body)
		if st != s.status {
			t.Fatalf("%s: %d %s, want %d", s.name, st, body, s.status)
		}
		for _, w := range s.want {
			if !strings.Contains(body, expand(w)) {
				t.Fatalf("%s: %s, want %q in it", s.name, body, expand(w))
			}
		}
		for _, n := range s.not {
			if n = expand(n); !strings.HasPrefix(n, "{") && strings.Contains(body, n) {
				t.Fatalf("%s: %s, must not contain %q", s.name, body, n)
			}
		}
		if s.save != "" {
			var v struct{ ID string }
			if err := json.Unmarshal([]byte(body), &v); err != nil || v.ID == "" {
				t.Fatalf("%s: no id in %s", s.name, body)
			}
			ids[s.save] = v.ID
		}
	}
	// Another's job id answers exactly as an unknown one: nothing tells
	// that it exists.
	_, _, other := apiCall(t, srv, bob, "GET", "/api/v1/jobs/"+ids["aliceDone"], "")
	_, _, unknown := apiCall(t, srv, bob, "GET", "/api/v1/jobs/nope", "")
	if other != unknown {
		t.Fatalf("another's job: %s; an unknown one: %s", other, unknown)
	}
	// A monitor's jobs are checked as they are submitted: bob's, made while
	// granted, is refused its next job once the grant is gone.
	if _, err := m.apps.setJobUser("secret", "bob", false); err != nil {
		t.Fatal(err)
	}
	if ok, reason := m.apps.jobPolicy(wire.JobSpec{Kind: wire.JobCheck, URL: page, App: "secret", User: "bob"}); ok || !strings.Contains(reason, "may not use the pool") {
		t.Fatalf("policy for a revoked principal: %v %q", ok, reason)
	}
	if ok, _ := m.apps.jobPolicy(wire.JobSpec{Kind: wire.JobCheck, URL: page, App: "secret", User: "alice"}); !ok {
		t.Fatal("policy refuses the owner")
	}
}

// TestJobUsersLifecycle: a grant ends with its principal (a new author of
// the same name does not inherit it) and with its owner's app (an author
// who later deploys at the mount point does not inherit it); a stored
// author under a reserved name cannot act.
func TestJobUsersLifecycle(t *testing.T) {
	m, srv := isolationMaster(t)
	alice := addAuthor(t, srv, "alice")
	bob := addAuthor(t, srv, "bob")
	carol := addAuthor(t, srv, "carol")
	const admin = "admintok"
	const job = `{"kind":"check","url":"http://secret.app.cloudbrowser.internal/","app":"secret"}`
	if st, body := call(t, srv, alice, "POST", "/api/v1/apps", poolArchive(t, "secret")); st != http.StatusCreated {
		t.Fatalf("alice deploys: %d %s", st, body)
	}
	steps := []struct {
		name         string
		token        *string
		method, path string
		body         string
		status       int
	}{
		{"alice grants bob", &alice, "PUT", "/api/v1/apps/secret/job-users/bob", "", 200},
		{"bob may", &bob, "POST", "/api/v1/jobs", job, 202},
		{"bob is removed", ptr(admin), "DELETE", "/api/v1/authors/bob", "", 200},
		{"a new bob", ptr(admin), "POST", "/api/v1/authors", `{"name":"bob"}`, 201},
		{"the new bob may not", &bob, "POST", "/api/v1/jobs", job, 403},
		{"alice grants the new bob", &alice, "PUT", "/api/v1/apps/secret/job-users/bob", "", 200},
		{"alice removes her app", &alice, "DELETE", "/api/v1/apps/secret", "", 200},
		{"carol deploys at the mount point", &carol, "POST", "/api/v1/apps", "", 201},
		{"bob may not use carol's app", &bob, "POST", "/api/v1/jobs", job, 403},
		{"carol's grants", &carol, "GET", "/api/v1/apps/secret/job-users", "", 200},
	}
	for _, s := range steps {
		var st int
		var body string
		switch {
		case s.name == "a new bob":
			bob = addAuthor(t, srv, "bob")
			continue
		case s.name == "carol deploys at the mount point":
			st, body = call(t, srv, *s.token, s.method, s.path, poolArchive(t, "secret"))
		default:
			st, _, body = apiCall(t, srv, *s.token, s.method, s.path, s.body)
		}
		if st != s.status {
			t.Fatalf("%s: %d %s, want %d", s.name, st, body, s.status)
		}
		if s.name == "carol's grants" && !strings.Contains(body, `"jobUsers": []`) {
			t.Fatalf("carol's app inherited alice's grants: %s", body)
		}
	}
	// An author stored under a reserved name before names were reserved
	// does not act as the jobs token's principal.
	if err := m.state.Put("authors", auth.JobsPrincipal, storedAuthor{TokenHash: tokenHash("cba_old"), Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if st, _, body := apiCall(t, srv, "cba_old", "GET", "/api/v1/jobs", ""); st != http.StatusUnauthorized {
		t.Fatalf("a stored author named jobs: %d %s", st, body)
	}
}

func ptr[T any](v T) *T { return &v }
