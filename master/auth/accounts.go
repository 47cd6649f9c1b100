package auth

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/cloudbrowser-go/cloudbrowser/internal/atomicfile"
	"github.com/cloudbrowser-go/cloudbrowser/internal/session"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// Accounts are the local user accounts, kept by the master in
// <data-dir>/users.json (mode 0600) with bcrypt password hashes.
//
// Sessions are stateless signed cookies, so ending them early needs a
// list: a password change or a removal records a revocation (the user's
// sessions issued until now are refused), kept in <data-dir>/revoked.json
// for one session lifetime and pushed to every worker.
type Accounts struct {
	path        string // "" = in memory only
	revokedPath string
	now         func() time.Time
	// onRevoke tells the workers (nil in tests).
	onRevoke func(wire.Revocation)

	mu      sync.Mutex
	users   map[string]string // name -> bcrypt hash
	revoked map[string]int64  // name -> sessions issued at or before this (Unix s) are refused
}

var userNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// MinPassword is the shortest password accepted.
const MinPassword = 8

// LoadAccounts reads the accounts kept at path ("" = in memory only) and
// the revocations beside it. onRevoke (may be nil) passes each saved
// revocation on to the workers.
func LoadAccounts(path string, now func() time.Time, onRevoke func(wire.Revocation)) (*Accounts, error) {
	if now == nil {
		now = time.Now
	}
	a := &Accounts{path: path, now: now, onRevoke: onRevoke, users: map[string]string{}, revoked: map[string]int64{}}
	if path == "" {
		return a, nil
	}
	a.revokedPath = filepath.Join(filepath.Dir(path), "revoked.json")
	if err := readJSONFile(path, &a.users, "every account is lost"); err != nil {
		return nil, fmt.Errorf("accounts: %w", err)
	}
	if err := readJSONFile(a.revokedPath, &a.revoked, "revoked sessions stay valid until they expire"); err != nil {
		return nil, fmt.Errorf("accounts: %w", err)
	}
	return a, nil
}

// readJSONFile decodes path into v; a missing file leaves v as it is. An
// empty or malformed file (written by an older version that did not sync,
// or damaged on disk) is named with how to recover; lose is what deleting
// it costs.
func readJSONFile(path string, v any, lose string) error {
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return fmt.Errorf("%s is empty (a crash while it was written?): restore it from a backup, or delete it (%s)", path, lose)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s is corrupt (%v): restore it from a backup, or delete it (%s)", path, err, lose)
	}
	return nil
}

func (a *Accounts) saveLocked() error {
	if a.path == "" {
		return nil
	}
	b, _ := json.MarshalIndent(a.users, "", "  ")
	if err := atomicfile.WriteFile(a.path, b, 0o600); err != nil {
		return fmt.Errorf("accounts: %w", err)
	}
	b, _ = json.MarshalIndent(a.revoked, "", "  ")
	if err := atomicfile.WriteFile(a.revokedPath, b, 0o600); err != nil {
		return fmt.Errorf("accounts: %w", err)
	}
	return nil
}

// revokeLocked ends name's current sessions and forgets revocations that
// outlived every session they could refuse.
func (a *Accounts) revokeLocked(name string) wire.Revocation {
	now := a.now()
	for n, before := range a.revoked {
		if now.Sub(time.Unix(before, 0)) > session.TTL {
			delete(a.revoked, n)
		}
	}
	a.revoked[name] = now.Unix()
	return wire.Revocation{User: name, Before: now.Unix()}
}

// Revocations lists the revocations still in force, for registering
// workers.
func (a *Accounts) Revocations() []wire.Revocation {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	out := []wire.Revocation{}
	for n, before := range a.revoked {
		if now.Sub(time.Unix(before, 0)) <= session.TTL {
			out = append(out, wire.Revocation{User: n, Before: before})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].User < out[j].User })
	return out
}

// tell passes a saved revocation on to the workers.
func (a *Accounts) tell(rev wire.Revocation) {
	if a.onRevoke != nil {
		a.onRevoke(rev)
	}
}

func checkAccount(name, password string) error {
	if !userNameRe.MatchString(name) || len(name) >= 5 && name[:5] == "anon-" {
		return wire.Errorf(wire.CodeInvalid, "user name %q: use 1-64 lowercase letters, digits, '.', '_' or '-', not starting with anon-", name)
	}
	if len(password) < MinPassword || len(password) > 72 {
		return wire.Errorf(wire.CodeInvalid, "password: must be %d to 72 bytes", MinPassword)
	}
	return nil
}

// Add creates an account; SetPassword changes one.
func (a *Accounts) Add(name, password string) error { return a.set(name, password, false) }

// SetPassword changes an existing account's password.
func (a *Accounts) SetPassword(name, password string) error { return a.set(name, password, true) }

func (a *Accounts) set(name, password string, mustExist bool) error {
	if err := checkAccount(name, password); err != nil {
		return err
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.DefaultCost)
	if err != nil {
		return fmt.Errorf("accounts: %w", err)
	}
	a.mu.Lock()
	_, exists := a.users[name]
	switch {
	case mustExist && !exists:
		a.mu.Unlock()
		return wire.Err(wire.CodeUnknownUser, "no user "+name)
	case !mustExist && exists:
		a.mu.Unlock()
		return wire.Err(wire.CodeInvalid, "user "+name+" already exists")
	}
	a.users[name] = string(hash)
	var rev wire.Revocation
	if mustExist { // a new password ends the sessions the old one opened
		rev = a.revokeLocked(name)
	}
	err = a.saveLocked()
	a.mu.Unlock()
	if err == nil && mustExist {
		a.tell(rev)
	}
	return err
}

// Remove deletes an account and ends its sessions.
func (a *Accounts) Remove(name string) error {
	a.mu.Lock()
	if _, ok := a.users[name]; !ok {
		a.mu.Unlock()
		return wire.Err(wire.CodeUnknownUser, "no user "+name)
	}
	delete(a.users, name)
	rev := a.revokeLocked(name)
	err := a.saveLocked()
	a.mu.Unlock()
	if err == nil {
		a.tell(rev)
	}
	return err
}

// List returns the account names.
func (a *Accounts) List() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]string, 0, len(a.users))
	for n := range a.users {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// dummyHash makes a login for an unknown user cost as much as a wrong
// password, so timing does not reveal which names exist.
var dummyHash, _ = bcrypt.GenerateFromPassword([]byte("not a password of anybody"), bcrypt.DefaultCost)

// Verify checks a password.
func (a *Accounts) Verify(name, password string) bool {
	a.mu.Lock()
	hash, ok := a.users[name]
	a.mu.Unlock()
	if !ok {
		_ = bcrypt.CompareHashAndPassword(dummyHash, []byte(password))
		return false
	}
	return bcrypt.CompareHashAndPassword([]byte(hash), []byte(password)) == nil
}
