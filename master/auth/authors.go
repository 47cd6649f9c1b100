package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"regexp"
	"sort"
	"sync"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/state"
)

// authorsBucket is the state store's bucket of authors: name -> authorRecord.
const authorsBucket = "authors"

// reservedNames are the principals the master's own tokens act as, with
// the token: an author of that name would share its jobs, render cache
// partition and grants.
var reservedNames = map[string]string{
	AdminPrincipal.Name: "the admin token",
	SharedAuthor:        "the shared author token (author.token)",
	JobsPrincipal:       "the jobs token (jobs.token)",
	AutomationPrincipal: "the automation token (automation.token)",
}

// authorRecord is an author; only a hash of the token is kept.
type authorRecord struct {
	TokenHash string    `json:"tokenHash"` // hex SHA-256
	Created   time.Time `json:"created"`
}

// Authors manages per-author deploy tokens.
type Authors struct {
	st *state.Store
	// onRemove runs, under mu, after an author's record is deleted: the
	// master drops what was granted to the name, so that an author created
	// later under it cannot slip in between and inherit it.
	onRemove func(name string) error
	mu       sync.Mutex // add and remove: check and write together
}

// NewAuthors keeps the authors in st; onRemove (may be nil) cleans up
// after a removed author.
func NewAuthors(st *state.Store, onRemove func(name string) error) *Authors {
	return &Authors{st: st, onRemove: onRemove}
}

var authorRe = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)

// ValidAuthorName reports whether name has the form of an author's name.
func ValidAuthorName(name string) bool { return authorRe.MatchString(name) }

// AuthorView is an author as the API lists it (never the token).
type AuthorView struct {
	Name    string    `json:"name"`
	Created time.Time `json:"created"`
}

func hashToken(tok string) string {
	s := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(s[:])
}

// Add creates an author and returns its token, shown this once.
func (au *Authors) Add(name string, now time.Time) (string, error) {
	if !authorRe.MatchString(name) {
		return "", wire.Errorf(wire.CodeInvalid, "name %q must be 1-64 lowercase letters, digits, '.', '-' or '_', starting with a letter or digit", name)
	}
	if tok, ok := reservedNames[name]; ok {
		return "", wire.Errorf(wire.CodeInvalid, "name %q is reserved: %s acts as %q; choose another name", name, tok, name)
	}
	au.mu.Lock()
	defer au.mu.Unlock()
	var rec authorRecord
	if ok, _ := au.st.Get(authorsBucket, name, &rec); ok {
		return "", &AuthorExistsError{Name: name}
	}
	tok := "cba_" + rand.Text()
	if err := au.st.Put(authorsBucket, name, authorRecord{TokenHash: hashToken(tok), Created: now.UTC()}); err != nil {
		return "", err
	}
	return tok, nil
}

// AuthorExistsError refuses an author whose name is taken.
type AuthorExistsError struct{ Name string }

func (e *AuthorExistsError) Error() string {
	return fmt.Sprintf("an author named %q already exists", e.Name)
}

// ByToken returns the author whose token tok is. An author stored under a
// reserved name (created before names were reserved) is refused: it would
// act as one of the master's own principals.
func (au *Authors) ByToken(tok string) (string, bool) {
	h := hashToken(tok)
	found := ""
	_ = state.Each(au.st, authorsBucket, func(name string, rec authorRecord) {
		if subtle.ConstantTimeCompare([]byte(h), []byte(rec.TokenHash)) == 1 {
			found = name
		}
	})
	if _, reserved := reservedNames[found]; reserved {
		return "", false
	}
	return found, found != ""
}

// Exists reports whether an author called name exists.
func (au *Authors) Exists(name string) bool { return au.st.Has(authorsBucket, name) }

// List returns the authors by name.
func (au *Authors) List() []AuthorView {
	out := []AuthorView{}
	_ = state.Each(au.st, authorsBucket, func(name string, rec authorRecord) {
		out = append(out, AuthorView{Name: name, Created: rec.Created})
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Remove deletes an author: its token stops working at once; its apps keep
// it as their owner (an admin can still change them).
func (au *Authors) Remove(name string) error {
	au.mu.Lock()
	defer au.mu.Unlock()
	var rec authorRecord
	if ok, _ := au.st.Get(authorsBucket, name, &rec); !ok {
		return wire.Errorf(wire.CodeUnknownUser, "no author named %q", name)
	}
	if err := au.st.Delete(authorsBucket, name); err != nil {
		return err
	}
	if au.onRemove == nil {
		return nil
	}
	return au.onRemove(name)
}
