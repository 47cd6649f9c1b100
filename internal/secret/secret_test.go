package secret

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestLoadOrCreate(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sub", "secret")
	a, err := LoadOrCreate(p)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	b, err := LoadOrCreate(p)
	if err != nil || a != b {
		t.Fatalf("second load gave %q, %v; want %q", b, err, a)
	}
}

func TestLoadRejects(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		content string
		mode    os.FileMode
	}{
		{"world-readable", "0123456789abcdef0123", 0o644},
		{"short", "short", 0o600},
	} {
		p := filepath.Join(dir, tc.name)
		if err := os.WriteFile(p, []byte(tc.content), tc.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, tc.mode); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(p); err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
	// A directory (a mount or copy gone wrong) is named as such, not by
	// its mode.
	sub := filepath.Join(dir, "keys")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(sub); err == nil || !strings.Contains(err.Error(), sub+" is a directory") {
		t.Errorf("directory: %v", err)
	}
}

func TestDeriveSeparatesPurposes(t *testing.T) {
	a, b := Derive("s3cret-s3cret-s3cret", "gossip", 32), Derive("s3cret-s3cret-s3cret", "session", 32)
	if bytes.Equal(a, b) || len(a) != 32 {
		t.Fatal("derived keys must differ per purpose")
	}
}

// Role keys are deterministic, distinct per role and from the secret, and
// stored like a secret.
func TestRoleKey(t *testing.T) {
	const s = "0123456789abcdef0123456789abcdef"
	w, p := RoleKey(s, RoleWorker), RoleKey(s, RoleProxy)
	if w != RoleKey(s, RoleWorker) || w == p || w == s || len(w) != 64 {
		t.Fatalf("worker %q proxy %q", w, p)
	}
	if RoleKey("another-secret-0123456789", RoleWorker) == w {
		t.Fatal("role key does not depend on the secret")
	}
	path := filepath.Join(t.TempDir(), "worker.key")
	for _, k := range []string{w, p} { // a second Write replaces
		if err := Write(path, k); err != nil {
			t.Fatal(err)
		}
		got, err := Load(path) // refuses group/other-readable files
		if err != nil || got != k {
			t.Fatalf("Load = %q, %v; want %q", got, err, k)
		}
	}
}

// An empty or corrupt secret or token file (e.g. left by a crash at first
// start) is refused with an error naming it and saying how to recover, and
// is not replaced behind the operator's back.
func TestLoadOrCreateDamaged(t *testing.T) {
	for _, tc := range []struct {
		name, content, want string
	}{
		{"empty", "", "is empty"},
		{"blank", " \n", "is empty"},
		{"zeros", string(make([]byte, 64)), "is corrupt"},
		{"short", "abc\n", "is corrupt"},
		{"torn", "0123456789abcdef\x00\x00\x00\x00", "is corrupt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, file := range []string{"cluster.secret", "admin.token", "metrics.token"} {
				p := filepath.Join(t.TempDir(), file)
				if err := os.WriteFile(p, []byte(tc.content), 0o600); err != nil {
					t.Fatal(err)
				}
				_, err := LoadOrCreate(p)
				if err == nil {
					t.Fatal("damaged file accepted")
				}
				msg := err.Error()
				for _, w := range []string{p, tc.want, "restore it from a backup", "delete it"} {
					if !strings.Contains(msg, w) {
						t.Errorf("error %q lacks %q", msg, w)
					}
				}
				if !errors.Is(err, ErrDamaged) {
					t.Errorf("error %v is not ErrDamaged", err)
				}
				if b, _ := os.ReadFile(p); string(b) != tc.content {
					t.Errorf("file changed to %q", b)
				}
			}
		})
	}
}

// LoadOrCreate leaves no temporary file and a complete secret; concurrent
// first starts agree on one secret.
func TestLoadOrCreateRace(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "cluster.secret")
	got := make([]string, 8)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() {
			s, err := LoadOrCreate(p)
			if err != nil {
				t.Error(err)
			}
			got[i] = s
		})
	}
	wg.Wait()
	for _, s := range got {
		if s != got[0] || len(s) != 64 {
			t.Fatalf("secrets differ: %q", got)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("dir holds %d entries, want only the secret", len(ents))
	}
}

// A worker id's key is its own: stable, different for every id, and
// neither the role's key nor the cluster secret.
func TestWorkerKey(t *testing.T) {
	const s = "0123456789abcdef0123456789abcdef"
	a, b := WorkerKey(s, "w-a"), WorkerKey(s, "w-b")
	if a != WorkerKey(s, "w-a") || a == b || a == RoleKey(s, RoleWorker) || a == s || len(a) != 64 {
		t.Fatalf("keys %q %q", a, b)
	}
	if Check(a) != nil {
		t.Fatalf("a worker key does not pass Check: %v", Check(a))
	}
	if WorkerKey(s+"x", "w-a") == a {
		t.Fatal("another cluster's secret gives the same key")
	}
}
