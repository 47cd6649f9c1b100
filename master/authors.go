package master

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
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
	authorsBucket  = "authors"       // name -> authorRecord
	ownersBucket   = "app-owners"    // mount point -> ownerRecord
	jobUsersBucket = "app-job-users" // mount point -> jobUsersRecord
)

// reservedNames are the principals the master's own tokens act as, with
// the token: an author of that name would share its jobs, render cache
// partition and grants.
var reservedNames = map[string]string{
	adminPrincipal.name: "the admin token",
	sharedAuthor:        "the shared author token (author.token)",
	jobsPrincipal:       "the jobs token (jobs.token)",
}

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
	if tok, ok := reservedNames[name]; ok {
		return "", wire.Errorf(wire.CodeInvalid, "name %q is reserved: %s acts as %q; choose another name", name, tok, name)
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

// byToken returns the author whose token tok is. An author stored under a
// reserved name (created before names were reserved) is refused: it would
// act as one of the master's own principals.
func (au *authors) byToken(tok string) (string, bool) {
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

// exists reports whether an author called name exists.
func (au *authors) exists(name string) bool { return au.st.Has(authorsBucket, name) }

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
	if err := au.st.Delete(authorsBucket, name); err != nil {
		return err
	}
	// An author created later under the same name must not inherit the
	// right to use other authors' pools.
	return dropJobUser(au.st, name)
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
			writeJSON(w, status, map[string]any{"status": status, "error": err.Error(), "field": "name"})
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

// ---- Who may name an app in a job
//
// A job with "app" runs in a browser of that app's pool, logged in by the
// pool's init sequence as the app's author set it up: only the app's owner,
// the admin, and the principals the owner granted (its "job users") may
// name it. The grant is kept per mount point with the owner who made it,
// so a mount point removed and deployed again by another author does not
// carry the old owner's grants.

// jobUsersRecord is the job users of one app.
type jobUsersRecord struct {
	// Owner is the app's owner when the list was written; a list of
	// another owner does not apply.
	Owner string   `json:"owner"`
	Users []string `json:"users"`
}

// defaultJobUsers applies until an app's owner changes its list: the
// admin's apps (the start-up set, admin deploys) are the operator's, and
// so is the jobs token, which used them before grants existed; an
// author's apps are the author's alone.
func defaultJobUsers(owner string) []string {
	if owner == adminPrincipal.name {
		return []string{jobsPrincipal}
	}
	return []string{}
}

// ownerIn is AppManager.owner read in tx.
func ownerIn(tx state.ReadTx, mount string) string {
	var rec ownerRecord
	if raw := tx.GetRaw(ownersBucket, mount); raw == nil || json.Unmarshal(raw, &rec) != nil || rec.Owner == "" {
		return sharedAuthor // deployed before owners were recorded
	}
	return rec.Owner
}

// jobUsersIn is the job users of mount as tx sees them, and its owner.
func jobUsersIn(tx state.ReadTx, mount string) (users []string, owner string, err error) {
	owner = ownerIn(tx, mount)
	raw := tx.GetRaw(jobUsersBucket, mount)
	if raw == nil {
		return defaultJobUsers(owner), owner, nil
	}
	var rec jobUsersRecord
	if err := json.Unmarshal(raw, &rec); err != nil {
		return nil, owner, fmt.Errorf("master: job users of /%s: %w", mount, err)
	}
	if rec.Owner != owner {
		return defaultJobUsers(owner), owner, nil
	}
	return rec.Users, owner, nil
}

// jobUsers returns who besides its owner and the admin may name the app at
// mount in a job (nil when the record is unreadable: nobody).
func (a *AppManager) jobUsers(mount string) []string {
	if a.state == nil {
		return nil
	}
	var users []string
	err := a.state.View(func(tx state.ReadTx) error {
		var err error
		users, _, err = jobUsersIn(tx, mount)
		return err
	})
	if err != nil {
		a.log.Warn().Err(err).Str("app", mount).Msg("job users unreadable: only the owner and the admin may use the pool")
		return nil
	}
	return users
}

// setJobUser grants (on) or revokes user's right to name the app at mount
// in a job, and returns the new list.
func (a *AppManager) setJobUser(mount, user string, on bool) ([]string, error) {
	if a.state == nil {
		return nil, errors.New("master: job users need the state store")
	}
	var out []string
	err := a.state.Update(func(tx state.Tx) error {
		users, owner, err := jobUsersIn(tx, mount)
		if err != nil {
			users = nil // an unreadable list is replaced
		}
		users = slices.DeleteFunc(slices.Clone(users), func(u string) bool { return u == user })
		if on {
			users = append(users, user)
			slices.Sort(users)
		}
		out = users
		return tx.Put(jobUsersBucket, mount, jobUsersRecord{Owner: owner, Users: users})
	})
	if err != nil {
		return nil, fmt.Errorf("master: job users of /%s: %w", mount, err)
	}
	return out, nil
}

// dropJobUser removes user from every app's job users (the author was
// removed).
func dropJobUser(st *state.Store, user string) error {
	var mounts []string
	_ = state.Each(st, jobUsersBucket, func(mount string, rec jobUsersRecord) {
		if slices.Contains(rec.Users, user) {
			mounts = append(mounts, mount)
		}
	})
	for _, mount := range mounts {
		err := st.Update(func(tx state.Tx) error {
			var rec jobUsersRecord
			if raw := tx.GetRaw(jobUsersBucket, mount); raw == nil || json.Unmarshal(raw, &rec) != nil {
				return nil
			}
			rec.Users = slices.DeleteFunc(rec.Users, func(u string) bool { return u == user })
			return tx.Put(jobUsersBucket, mount, rec)
		})
		if err != nil {
			return fmt.Errorf("master: job users of /%s: %w", mount, err)
		}
	}
	return nil
}

// userMayUseApp reports whether the principal called user may name the
// app at mount in a job: the admin, the app's owner, or one of its job
// users. A job without a user (none is stored so) may not.
func (a *AppManager) userMayUseApp(user, mount string) bool {
	switch {
	case user == "":
		return false
	case user == adminPrincipal.name:
		return true // no author may take the name: it is the admin
	case a.owner(mount) == user:
		return true
	}
	return slices.Contains(a.jobUsers(mount), user)
}

// mayUseApp is userMayUseApp for the principal of a request.
func (a *AppManager) mayUseApp(p principal, mount string) bool {
	return p.admin || a.userMayUseApp(p.name, mount)
}

// jobUsersView is the API's answer about an app's job users.
type jobUsersView struct {
	App      string   `json:"app"`
	Owner    string   `json:"owner"`
	JobUsers []string `json:"jobUsers"`
}

func (m *Master) jobUserRoutes(mux *http.ServeMux) {
	mux.Handle("GET /api/v1/apps/{name}/job-users", m.auth(roleAuthor, func(w http.ResponseWriter, r *http.Request) {
		m.jobUsersAction(w, r, func(name string) ([]string, error) { return m.apps.jobUsers(name), nil })
	}))
	set := func(on bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			user := r.PathValue("principal")
			m.jobUsersAction(w, r, func(name string) ([]string, error) {
				if err := m.checkJobUser(user, on); err != nil {
					return nil, err
				}
				users, err := m.apps.setJobUser(name, user, on)
				if err == nil {
					m.log.Info().Str("app", name).Str("principal", user).Bool("granted", on).
						Str("by", principalOf(r).name).Msg("job users of an application changed")
				}
				return users, err
			})
		}
	}
	mux.Handle("PUT /api/v1/apps/{name}/job-users/{principal}", m.auth(roleAuthor, set(true)))
	mux.Handle("DELETE /api/v1/apps/{name}/job-users/{principal}", m.auth(roleAuthor, set(false)))
}

// principalField is bad input about the principal of a grant.
type principalField struct {
	status int
	msg    string
}

func (e *principalField) Error() string { return e.msg }

// checkJobUser checks the principal of a grant: an existing author, the
// shared author or the jobs token; the admin needs none. A revocation
// takes any name, so a removed principal can still be cleaned up.
func (m *Master) checkJobUser(user string, grant bool) error {
	if !grant {
		return nil
	}
	switch {
	case user == adminPrincipal.name:
		return &principalField{http.StatusBadRequest, `principal: "admin" may always use every app's pool`}
	case user == sharedAuthor || user == jobsPrincipal:
		return nil
	case !authorRe.MatchString(user):
		return &principalField{http.StatusBadRequest, fmt.Sprintf("principal: %q is not a principal name", user)}
	case !m.authors.exists(user):
		return &principalField{http.StatusNotFound, fmt.Sprintf("principal: no author named %q (principals: authors, %q, %q)", user, sharedAuthor, jobsPrincipal)}
	}
	return nil
}

// jobUsersAction runs fn on the app named in the path when the caller
// owns it (or is the admin) and answers its job users.
func (m *Master) jobUsersAction(w http.ResponseWriter, r *http.Request, fn func(name string) ([]string, error)) {
	name := r.PathValue("name")
	if _, ok := m.apps.Get(name); !ok {
		apiError(w, http.StatusNotFound, "no application is mounted at /"+name)
		return
	}
	if err := m.apps.authorize(name, principalOf(r)); err != nil {
		apiError(w, appErrorStatus(err), err.Error())
		return
	}
	users, err := fn(name)
	var pf *principalField
	switch {
	case errors.As(err, &pf):
		writeJSON(w, pf.status, map[string]any{"status": pf.status, "error": pf.msg, "field": "principal"})
		return
	case err != nil:
		apiError(w, http.StatusInternalServerError, err.Error())
		return
	}
	if users == nil {
		users = []string{}
	}
	writeJSON(w, http.StatusOK, jobUsersView{App: name, Owner: m.apps.owner(name), JobUsers: users})
}
