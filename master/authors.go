package master

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"sync"
	"time"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/state"
)

// principal is who makes an admin API request.
type principal struct {
	name  string
	admin bool
	// jobsOnly: the jobs token, which may only use the jobs API.
	jobsOnly bool
}

// jobsPrincipal is who the jobs token acts as.
const jobsPrincipal = "jobs"

// adminPrincipal is the admin token, the dashboard's session and the
// master itself (its start-up apps).
var adminPrincipal = principal{name: "admin", admin: true}

// sharedAuthor is the author the shared author token (author.token) acts
// as; apps deployed before owners existed belong to it.
const sharedAuthor = "author"

// Buckets of the state store.
const (
	authorsBucket = "authors"    // name -> authorRecord
	ownersBucket  = "app-owners" // mount point -> ownerRecord
)

// authorRecord is an author; only a hash of the token is kept.
type authorRecord struct {
	TokenHash string    `json:"tokenHash"` // hex SHA-256
	Created   time.Time `json:"created"`
}

type ownerRecord struct {
	Owner string `json:"owner"`
}

// ownerError refuses a change to an app owned by another author.
type ownerError struct{ mount, owner string }

func (e *ownerError) Error() string {
	return fmt.Sprintf("/%s belongs to the author %q: only that author or an admin may change it", e.mount, e.owner)
}

// owner is the author who owns the app at mount.
func (a *AppManager) owner(mount string) string {
	if a.state == nil {
		return ""
	}
	var rec ownerRecord
	if ok, err := a.state.Get(ownersBucket, mount, &rec); err != nil || !ok || rec.Owner == "" {
		return sharedAuthor // deployed before owners were recorded
	}
	return rec.Owner
}

// setOwner records (or with "" forgets) the owner of mount.
func (a *AppManager) setOwner(mount, owner string) error {
	if a.state == nil {
		return nil
	}
	if owner == "" {
		return a.state.Delete(ownersBucket, mount)
	}
	return a.state.Put(ownersBucket, mount, ownerRecord{Owner: owner})
}

// claim records owner for an existing app that has no owner record yet.
func (a *AppManager) claim(mount, owner string) error {
	if a.state == nil {
		return nil
	}
	var rec ownerRecord
	if ok, err := a.state.Get(ownersBucket, mount, &rec); err == nil && ok && rec.Owner != "" {
		return nil
	}
	return a.setOwner(mount, owner)
}

// authorize allows by to change the app at mount: admins always, authors
// when the mount point is free or theirs.
func (a *AppManager) authorize(mount string, by principal) error {
	if by.admin || a.state == nil {
		return nil
	}
	if _, ok := a.Get(mount); !ok {
		return nil
	}
	if o := a.owner(mount); o != by.name {
		return &ownerError{mount: mount, owner: o}
	}
	return nil
}

// view is the API's description of an app.
func (a *AppManager) view(app wire.App) wire.AppView {
	v := viewOf(app)
	v.Owner = a.owner(app.MountPoint)
	return v
}

// authors manages per-author deploy tokens.
type authors struct {
	st *state.Store
	mu sync.Mutex // add: check and write together
}

var authorRe = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)

// AuthorView is an author as the API lists it (never the token).
type AuthorView struct {
	Name    string    `json:"name"`
	Created time.Time `json:"created"`
}

func hashToken(tok string) string {
	s := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(s[:])
}

// add creates an author and returns its token, shown this once.
func (au *authors) add(name string, now time.Time) (string, error) {
	if !authorRe.MatchString(name) {
		return "", wire.Errorf(wire.CodeInvalid, "name %q must be 1-64 lowercase letters, digits, '.', '-' or '_', starting with a letter or digit", name)
	}
	if name == adminPrincipal.name || name == sharedAuthor {
		return "", wire.Errorf(wire.CodeInvalid, "name %q is reserved (the admin token and the shared author token act as %q and %q)", name, adminPrincipal.name, sharedAuthor)
	}
	au.mu.Lock()
	defer au.mu.Unlock()
	var rec authorRecord
	if ok, _ := au.st.Get(authorsBucket, name, &rec); ok {
		return "", errAuthorExists{name}
	}
	tok := "cba_" + rand.Text()
	if err := au.st.Put(authorsBucket, name, authorRecord{TokenHash: hashToken(tok), Created: now.UTC()}); err != nil {
		return "", err
	}
	return tok, nil
}

type errAuthorExists struct{ name string }

func (e errAuthorExists) Error() string {
	return fmt.Sprintf("an author named %q already exists", e.name)
}

// byToken returns the author whose token tok is.
func (au *authors) byToken(tok string) (string, bool) {
	h := hashToken(tok)
	found := ""
	_ = state.Each(au.st, authorsBucket, func(name string, rec authorRecord) {
		if subtle.ConstantTimeCompare([]byte(h), []byte(rec.TokenHash)) == 1 {
			found = name
		}
	})
	return found, found != ""
}

func (au *authors) list() []AuthorView {
	out := []AuthorView{}
	_ = state.Each(au.st, authorsBucket, func(name string, rec authorRecord) {
		out = append(out, AuthorView{Name: name, Created: rec.Created})
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// remove deletes an author: its token stops working at once; its apps keep
// it as their owner (an admin can still change them).
func (au *authors) remove(name string) error {
	au.mu.Lock()
	defer au.mu.Unlock()
	var rec authorRecord
	if ok, _ := au.st.Get(authorsBucket, name, &rec); !ok {
		return wire.Errorf(wire.CodeUnknownUser, "no author named %q", name)
	}
	return au.st.Delete(authorsBucket, name)
}

type principalKey struct{}

// principalOf is who the auth middleware let through (fails closed: no
// name, no admin).
func principalOf(r *http.Request) principal {
	p, _ := r.Context().Value(principalKey{}).(principal)
	return p
}

func withPrincipal(r *http.Request, p principal) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
}

func (m *Master) authorRoutes(mux *http.ServeMux) {
	mux.Handle("GET /api/v1/authors", m.auth(roleAdmin, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, m.authors.list())
	}))
	mux.Handle("POST /api/v1/authors", m.auth(roleAdmin, func(w http.ResponseWriter, r *http.Request) {
		var f struct {
			Name string `json:"name"`
		}
		if !decodeJSON(w, r, &f) {
			return
		}
		tok, err := m.authors.add(f.Name, m.cfg.Clock.Now())
		if err != nil {
			status := accountStatus(err)
			if _, dup := err.(errAuthorExists); dup {
				status = http.StatusConflict
			}
			apiError(w, status, err.Error())
			return
		}
		m.log.Info().Str("author", f.Name).Msg("author created")
		writeJSON(w, http.StatusCreated, map[string]string{"name": f.Name, "token": tok})
	}))
	mux.Handle("DELETE /api/v1/authors/{name}", m.auth(roleAdmin, func(w http.ResponseWriter, r *http.Request) {
		if err := m.authors.remove(r.PathValue("name")); err != nil {
			apiError(w, accountStatus(err), err.Error())
			return
		}
		m.log.Info().Str("author", r.PathValue("name")).Msg("author removed")
		writeJSON(w, http.StatusOK, map[string]any{"name": r.PathValue("name"), "removed": true})
	}))
}
