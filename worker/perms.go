package worker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/web"
)

// The Permission Manager: roles on instances and browsers. The default
// policy is the paper's: a user reaches only what they own (the instance
// they created, the browsers they created) unless the owner grants a role.
// Grants live with the instance on its worker (the colocation rule).

// Role is a permission level.
type Role int

// Roles, weakest first.
const (
	RoleNone Role = iota
	RoleReader
	RoleReaderWriter
	RoleOwner
)

// Anyone is the principal that stands for every user holding the URL.
const Anyone = "*"

var roleNames = map[string]Role{"none": RoleNone, "reader": RoleReader, "reader-writer": RoleReaderWriter}

func (r Role) String() string {
	switch r {
	case RoleReader:
		return "reader"
	case RoleReaderWriter:
		return "reader-writer"
	case RoleOwner:
		return "owner"
	}
	return "none"
}

// ParseRole reads a grantable role ("none" revokes).
func ParseRole(s string) (Role, error) {
	r, ok := roleNames[strings.ToLower(strings.TrimSpace(s))]
	if !ok {
		return RoleNone, fmt.Errorf("role %q: must be reader, reader-writer or none", s)
	}
	return r, nil
}

// validPrincipal accepts user names, anonymous ids and Anyone.
func validPrincipal(p string) bool {
	if p == Anyone {
		return true
	}
	if p == "" || len(p) > 70 {
		return false
	}
	for _, c := range p {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// instanceRole is user's role on the instance. Call with in.mu held.
func (in *instance) instanceRoleLocked(user string) Role {
	if user != "" && user == in.info.Owner {
		return RoleOwner
	}
	return max(in.perms[user], in.perms[Anyone])
}

// browserRole is user's role on a browser of the instance: the strongest
// of ownership, a grant on the browser and a grant on the instance.
func (in *instance) browserRole(b *vbrowser, user string) Role {
	if user == "" {
		return RoleNone
	}
	if user == b.owner {
		return RoleOwner
	}
	// Owning the instance is not owning its users' browsers (in a
	// singleAppInstance app the "owner" is just the first visitor): only
	// grants count.
	in.mu.Lock()
	ir := max(in.perms[user], in.perms[Anyone])
	in.mu.Unlock()
	b.subMu.Lock()
	br := max(b.perms[user], b.perms[Anyone])
	b.subMu.Unlock()
	return min(max(ir, br), RoleReaderWriter) // only the creator owns
}

func (in *instance) instanceRole(user string) Role {
	if user == "" {
		return RoleNone
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.instanceRoleLocked(user)
}

// grantInstance sets principal's role on the instance (RoleNone revokes).
// Only the owner may grant.
func (in *instance) grantInstance(by, principal string, role Role) error {
	if !validPrincipal(principal) || role >= RoleOwner {
		return fmt.Errorf("cannot grant %s to %q", role, principal)
	}
	if in.instanceRole(by) != RoleOwner {
		return errNotOwner
	}
	return in.saveGrant(principal, role)
}

// setGrant records a grant on the instance without checking who asks.
func (in *instance) setGrant(principal string, role Role) {
	in.mu.Lock()
	defer in.mu.Unlock()
	setRole(in.perms, principal, role)
}

// setGrant records a grant on the browser without checking who asks.
func (b *vbrowser) setGrant(principal string, role Role) {
	b.subMu.Lock()
	defer b.subMu.Unlock()
	setRole(b.perms, principal, role)
}

// setRole grants role in perms; RoleNone takes the grant away.
func setRole(perms map[string]Role, principal string, role Role) {
	if role == RoleNone {
		delete(perms, principal)
	} else {
		perms[principal] = role
	}
}

// grantBrowser sets principal's role on one browser; only its owner may.
func (in *instance) grantBrowser(b *vbrowser, by, principal string, role Role) error {
	if !validPrincipal(principal) || role >= RoleOwner {
		return fmt.Errorf("cannot grant %s to %q", role, principal)
	}
	if by == "" || by != b.owner {
		return errNotOwner
	}
	b.setGrant(principal, role)
	return nil
}

var errNotOwner = errors.New("only the owner can change who may use this")

// granted applies a changed grant where it matters beyond the next
// request: connected clients of the affected browsers get their new role
// (or are disconnected when it is gone). The master learned instance grants
// when it stored them (saveGrant), which lists the instance on the named
// user's landing page. b is nil for a grant on the whole instance.
func (a *AppManager) granted(ctx context.Context, in *instance, b *vbrowser, principal string, role Role) {
	targets := []*vbrowser{b}
	if b == nil {
		targets = in.browserList()
	}
	for _, vb := range targets {
		vb.hub.Recheck()
	}
}

// sharedLocked is the instance's grants to named users, for the master.
// Call with in.mu held.
func (in *instance) sharedLocked() map[string]string {
	var out map[string]string
	for p, r := range in.perms {
		if p == Anyone {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[p] = r.String()
	}
	return out
}

// hasBrowserFor reports whether user already has a browser in the instance.
func (in *instance) hasBrowserFor(user string) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	_, ok := in.byUser[user]
	return ok
}

// grants lists the grants of the instance and of one browser for display.
func grantList(m map[string]Role) []web.Grant {
	out := make([]web.Grant, 0, len(m))
	for p, r := range m {
		out = append(out, web.Grant{Principal: p, Role: r.String()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Principal < out[j].Principal })
	return out
}

// serveGrant handles the share forms of the instance page:
// action=grant-instance or grant-browser (with browser=<id>), principal,
// role (reader, reader-writer, none to revoke).
func (w *Worker) serveGrant(rw http.ResponseWriter, r *http.Request, id string, in *instance, user, action string) {
	switch action {
	case "close-instance":
		if in.instanceRole(user) != RoleOwner {
			w.page(rw, r, id, http.StatusForbidden, "Not closed", errNotOwner.Error())
			return
		}
		w.apps.closeInstance(r.Context(), in.info.ID, "closed by its owner")
		w.log.Info().Str("request_id", id).Str("instance", in.info.ID).Str("by", user).Msg("instance closed by its owner")
		redirectNext(rw, r, "/"+in.app.MountPoint)
		return
	case "rename-instance", "rename-browser":
		name := strings.TrimSpace(r.PostFormValue("name"))
		if len(name) > 80 || strings.ContainsAny(name, "\x00\n\r") {
			w.page(rw, r, id, http.StatusBadRequest, "Not renamed", "name: at most 80 characters on one line")
			return
		}
		if action == "rename-instance" {
			if in.instanceRole(user) != RoleOwner {
				w.page(rw, r, id, http.StatusForbidden, "Not renamed", errNotOwner.Error())
				return
			}
			if err := in.saveName(name); err != nil {
				w.page(rw, r, id, http.StatusServiceUnavailable, "Not renamed", err.Error())
				return
			}
		} else {
			b, ok := in.browser(r.PostFormValue("browser"))
			if !ok || b.owner != user {
				w.page(rw, r, id, http.StatusForbidden, "Not renamed", "Only its owner can rename a browser.")
				return
			}
			b.subMu.Lock()
			b.name = name
			b.subMu.Unlock()
		}
		redirectNext(rw, r, "/"+in.app.MountPoint+"/a/"+in.info.ID)
		return
	case "close-browser":
		b, ok := in.browser(r.PostFormValue("browser"))
		if !ok || b.owner != user {
			w.page(rw, r, id, http.StatusForbidden, "Not closed", "Only its owner can close a browser.")
			return
		}
		w.apps.closeBrowser(in, b, "closed by its owner")
		redirectNext(rw, r, "/"+in.app.MountPoint+"/a/"+in.info.ID)
		return
	}
	role, err := ParseRole(r.PostFormValue("role"))
	principal := strings.TrimSpace(r.PostFormValue("principal"))
	if err == nil && !validPrincipal(principal) {
		err = fmt.Errorf("share with: %q is not a user name (or * for anyone with the link)", principal)
	}
	var b *vbrowser
	if err == nil {
		switch action {
		case "grant-instance":
			err = in.grantInstance(user, principal, role)
		case "grant-browser":
			var ok bool
			if b, ok = in.browser(r.PostFormValue("browser")); !ok {
				err = fmt.Errorf("no such browser in this instance")
			} else {
				err = in.grantBrowser(b, user, principal, role)
			}
		default:
			err = fmt.Errorf("unknown action %q", action)
		}
	}
	if err != nil {
		status := http.StatusBadRequest
		switch {
		case errors.Is(err, errNotOwner):
			status = http.StatusForbidden
		case errors.Is(err, errNotSaved):
			status = http.StatusServiceUnavailable
		}
		w.page(rw, r, id, status, "Not shared", err.Error())
		return
	}
	w.apps.granted(r.Context(), in, b, principal, role)
	w.log.Info().Str("request_id", id).Str("instance", in.info.ID).Str("by", user).Str("principal", principal).
		Str("role", role.String()).Str("action", action).Msg("permission changed")
	if in.app.Strategy == wire.SingleBrowserPerUser {
		// Its instance URL opens the owner's browser: back to the landing
		// page, where the instance is shared.
		redirectNext(rw, r, "/"+in.app.MountPoint)
		return
	}
	redirectNext(rw, r, "/"+in.app.MountPoint+"/a/"+in.info.ID)
}
