package worker

import (
	"fmt"

	"github.com/cloudbrowser-go/cloudbrowser/worker/httpserve"
)

// The Permission Manager: roles on instances and browsers (the roles and
// the share forms are httpserve's). The default policy is the paper's: a
// user reaches only what they own (the instance they created, the browsers
// they created) unless the owner grants a role. Grants live with the
// instance on its worker (the colocation rule).

// instanceRole is user's role on the instance. Call with in.mu held.
func (in *instance) instanceRoleLocked(user string) httpserve.Role {
	if user != "" && user == in.info.Owner {
		return httpserve.RoleOwner
	}
	return max(in.perms[user], in.perms[httpserve.Anyone])
}

// browserRole is user's role on a browser of the instance: the strongest
// of ownership, a grant on the browser and a grant on the instance.
func (in *instance) browserRole(b *vbrowser, user string) httpserve.Role {
	if user == "" {
		return httpserve.RoleNone
	}
	if user == b.owner {
		return httpserve.RoleOwner
	}
	// Owning the instance is not owning its users' browsers (in a
	// singleAppInstance app the "owner" is just the first visitor): only
	// grants count.
	in.mu.Lock()
	ir := max(in.perms[user], in.perms[httpserve.Anyone])
	in.mu.Unlock()
	b.subMu.Lock()
	br := max(b.perms[user], b.perms[httpserve.Anyone])
	b.subMu.Unlock()
	return min(max(ir, br), httpserve.RoleReaderWriter) // only the creator owns
}

func (in *instance) instanceRole(user string) httpserve.Role {
	if user == "" {
		return httpserve.RoleNone
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.instanceRoleLocked(user)
}

// grantInstance sets principal's role on the instance (RoleNone revokes).
// Only the owner may grant.
func (in *instance) grantInstance(by, principal string, role httpserve.Role) error {
	if !httpserve.ValidPrincipal(principal) || role >= httpserve.RoleOwner {
		return fmt.Errorf("cannot grant %s to %q", role, principal)
	}
	if in.instanceRole(by) != httpserve.RoleOwner {
		return httpserve.ErrNotOwner
	}
	return in.saveGrant(principal, role)
}

// setGrant records a grant on the instance without checking who asks.
func (in *instance) setGrant(principal string, role httpserve.Role) {
	in.mu.Lock()
	defer in.mu.Unlock()
	setRole(in.perms, principal, role)
}

// setGrant records a grant on the browser without checking who asks.
func (b *vbrowser) setGrant(principal string, role httpserve.Role) {
	b.subMu.Lock()
	defer b.subMu.Unlock()
	setRole(b.perms, principal, role)
}

// setRole grants role in perms; RoleNone takes the grant away.
func setRole(perms map[string]httpserve.Role, principal string, role httpserve.Role) {
	if role == httpserve.RoleNone {
		delete(perms, principal)
	} else {
		perms[principal] = role
	}
}

// grantBrowser sets principal's role on one browser; only its owner may.
func (in *instance) grantBrowser(b *vbrowser, by, principal string, role httpserve.Role) error {
	if !httpserve.ValidPrincipal(principal) || role >= httpserve.RoleOwner {
		return fmt.Errorf("cannot grant %s to %q", role, principal)
	}
	if by == "" || by != b.owner {
		return httpserve.ErrNotOwner
	}
	b.setGrant(principal, role)
	return nil
}

// granted applies a changed grant where it matters beyond the next
// request: connected clients of the affected browsers get their new role
// (or are disconnected when it is gone). The master learned instance grants
// when it stored them (saveGrant), which lists the instance on the named
// user's landing page. b is nil for a grant on the whole instance.
func (in *instance) granted(b *vbrowser) {
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
		if p == httpserve.Anyone {
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
