package jobs

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/testutil"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser/chromium"
	"github.com/cloudbrowser-go/cloudbrowser/worker/pool"
	"github.com/cloudbrowser-go/cloudbrowser/worker/seqrun"
)

// poolLeaser leases from the general pool of a real pool.Manager.
type poolLeaser struct{ m *pool.Manager }

func (l poolLeaser) Lease(ctx context.Context, app string, _ []string) (Lease, error) {
	return l.m.Lease(ctx, app, nil)
}

// TestChromiumJobs runs renders and checks in real Chromium browsers of a
// real pool against a local site.
func TestChromiumJobs(t *testing.T) {
	testutil.NeedChromium(t)
	if testing.Short() {
		t.Skip("short")
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/page", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "<!doctype html><title>Page</title><p>some text")
	})
	mux.HandleFunc("/gone", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "gone", http.StatusGone) })
	site := httptest.NewServer(mux)
	defer site.Close()

	ctx := context.Background()
	rt, err := chromium.New(ctx, chromium.Config{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	m, err := pool.NewManager(pool.ManagerConfig{
		Types:   map[string]pool.BrowserType{pool.TypeChromium: {Factory: rt, Max: 4}},
		Runner:  &seqrun.Runner{},
		Logger:  zerolog.Nop(),
		Options: func(string) (browser.Options, error) { return browser.Options{}, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	r := &fakeReporter{}
	e := New(Config{Slots: 3}, poolLeaser{m}, r)
	defer e.Close(context.Background())

	runs := []wire.JobRun{
		{ID: "render", Attempt: 1, Spec: wire.JobSpec{Kind: wire.JobRender, URL: site.URL + "/page", Width: 400, Height: 300}},
		{ID: "check", Attempt: 1, Spec: wire.JobSpec{Kind: wire.JobCheck, URL: site.URL + "/page"}},
		{ID: "gone", Attempt: 1, Spec: wire.JobSpec{Kind: wire.JobCheck, URL: site.URL + "/gone"}},
	}
	for _, run := range runs {
		if err := e.Start(run); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 30*time.Second, testutil.Cond("three outcomes", func() bool { return len(r.outcomes()) == 3 }))
	byID := map[string]wire.JobOutcome{}
	for _, o := range r.outcomes() {
		byID[o.ID] = o
	}
	o := byID["render"]
	if o.Err != "" || o.Status != 200 || o.Title != "Page" || o.ContentType != "image/png" {
		t.Fatalf("render outcome %+v", o)
	}
	img, err := png.Decode(bytes.NewReader(o.Body))
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 400 || b.Dy() != 300 {
		t.Fatalf("render is %v, want 400x300", b)
	}
	if o := byID["check"]; o.Err != "" || o.Check != wire.CheckOK || o.Hash != hash([]byte("some text")) {
		t.Fatalf("check outcome %+v", o)
	}
	if o := byID["gone"]; o.Err != "" || o.Check != wire.CheckUnavailable || o.Reason != "HTTP 410" {
		t.Fatalf("gone outcome %+v", o)
	}
}
