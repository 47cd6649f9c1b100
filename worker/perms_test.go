package worker

import (
	"errors"
	"testing"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/worker/httpserve"
)

func TestPermissions(t *testing.T) {
	newInst := func() (*instance, *vbrowser, *vbrowser) {
		in := &instance{info: wire.InstanceInfo{ID: "w-a.x", Owner: "alice"}, perms: map[string]httpserve.Role{},
			browsers: map[string]*vbrowser{}, byUser: map[string]string{}}
		ab := &vbrowser{id: "ba", inst: in, owner: "alice", perms: map[string]httpserve.Role{}}
		bb := &vbrowser{id: "bb", inst: in, owner: "bob", perms: map[string]httpserve.Role{}}
		return in, ab, bb
	}
	type grant struct {
		by, principal string
		role          httpserve.Role
		browser       string // "" = instance
		err           error
	}
	tests := []struct {
		name   string
		grants []grant
		user   string
		ofB    string // "ba" or "bb"
		want   httpserve.Role
	}{
		{"default: own browser", nil, "bob", "bb", httpserve.RoleOwner},
		{"default: others' browsers are closed", nil, "bob", "ba", httpserve.RoleNone},
		{"default: instance owner does not own others' browsers", nil, "alice", "bb", httpserve.RoleNone},
		{"anonymous nobody", nil, "", "ba", httpserve.RoleNone},
		{"browser grant to a user", []grant{{"alice", "bob", httpserve.RoleReader, "ba", nil}}, "bob", "ba", httpserve.RoleReader},
		{"browser grant to anyone", []grant{{"alice", httpserve.Anyone, httpserve.RoleReaderWriter, "ba", nil}}, "carol", "ba", httpserve.RoleReaderWriter},
		{"instance grant covers its browsers", []grant{{"alice", "carol", httpserve.RoleReader, "", nil}}, "carol", "bb", httpserve.RoleReader},
		{"strongest grant wins", []grant{{"alice", "carol", httpserve.RoleReader, "", nil}, {"alice", "carol", httpserve.RoleReaderWriter, "ba", nil}}, "carol", "ba", httpserve.RoleReaderWriter},
		{"revoke", []grant{{"alice", "bob", httpserve.RoleReader, "ba", nil}, {"alice", "bob", httpserve.RoleNone, "ba", nil}}, "bob", "ba", httpserve.RoleNone},
		{"non-owner cannot grant on the instance", []grant{{"bob", "carol", httpserve.RoleReader, "", httpserve.ErrNotOwner}}, "carol", "ba", httpserve.RoleNone},
		{"non-owner cannot grant on a browser", []grant{{"carol", "carol", httpserve.RoleReader, "ba", httpserve.ErrNotOwner}}, "carol", "ba", httpserve.RoleNone},
		{"instance owner cannot grant on others' browsers", []grant{{"alice", "carol", httpserve.RoleReader, "bb", httpserve.ErrNotOwner}}, "carol", "bb", httpserve.RoleNone},
		{"owner cannot be granted", []grant{{"alice", "carol", httpserve.RoleOwner, "", errors.New("any")}}, "carol", "ba", httpserve.RoleNone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in, ab, bb := newInst()
			bs := map[string]*vbrowser{"ba": ab, "bb": bb}
			for _, g := range tc.grants {
				var err error
				if g.browser == "" {
					err = in.grantInstance(g.by, g.principal, g.role)
				} else {
					err = in.grantBrowser(bs[g.browser], g.by, g.principal, g.role)
				}
				if (err == nil) != (g.err == nil) || (g.err == httpserve.ErrNotOwner && !errors.Is(err, httpserve.ErrNotOwner)) {
					t.Fatalf("grant %+v: %v", g, err)
				}
			}
			if got := in.browserRole(bs[tc.ofB], tc.user); got != tc.want {
				t.Fatalf("role of %q on %s = %s, want %s", tc.user, tc.ofB, got, tc.want)
			}
		})
	}
}
