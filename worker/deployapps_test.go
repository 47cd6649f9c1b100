package worker

import (
	"context"
	"strings"
	"testing"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// TestRegistrationKeepsConcurrentPushes: the registration list is applied
// after large apps are fetched; a push or removal that arrived meanwhile is
// newer and must survive it.
func TestRegistrationKeepsConcurrentPushes(t *testing.T) {
	w, _ := newTestWorker(t) // has /hello
	ctx := context.Background()
	files := map[string][]byte{"index.html": []byte("x")}
	epoch := w.catalog.startRegistration()
	if err := w.apps.AddApplication(ctx, wire.App{MountPoint: "dep", Entry: "index.html", Version: 2, Files: files}); err != nil {
		t.Fatal(err)
	}
	if err := w.apps.RemoveApplication(ctx, "hello"); err != nil {
		t.Fatal(err)
	}
	w.catalog.setApps(ctx, nil, epoch, []wire.App{
		{MountPoint: "dep", Entry: "index.html", Version: 1, Files: files},
		{MountPoint: "hello", Entry: "index.html", Version: 1, Files: files},
		{MountPoint: "other", Entry: "index.html", Version: 1, Files: files},
	})
	if a, ok := w.catalog.app("dep"); !ok || a.Version != 2 {
		t.Fatalf("/dep after registration: %v version %d, want the pushed version 2", ok, a.Version)
	}
	if _, ok := w.catalog.app("hello"); ok {
		t.Fatal("/hello, removed during the registration, came back")
	}
	if _, ok := w.catalog.app("other"); !ok {
		t.Fatal("/other of the registration list missing")
	}
	// The next registration's list is authoritative again.
	w.catalog.setApps(ctx, nil, w.catalog.startRegistration(), []wire.App{{MountPoint: "other", Entry: "index.html", Version: 1, Files: files}})
	if _, ok := w.catalog.app("dep"); ok {
		t.Fatal("/dep survived a later registration that no longer lists it")
	}
}

// TestWorkerAppLimits: MaxAppBytes refuses an app by name, and a stub
// without a master connection is refused rather than installed empty.
func TestWorkerAppLimits(t *testing.T) {
	w, _ := newTestWorker(t)
	w.cfg.MaxAppBytes = 10
	ctx := context.Background()
	tests := []struct {
		name string
		app  wire.App
		want string // "" = installed
	}{
		{"under the limit", wire.App{MountPoint: "small", Entry: "index.html", Files: map[string][]byte{"index.html": []byte("0123456789")}}, ""},
		{"over the limit", wire.App{MountPoint: "big", Entry: "index.html", Files: map[string][]byte{"index.html": []byte("0123456789x")}}, "/big is 11 bytes, over this worker's limit of 10 bytes (MaxAppBytes)"},
		{"stub without a connection", wire.App{MountPoint: "stub", Entry: "index.html", ArchiveSize: 100, ArchiveSum: "00"}, "no master connection"},
	}
	for _, tc := range tests {
		err := w.apps.AddApplication(ctx, tc.app)
		_, installed := w.catalog.app(tc.app.MountPoint)
		if tc.want == "" {
			if err != nil || !installed {
				t.Errorf("%s: %v (installed %v)", tc.name, err, installed)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || installed {
			t.Errorf("%s: got %v (installed %v), want an error containing %q", tc.name, err, installed, tc.want)
		}
	}
}
