// Package secret loads or creates the cluster's secrets. A secret comes from
// configuration when given, otherwise it is generated at first start and kept
// in the data directory with 0600 permissions; nothing is hard-coded.
package secret

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/cloudbrowser-go/cloudbrowser/internal/atomicfile"
)

// MinLen is the shortest secret accepted, in bytes.
const MinLen = 16

// ErrDamaged marks a secret file that exists but is empty or corrupt,
// typically after a crash while it was written by an older version.
var ErrDamaged = errors.New("damaged secret file")

// LoadOrCreate returns the hex secret stored at path, creating a random one
// (32 bytes) with mode 0600 if the file does not exist. The file appears
// complete or not at all (atomicfile.CreateExclusive), so a crash at first
// start cannot leave an empty one; an empty or corrupt file found anyway is
// reported with how to recover.
func LoadOrCreate(path string) (string, error) {
	s, err := Load(path)
	if err == nil {
		return s, nil
	}
	if errors.Is(err, ErrDamaged) {
		return "", fmt.Errorf("%w: restore it from a backup, or delete it to have a new one generated at the next start", err)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if err := atomicfile.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("create secret dir: %w", err)
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate secret: %w", err)
	}
	s = hex.EncodeToString(b)
	err = atomicfile.CreateExclusive(path, []byte(s+"\n"), 0o600)
	if errors.Is(err, fs.ErrExist) { // lost a race with another process: use theirs
		return Load(path)
	}
	if err != nil {
		return "", fmt.Errorf("create secret file: %w", err)
	}
	return s, nil
}

// Load reads a secret file and refuses files others can read. An empty or
// corrupt file gives an error matching ErrDamaged that names it.
func Load(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("secret file: %w", err)
	}
	if st.IsDir() {
		return "", fmt.Errorf("secret file %s is a directory, not a key file", path)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("secret file %s has mode %v: must not be readable by group or others (chmod 600)", path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("secret file: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("secret file %s is empty (a crash while it was written?): %w", path, ErrDamaged)
	}
	if err := Check(s); err != nil {
		return "", fmt.Errorf("secret file %s is corrupt (%v): %w", path, err, ErrDamaged)
	}
	return s, nil
}

// Check validates a secret given in configuration: long enough, one line
// of printable characters (a torn write often leaves NUL bytes).
func Check(s string) error {
	if len(s) < MinLen {
		return fmt.Errorf("secret is %d bytes, need at least %d", len(s), MinLen)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return fmt.Errorf("secret has a control character (byte %#02x at %d)", c, i)
		}
	}
	return nil
}

// Derive returns a purpose-specific key of n bytes (HMAC-SHA256 of the
// purpose), so the gossip key, the session key and the RMI key differ.
func Derive(s, purpose string, n int) []byte {
	m := hmac.New(sha256.New, []byte(s))
	m.Write([]byte("cloudbrowser/" + purpose))
	return m.Sum(nil)[:n]
}

// Role names of the processes that get their own key (RoleKey).
const (
	RoleWorker = "worker"
	RoleProxy  = "proxy"
)

// RoleKey derives the key of a role (RoleWorker, RoleProxy) from the
// cluster secret: HKDF-SHA256(secret, info "cloudbrowser role <role>"), hex
// like a generated secret so it is stored and loaded the same way. It
// proves that role only: the cluster secret cannot be computed from it, nor
// another role's key.
func RoleKey(clusterSecret, role string) string {
	k, err := hkdf.Key(sha256.New, []byte(clusterSecret), nil, "cloudbrowser role "+role, 32)
	if err != nil { // only for lengths HKDF cannot produce; 32 is fine
		panic(err)
	}
	return hex.EncodeToString(k)
}

// WorkerKey derives the key of one worker id from the cluster secret, the
// way RoleKey does for a role: it proves the worker role and that id, so
// the id is the worker's own and not a name any worker-key holder may
// claim (docs/architecture.md, "Worker identity").
func WorkerKey(clusterSecret, id string) string {
	return RoleKey(clusterSecret, RoleWorker+" id "+id)
}

// Write stores s at path with mode 0600 (creating the directory 0700),
// replacing what was there atomically and durably; a file that already
// holds s is left alone.
func Write(path, s string) error {
	if old, err := Load(path); err == nil && old == s {
		return nil
	}
	if err := atomicfile.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create secret dir: %w", err)
	}
	if err := atomicfile.WriteFile(path, []byte(s+"\n"), 0o600); err != nil {
		return fmt.Errorf("write secret file: %w", err)
	}
	return nil
}
