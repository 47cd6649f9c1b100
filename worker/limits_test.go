package worker

import (
	"context"
	"errors"
	"testing"

	"github.com/cloudbrowser-go/cloudbrowser/internal/bundle"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/browser"
	"github.com/cloudbrowser-go/cloudbrowser/worker/httpserve"
)

// Manifest settings that shape browsers: limits and the navigation policy.
func TestManifestLimitsAndNavigation(t *testing.T) {
	w, _ := newTestWorker(t)
	ctx := context.Background()
	files := map[string][]byte{
		"app.json": []byte(`{"name":"L","mountPoint":"lim","entry":"index.html","strategy":"multiInstance",
			"browserLimit":{"perUser":2,"perInstance":3},
			"navigation":{"allow":["https://*.ok.example/*"],"deny":["https://bad.ok.example/*"]}}`),
		"index.html": []byte("x"),
	}
	b, err := bundle.FromFiles(files)
	if err != nil {
		t.Fatal(err)
	}
	app := b.App()
	if err := w.apps.AddApplication(ctx, app); err != nil {
		t.Fatal(err)
	}
	iid := "w-test.limitslimits"
	if err := w.apps.CreateInstance(ctx, wire.CreateInstance{App: app, InstanceID: iid, Owner: "alice"}); err != nil {
		t.Fatal(err)
	}
	in, _ := w.instances.get(iid)
	var alices []*vbrowser
	for i := 0; i < 2; i++ {
		vb, err := w.browsers.newBrowser(ctx, in, "alice", false)
		if err != nil {
			t.Fatalf("browser %d: %v", i, err)
		}
		alices = append(alices, vb)
	}
	if _, err := w.browsers.newBrowser(ctx, in, "alice", false); !errors.Is(err, httpserve.ErrBrowserLimit) {
		t.Fatalf("third browser of alice: %v, want the per-user limit", err)
	}
	if _, err := w.browsers.newBrowser(ctx, in, "bob", false); err != nil {
		t.Fatalf("bob's browser: %v", err)
	}
	if _, err := w.browsers.newBrowser(ctx, in, "carol", false); !errors.Is(err, httpserve.ErrBrowserLimit) {
		t.Fatalf("fourth browser of the instance: %v, want the per-instance limit", err)
	}
	// The navigation policy travels with the browser.
	for url, ok := range map[string]bool{
		"https://www.ok.example/page": true,
		"https://bad.ok.example/page": false,
		"https://elsewhere.example/":  false,
		w.entryURL(in):                true,
	} {
		err := alices[0].b.Navigate(ctx, url)
		if ok != (err == nil) || (!ok && !errors.Is(err, browser.ErrBlocked)) {
			t.Errorf("navigate %s: %v (allowed: %v)", url, err, ok)
		}
	}
}
