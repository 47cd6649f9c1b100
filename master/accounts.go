package master

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"sort"
	"sync"

	"golang.org/x/crypto/bcrypt"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

// Accounts are the local user accounts, kept by the master in
// <data-dir>/users.json (mode 0600) with bcrypt password hashes.
type Accounts struct {
	path string // "" = in memory only

	mu    sync.Mutex
	users map[string]string // name -> bcrypt hash
}

var userNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// MinPassword is the shortest password accepted.
const MinPassword = 8

func loadAccounts(path string) (*Accounts, error) {
	a := &Accounts{path: path, users: map[string]string{}}
	if path == "" {
		return a, nil
	}
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return a, nil
	}
	if err != nil {
		return nil, fmt.Errorf("accounts: %w", err)
	}
	if err := json.Unmarshal(raw, &a.users); err != nil {
		return nil, fmt.Errorf("accounts: %s: %w", path, err)
	}
	return a, nil
}

func (a *Accounts) saveLocked() error {
	if a.path == "" {
		return nil
	}
	b, _ := json.MarshalIndent(a.users, "", "  ")
	if err := writeAtomic(a.path, b); err != nil {
		return fmt.Errorf("accounts: %w", err)
	}
	return nil
}

func checkAccount(name, password string) error {
	if !userNameRe.MatchString(name) || len(name) >= 5 && name[:5] == "anon-" {
		return wire.Errorf(wire.CodeInvalid, fmt.Sprintf("user name %q: use 1-64 lowercase letters, digits, '.', '_' or '-', not starting with anon-", name))
	}
	if len(password) < MinPassword || len(password) > 72 {
		return wire.Errorf(wire.CodeInvalid, fmt.Sprintf("password: must be %d to 72 bytes", MinPassword))
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
	defer a.mu.Unlock()
	_, exists := a.users[name]
	switch {
	case mustExist && !exists:
		return wire.Errorf(wire.CodeUnknownUser, "no user "+name)
	case !mustExist && exists:
		return wire.Errorf(wire.CodeInvalid, "user "+name+" already exists")
	}
	a.users[name] = string(hash)
	return a.saveLocked()
}

// Remove deletes an account.
func (a *Accounts) Remove(name string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.users[name]; !ok {
		return wire.Errorf(wire.CodeUnknownUser, "no user "+name)
	}
	delete(a.users, name)
	return a.saveLocked()
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

// accountService is registered as wire.ObjAccounts: workers check logins,
// under the cluster-wide login limits.
type accountService struct{ g *loginGuard }

// Login checks a login; while the name or the client address is locked
// after repeated failures it answers RetryAfter without checking.
func (s accountService) Login(ctx context.Context, req wire.LoginRequest) (wire.LoginResult, error) {
	return s.g.login(ctx, req), nil
}

// Verify reports whether name/password is a valid login. It is kept for
// workers older than Login: the per-name limit applies (a locked name is
// refused), the per-address one cannot.
func (s accountService) Verify(ctx context.Context, name, password string) (bool, error) {
	return s.g.login(ctx, wire.LoginRequest{User: name, Password: password}).OK, nil
}
