package master

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cloudbrowser-go/cloudbrowser/internal/bundle"
)

func testBundle(t *testing.T, mount, content string) *bundle.Bundle {
	t.Helper()
	b, err := bundle.FromFiles(map[string][]byte{
		"app.json":   []byte(`{"name":"T","mountPoint":"` + mount + `","entry":"index.html"}`),
		"index.html": []byte(content),
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestAppStore(t *testing.T) {
	s := &appStore{dir: t.TempDir()}
	for v := 1; v <= 4; v++ {
		if err := s.save(testBundle(t, "a", "v"+string(rune('0'+v))), v, false); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.save(testBundle(t, "b", "b1"), 1, true); err != nil {
		t.Fatal(err)
	}
	apps, err := s.load()
	if err != nil || len(apps) != 2 {
		t.Fatalf("load: %v %+v", err, apps)
	}
	if a := apps[0]; a.MountPoint != "a" || a.Version != 4 || string(a.Files["index.html"]) != "v4" || a.Disabled {
		t.Fatalf("a: %+v", a)
	}
	if b := apps[1]; !b.Disabled {
		t.Fatal("b should be disabled")
	}
	// Only the current version and the one before are kept.
	ents, _ := os.ReadDir(filepath.Join(s.dir, "a"))
	var kept []string
	for _, e := range ents {
		if _, ok := versionOf(e.Name()); ok {
			kept = append(kept, e.Name())
		}
	}
	if len(kept) != 2 {
		t.Fatalf("kept versions: %v", kept)
	}
	// A damaged app is reported, the others still load.
	_ = os.WriteFile(filepath.Join(s.dir, "b", "state.json"), []byte("{"), 0o600)
	apps, err = s.load()
	if err == nil || len(apps) != 1 || apps[0].MountPoint != "a" {
		t.Fatalf("damaged store: %v %+v", err, apps)
	}
	if err := s.remove("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.dir, "a")); !os.IsNotExist(err) {
		t.Fatal("remove left files")
	}
}
