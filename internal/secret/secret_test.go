package secret

import (
	"bytes"
	"os"
	"path/filepath"
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
