package httpserve

import (
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/web"
)

// The Permission Manager's vocabulary and its forms. The default policy is
// the paper's: a user reaches only what they own (the instance they
// created, the browsers they created) unless the owner grants a role.
// Grants live with the instance on its worker (the colocation rule), so the
// worker keeps them and answers Instance.Role and Browser.Role.

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

// ValidPrincipal accepts user names, anonymous ids and Anyone.
func ValidPrincipal(p string) bool {
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

// ErrNotOwner refuses a change only the owner may make.
var ErrNotOwner = errors.New("only the owner can change who may use this")

// grantList lists grants for display.
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
func (s *Server) serveGrant(rw http.ResponseWriter, r *http.Request, id string, in Instance, user, action string) {
	app := in.App()
	switch action {
	case "close-instance":
		if in.Role(user) != RoleOwner {
			s.page(rw, r, id, http.StatusForbidden, "Not closed", ErrNotOwner.Error())
			return
		}
		in.Close(r.Context(), "closed by its owner")
		s.log.Info().Str("request_id", id).Str("instance", in.ID()).Str("by", user).Msg("instance closed by its owner")
		redirectNext(rw, r, "/"+app.MountPoint)
		return
	case "rename-instance", "rename-browser":
		name := strings.TrimSpace(r.PostFormValue("name"))
		if len(name) > 80 || strings.ContainsAny(name, "\x00\n\r") {
			s.page(rw, r, id, http.StatusBadRequest, "Not renamed", "name: at most 80 characters on one line")
			return
		}
		if action == "rename-instance" {
			if in.Role(user) != RoleOwner {
				s.page(rw, r, id, http.StatusForbidden, "Not renamed", ErrNotOwner.Error())
				return
			}
			if err := in.Rename(name); err != nil {
				s.page(rw, r, id, http.StatusServiceUnavailable, "Not renamed", err.Error())
				return
			}
		} else {
			b, ok := in.Browser(r.PostFormValue("browser"))
			if !ok || b.Owner() != user {
				s.page(rw, r, id, http.StatusForbidden, "Not renamed", "Only its owner can rename a browser.")
				return
			}
			b.Rename(name)
		}
		redirectNext(rw, r, "/"+app.MountPoint+"/a/"+in.ID())
		return
	case "close-browser":
		b, ok := in.Browser(r.PostFormValue("browser"))
		if !ok || b.Owner() != user {
			s.page(rw, r, id, http.StatusForbidden, "Not closed", "Only its owner can close a browser.")
			return
		}
		b.Close("closed by its owner")
		redirectNext(rw, r, "/"+app.MountPoint+"/a/"+in.ID())
		return
	}
	role, err := ParseRole(r.PostFormValue("role"))
	principal := strings.TrimSpace(r.PostFormValue("principal"))
	if err == nil && !ValidPrincipal(principal) {
		err = fmt.Errorf("share with: %q is not a user name (or * for anyone with the link)", principal)
	}
	if err == nil {
		switch action {
		case "grant-instance":
			err = in.Grant(r.Context(), user, principal, role)
		case "grant-browser":
			if b, ok := in.Browser(r.PostFormValue("browser")); !ok {
				err = fmt.Errorf("no such browser in this instance")
			} else {
				err = b.Grant(r.Context(), user, principal, role)
			}
		default:
			err = fmt.Errorf("unknown action %q", action)
		}
	}
	if err != nil {
		status := http.StatusBadRequest
		switch {
		case errors.Is(err, ErrNotOwner):
			status = http.StatusForbidden
		case errors.Is(err, ErrNotSaved):
			status = http.StatusServiceUnavailable
		}
		s.page(rw, r, id, status, "Not shared", err.Error())
		return
	}
	s.log.Info().Str("request_id", id).Str("instance", in.ID()).Str("by", user).Str("principal", principal).
		Str("role", role.String()).Str("action", action).Msg("permission changed")
	if app.Strategy == wire.SingleBrowserPerUser {
		// Its instance URL opens the owner's browser: back to the landing
		// page, where the instance is shared.
		redirectNext(rw, r, "/"+app.MountPoint)
		return
	}
	redirectNext(rw, r, "/"+app.MountPoint+"/a/"+in.ID())
}
