package auth

import (
	"context"
	"net/http"
)

// Principal is who makes an admin API request.
type Principal struct {
	Name  string
	Admin bool
	// JobsOnly: the jobs token, which may only use the jobs API.
	JobsOnly bool
	// AutomationOnly: the automation token, which may only use the
	// sessions API (docs/automation.md).
	AutomationOnly bool
}

// JobsPrincipal is who the jobs token acts as.
const JobsPrincipal = "jobs"

// AutomationPrincipal is who the automation token acts as.
const AutomationPrincipal = "automation"

// SharedAuthor is the author the shared author token (author.token) acts
// as; apps deployed before owners existed belong to it.
const SharedAuthor = "author"

// AdminPrincipal is the admin token, the dashboard's session and the
// master itself (its start-up apps).
var AdminPrincipal = Principal{Name: "admin", Admin: true}

// Sees reports whether p may read, list or cancel what user submitted: its
// own, and the admin everything. Another principal's job or monitor is
// answered as if it did not exist (404), so ids reveal nothing.
func (p Principal) Sees(user string) bool {
	return p.Admin || (p.Name != "" && p.Name == user)
}

// Role is what a request needs of its principal.
type Role int

// Roles. RoleJobs and RoleAutomation are side by side, not in order: the
// jobs token passes only the one, the automation token only the other;
// authors pass both and RoleAuthor, the admin everything (Auth.Check).
const (
	RoleJobs       Role = iota // submits and reads jobs, renders and monitors
	RoleAuthor                 // deploys, lists and changes their own applications (and jobs, sessions)
	RoleAdmin                  // everything
	RoleAutomation             // opens, reads and closes automation sessions
)

type principalKey struct{}

// PrincipalOf is who the authentication let through (fails closed: no
// name, no admin).
func PrincipalOf(r *http.Request) Principal {
	p, _ := r.Context().Value(principalKey{}).(Principal)
	return p
}

// WithPrincipal returns r carrying p for PrincipalOf.
func WithPrincipal(r *http.Request, p Principal) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
}
