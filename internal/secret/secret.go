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
)

// MinLen is the shortest secret accepted, in bytes.
const MinLen = 16

// LoadOrCreate returns the hex secret stored at path, creating a random one
// (32 bytes) with mode 0600 if the file does not exist.
func LoadOrCreate(path string) (string, error) {
	s, err := Load(path)
	if err == nil {
		return s, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("create secret dir: %w", err)
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generate secret: %w", err)
	}
	s = hex.EncodeToString(b)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) { // lost a race with another process: use theirs
		return Load(path)
	}
	if err != nil {
		return "", fmt.Errorf("create secret file: %w", err)
	}
	if _, err := f.WriteString(s + "\n"); err != nil {
		f.Close()
		return "", fmt.Errorf("write secret file: %w", err)
	}
	return s, f.Close()
}

// Load reads a secret file and refuses files others can read.
func Load(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("secret file: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("secret file %s has mode %v: must not be readable by group or others (chmod 600)", path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("secret file: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if err := Check(s); err != nil {
		return "", fmt.Errorf("secret file %s: %w", path, err)
	}
	return s, nil
}

// Check validates a secret given in configuration.
func Check(s string) error {
	if len(s) < MinLen {
		return fmt.Errorf("secret is %d bytes, need at least %d", len(s), MinLen)
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

// Write stores s at path with mode 0600 (creating the directory 0700),
// replacing what was there; a file that already holds s is left alone.
func Write(path, s string) error {
	if old, err := Load(path); err == nil && old == s {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create secret dir: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write secret file: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if _, err := tmp.WriteString(s + "\n"); err != nil {
		tmp.Close()
		return fmt.Errorf("write secret file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write secret file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write secret file: %w", err)
	}
	return nil
}
