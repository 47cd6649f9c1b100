package master

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/apijson"
	"github.com/cloudbrowser-go/cloudbrowser/master/auth"
	"github.com/cloudbrowser-go/cloudbrowser/master/state"
)

// Who owns each application, and who else may name it in a job. The
// principals are package auth's; what they may do to an app is decided
// here.

// Buckets of the state store.
const (
	ownersBucket   = "app-owners"    // mount point -> ownerRecord
	jobUsersBucket = "app-job-users" // mount point -> jobUsersRecord
)

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
		return auth.SharedAuthor // deployed before owners were recorded
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
func (a *AppManager) authorize(mount string, by auth.Principal) error {
	if by.Admin || a.state == nil {
		return nil
	}
	if _, ok := a.Get(mount); !ok {
		return nil
	}
	if o := a.owner(mount); o != by.Name {
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

// ---- Who may name an app in a job
//
// A job with "app" runs in a browser of that app's pool, logged in by the
// pool's init sequence as the app's author set it up: only the app's owner,
// the admin, and the principals the owner granted (its "job users") may
// name it. The grant is kept per mount point with the owner who made it,
// so a mount point removed and deployed again by another author does not
// carry the old owner's grants.
// Automation sessions on an app follow the same rule (sessionapi.go).

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
	if owner == auth.AdminPrincipal.Name {
		return []string{auth.JobsPrincipal}
	}
	return []string{}
}

// ownerIn is AppManager.owner read in tx.
func ownerIn(tx state.ReadTx, mount string) string {
	var rec ownerRecord
	if raw := tx.GetRaw(ownersBucket, mount); raw == nil || json.Unmarshal(raw, &rec) != nil || rec.Owner == "" {
		return auth.SharedAuthor // deployed before owners were recorded
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
	case user == auth.AdminPrincipal.Name:
		return true // no author may take the name: it is the admin
	case a.owner(mount) == user:
		return true
	}
	return slices.Contains(a.jobUsers(mount), user)
}

// mayUseApp is userMayUseApp for the principal of a request.
func (a *AppManager) mayUseApp(p auth.Principal, mount string) bool {
	return p.Admin || a.userMayUseApp(p.Name, mount)
}

// jobUsersView is the API's answer about an app's job users.
type jobUsersView struct {
	App      string   `json:"app"`
	Owner    string   `json:"owner"`
	JobUsers []string `json:"jobUsers"`
}

func (api *adminAPI) jobUserRoutes(mux *http.ServeMux) {
	mux.Handle("GET /api/v1/apps/{name}/job-users", api.auth(auth.RoleAuthor, func(w http.ResponseWriter, r *http.Request) {
		api.jobUsersAction(w, r, func(name string) ([]string, error) { return api.apps.jobUsers(name), nil })
	}))
	set := func(on bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			user := r.PathValue("principal")
			api.jobUsersAction(w, r, func(name string) ([]string, error) {
				if err := api.checkJobUser(user, on); err != nil {
					return nil, err
				}
				users, err := api.apps.setJobUser(name, user, on)
				if err == nil {
					api.log.Info().Str("app", name).Str("principal", user).Bool("granted", on).
						Str("by", auth.PrincipalOf(r).Name).Msg("job users of an application changed")
				}
				return users, err
			})
		}
	}
	mux.Handle("PUT /api/v1/apps/{name}/job-users/{principal}", api.auth(auth.RoleAuthor, set(true)))
	mux.Handle("DELETE /api/v1/apps/{name}/job-users/{principal}", api.auth(auth.RoleAuthor, set(false)))
}

// principalField is bad input about the principal of a grant.
type principalField struct {
	status int
	msg    string
}

func (e *principalField) Error() string { return e.msg }

// checkJobUser checks the principal of a grant: an existing author, the
// shared author, the jobs token or the automation token; the admin needs
// none. A revocation
// takes any name, so a removed principal can still be cleaned up.
func (api *adminAPI) checkJobUser(user string, grant bool) error {
	if !grant {
		return nil
	}
	switch {
	case user == auth.AdminPrincipal.Name:
		return &principalField{http.StatusBadRequest, `principal: "admin" may always use every app's pool`}
	case user == auth.SharedAuthor || user == auth.JobsPrincipal || user == auth.AutomationPrincipal:
		return nil
	case !auth.ValidAuthorName(user):
		return &principalField{http.StatusBadRequest, fmt.Sprintf("principal: %q is not a principal name", user)}
	case !api.access.Authors().Exists(user):
		return &principalField{http.StatusNotFound, fmt.Sprintf("principal: no author named %q (principals: authors, %q, %q, %q)", user, auth.SharedAuthor, auth.JobsPrincipal, auth.AutomationPrincipal)}
	}
	return nil
}

// jobUsersAction runs fn on the app named in the path when the caller
// owns it (or is the admin) and answers its job users.
func (api *adminAPI) jobUsersAction(w http.ResponseWriter, r *http.Request, fn func(name string) ([]string, error)) {
	name := r.PathValue("name")
	if _, ok := api.apps.Get(name); !ok {
		apijson.Error(w, http.StatusNotFound, "no application is mounted at /"+name)
		return
	}
	if err := api.apps.authorize(name, auth.PrincipalOf(r)); err != nil {
		apijson.Error(w, appErrorStatus(err), err.Error())
		return
	}
	users, err := fn(name)
	var pf *principalField
	switch {
	case errors.As(err, &pf):
		apijson.Write(w, pf.status, map[string]any{"status": pf.status, "error": pf.msg, "field": "principal"})
		return
	case err != nil:
		apijson.Error(w, http.StatusInternalServerError, err.Error())
		return
	}
	if users == nil {
		users = []string{}
	}
	apijson.Write(w, http.StatusOK, jobUsersView{App: name, Owner: api.apps.owner(name), JobUsers: users})
}
