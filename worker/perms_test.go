package worker

import (
	"errors"
	"testing"

	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
)

func TestPermissions(t *testing.T) {
	newInst := func() (*instance, *vbrowser, *vbrowser) {
		in := &instance{info: wire.InstanceInfo{ID: "w-a.x", Owner: "alice"}, perms: map[string]Role{},
			browsers: map[string]*vbrowser{}, byUser: map[string]string{}}
		ab := &vbrowser{id: "ba", inst: in, owner: "alice", perms: map[string]Role{}}
		bb := &vbrowser{id: "bb", inst: in, owner: "bob", perms: map[string]Role{}}
		return in, ab, bb
	}
	type grant struct {
		by, principal string
		role          Role
		browser       string // "" = instance
		err           error
	}
	tests := []struct {
		name   string
		grants []grant
		user   string
		ofB    string // "ba" or "bb"
		want   Role
	}{
		{"default: own browser", nil, "bob", "bb", RoleOwner},
		{"default: others' browsers are closed", nil, "bob", "ba", RoleNone},
		{"default: instance owner does not own others' browsers", nil, "alice", "bb", RoleNone},
		{"anonymous nobody", nil, "", "ba", RoleNone},
		{"browser grant to a user", []grant{{"alice", "bob", RoleReader, "ba", nil}}, "bob", "ba", RoleReader},
		{"browser grant to anyone", []grant{{"alice", Anyone, RoleReaderWriter, "ba", nil}}, "carol", "ba", RoleReaderWriter},
		{"instance grant covers its browsers", []grant{{"alice", "carol", RoleReader, "", nil}}, "carol", "bb", RoleReader},
		{"strongest grant wins", []grant{{"alice", "carol", RoleReader, "", nil}, {"alice", "carol", RoleReaderWriter, "ba", nil}}, "carol", "ba", RoleReaderWriter},
		{"revoke", []grant{{"alice", "bob", RoleReader, "ba", nil}, {"alice", "bob", RoleNone, "ba", nil}}, "bob", "ba", RoleNone},
		{"non-owner cannot grant on the instance", []grant{{"bob", "carol", RoleReader, "", errNotOwner}}, "carol", "ba", RoleNone},
		{"non-owner cannot grant on a browser", []grant{{"carol", "carol", RoleReader, "ba", errNotOwner}}, "carol", "ba", RoleNone},
		{"instance owner cannot grant on others' browsers", []grant{{"alice", "carol", RoleReader, "bb", errNotOwner}}, "carol", "bb", RoleNone},
		{"owner cannot be granted", []grant{{"alice", "carol", RoleOwner, "", errors.New("any")}}, "carol", "ba", RoleNone},
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
				if (err == nil) != (g.err == nil) || (g.err == errNotOwner && !errors.Is(err, errNotOwner)) {
					t.Fatalf("grant %+v: %v", g, err)
				}
			}
			if got := in.browserRole(bs[tc.ofB], tc.user); got != tc.want {
				t.Fatalf("role of %q on %s = %s, want %s", tc.user, tc.ofB, got, tc.want)
			}
		})
	}
	for _, s := range []string{"reader", "reader-writer", "none"} {
		if _, err := ParseRole(s); err != nil {
			t.Error(err)
		}
	}
	if _, err := ParseRole("owner"); err == nil {
		t.Error("owner must not be grantable")
	}
}
