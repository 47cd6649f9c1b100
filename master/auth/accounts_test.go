package auth

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/session"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// TestAccountRevocations: a password change or a removal ends the user's
// sessions (a revocation the workers are told of), revocations survive a
// restart of the master and are forgotten once no session they could
// refuse is left.
func TestAccountRevocations(t *testing.T) {
	dir := t.TempDir()
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	var told []wire.Revocation
	a, err := LoadAccounts(filepath.Join(dir, "users.json"), clock, func(r wire.Revocation) { told = append(told, r) })
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name    string
		do      func() error
		advance time.Duration     // the clock moves before the step
		want    []wire.Revocation // a.Revocations() afterwards
		told    int               // revocations pushed so far
	}{
		{"a new account revokes nothing", func() error { return a.Add("alice", "password-1") }, 0, []wire.Revocation{}, 0},
		{"a second account", func() error { return a.Add("bob", "password-2") }, time.Second, []wire.Revocation{}, 0},
		{"passwd revokes", func() error { return a.SetPassword("alice", "password-3") }, 0,
			[]wire.Revocation{{User: "alice", Before: 1_800_000_001}}, 1},
		{"remove revokes", func() error { return a.Remove("bob") }, time.Hour,
			[]wire.Revocation{{User: "alice", Before: 1_800_000_001}, {User: "bob", Before: 1_800_003_601}}, 2},
		{"failed calls revoke nothing", func() error {
			if a.SetPassword("nobody", "password-4") == nil || a.Remove("nobody") == nil {
				t.Fatal("changes to an unknown user succeeded")
			}
			return nil
		}, 0, []wire.Revocation{{User: "alice", Before: 1_800_000_001}, {User: "bob", Before: 1_800_003_601}}, 2},
		{"alice's outlived every session", func() error { return nil }, session.TTL - time.Minute,
			[]wire.Revocation{{User: "bob", Before: 1_800_003_601}}, 2},
	}
	for _, s := range steps {
		now = now.Add(s.advance)
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := a.Revocations(); !slices.Equal(got, s.want) {
			t.Fatalf("%s: revocations %v, want %v", s.name, got, s.want)
		}
		if len(told) != s.told {
			t.Fatalf("%s: %d revocations pushed, want %d", s.name, len(told), s.told)
		}
	}
	// A restarted master still refuses bob's old sessions.
	b, err := LoadAccounts(filepath.Join(dir, "users.json"), clock, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Revocations(); !slices.Equal(got, []wire.Revocation{{User: "bob", Before: 1_800_003_601}}) {
		t.Fatalf("after reload: %v", got)
	}
	if fi, err := os.Stat(filepath.Join(dir, "revoked.json")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("revoked.json: %v %v", fi, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "revoked.json"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadAccounts(filepath.Join(dir, "users.json"), clock, nil); err == nil {
		t.Fatal("a corrupt revoked.json was accepted")
	}
}

// TestAccountsDamagedFiles: an empty or corrupt accounts or revocations
// file stops the master with an error naming the file and the way out.
func TestAccountsDamagedFiles(t *testing.T) {
	for _, tc := range []struct {
		file, content, want string
	}{
		{"users.json", "", "is empty"},
		{"users.json", "\x00\x00\x00", "is corrupt"},
		{"users.json", `{"bob":`, "is corrupt"},
		{"revoked.json", "", "is empty"},
		{"revoked.json", "{not json", "is corrupt"},
	} {
		t.Run(tc.file+"/"+tc.want, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, tc.file)
			if err := os.WriteFile(p, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := LoadAccounts(filepath.Join(dir, "users.json"), time.Now, nil)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range []string{p, tc.want, "restore it from a backup", "delete it"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}
