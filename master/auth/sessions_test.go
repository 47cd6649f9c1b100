package auth

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/internal/session"
	"github.com/cloudbrowser-go/cloudbrowser/internal/wire"
	"github.com/cloudbrowser-go/cloudbrowser/master/state"
)

// TestEndedSessionsExpire: logouts are kept in the state store (so a
// restarted master still hands them to workers) until every value of the
// session has expired, then pruned; bad input is refused.
func TestEndedSessionsExpire(t *testing.T) {
	path := filepath.Join(t.TempDir(), state.FileName)
	st, err := state.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	var pushed []wire.SessionRevocation
	e := NewEndedSessions(st, clock, zerolog.Nop(), func(_ context.Context, r wire.SessionRevocation) { pushed = append(pushed, r) })
	a, b := session.NewID(), session.NewID()
	ctx := context.Background()
	steps := []struct {
		name    string
		advance time.Duration
		rev     wire.SessionRevocation
		wantErr bool
		want    []string // ids listed afterwards
	}{
		{"first logout", 0, wire.SessionRevocation{ID: a, User: "alice", Expires: now.Add(session.TTL).Unix()}, false, []string{a}},
		{"expiry beyond one lifetime is capped", time.Hour, wire.SessionRevocation{ID: b, User: "bob", Expires: now.Add(100 * session.TTL).Unix()}, false, []string{a, b}},
		{"invalid id", 0, wire.SessionRevocation{ID: "../x", Expires: now.Add(time.Hour).Unix()}, true, []string{a, b}},
		{"a's values have all expired", session.TTL - time.Hour, wire.SessionRevocation{}, true, []string{b}},
		{"b's too", time.Hour, wire.SessionRevocation{}, true, []string{}},
	}
	for _, s := range steps {
		now = now.Add(s.advance)
		err := e.End(ctx, s.rev)
		if (err != nil) != s.wantErr {
			t.Fatalf("%s: err %v", s.name, err)
		}
		var got []string
		for _, r := range e.List() {
			got = append(got, r.ID)
			if r.Expires > now.Add(session.TTL).Unix() {
				t.Fatalf("%s: expiry %d beyond one session lifetime", s.name, r.Expires)
			}
		}
		slices.Sort(got)
		want := slices.Clone(s.want)
		slices.Sort(want)
		if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("%s: listed %v, want %v", s.name, got, want)
		}
		if s.name == "first logout" {
			// A restarted master reads the same list.
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			if st, err = state.Open(path); err != nil {
				t.Fatal(err)
			}
			e.st = st
			if l := e.List(); len(l) != 1 || l[0] != s.rev {
				t.Fatalf("after reopening: %v", l)
			}
		}
	}
	e.prune()
	if n := len(st.All(endedBucket)); n != 0 {
		t.Fatalf("%d expired entries left in the store", n)
	}
	if len(pushed) != 2 {
		t.Fatalf("pushed %d revocations to workers, want 2", len(pushed))
	}
	_ = st.Close()
}
